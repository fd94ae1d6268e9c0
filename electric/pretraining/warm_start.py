"""Warm start: a discriminator whose encoder comes from a masked LM, and the pretraining model built on it.

At CPU budgets (10-35M tokens at `tiny`) the replaced-token signal cannot bootstrap context, while a likelihood
objective does (BENCHMARKS.md); the ELECTRA paper's two-stage training likewise needed the discriminator started
from the generator's weights. So a warm-started run trains MLM first (`--warm-start`, or a user's masked LM
through `--init-from`) and hands its encoder to the discriminator:

    mlm = load_electra_mlm("runs/mlm/generator")                # ElectraForMaskedLM (a BERT MLM is converted)
    model = warm_started_model(cfg, special, mlm)           # cfg.objective electra or electric

The discriminator gets the MLM's embeddings and layers (copied) and a fresh head whose output bias sits at the
label prior. The generator is a fresh one sharing those embeddings (`generator_mode` joint), or, for ELECTRA,
the MLM itself, frozen (`frozen`: Fast-ELECTRA's fixed generator, whose samples a temperature schedule smooths).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForMaskedLM,
    BertForMaskedLM,
    ElectraConfig,
    ElectraForMaskedLM,
    ElectraForPreTraining,
)

from electric.pretraining import objectives as obj
from electric.pretraining.config import PretrainConfig
from electric.pretraining.modeling import PretrainingModel, SpecialIds
from electric.pretraining.pre_layer_norm import electra_model, is_pre_layer_norm, load_electra_model

# A BERT masked LM's parameters under ELECTRA's names (prefix of BERT's name -> prefix of ELECTRA's); the
# encoder layers are the same modules, BERT's MLM head transform is ELECTRA's generator_predictions.
BERT_TO_ELECTRA = (
    ("bert.embeddings.", "electra.embeddings."),
    ("bert.encoder.", "electra.encoder."),
    ("cls.predictions.transform.", "generator_predictions."),
    ("cls.predictions.decoder.", "generator_lm_head."),
    ("cls.predictions.bias", "generator_lm_head.bias"),
)
BERT_IGNORED = ("bert.pooler.", "bert.embeddings.position_ids")


def is_masked_lm_dir(path: str | Path) -> bool:
    """True when `path`'s config.json names a masked LM (not a discriminator, not Electric's cloze model)."""
    cfg = AutoConfig.from_pretrained(path)
    archs = getattr(cfg, "architectures", None) or []
    return cfg.model_type != "electric-cloze" and any(a.endswith("ForMaskedLM") for a in archs)


def load_electra_mlm(path: str | Path) -> ElectraForMaskedLM:
    """A masked LM from a local directory as an `ElectraForMaskedLM` (a `BertForMaskedLM` is converted)."""
    if is_pre_layer_norm(AutoConfig.from_pretrained(path)):
        return load_electra_model(ElectraForMaskedLM, path)
    model = AutoModelForMaskedLM.from_pretrained(path)
    if isinstance(model, BertForMaskedLM):
        return electra_from_bert(model)
    if not isinstance(model, ElectraForMaskedLM):
        raise ValueError(f"{str(path)!r} holds a {type(model).__name__}; a warm start needs an ElectraForMaskedLM "
                         "or a BertForMaskedLM")
    return model


def electra_from_bert(bert: BertForMaskedLM) -> ElectraForMaskedLM:
    """The same network as an `ElectraForMaskedLM` (embedding size = hidden size, so no projection)."""
    c = bert.config
    if c.hidden_act not in ("gelu", "gelu_new", "gelu_python"):
        raise ValueError(f"BERT hidden_act {c.hidden_act!r}: ELECTRA's MLM head uses gelu")
    config = ElectraConfig(
        vocab_size=c.vocab_size, embedding_size=c.hidden_size, hidden_size=c.hidden_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        intermediate_size=c.intermediate_size, hidden_act=c.hidden_act, max_position_embeddings=c.max_position_embeddings,
        type_vocab_size=c.type_vocab_size, layer_norm_eps=c.layer_norm_eps, pad_token_id=c.pad_token_id,
        hidden_dropout_prob=c.hidden_dropout_prob, attention_probs_dropout_prob=c.attention_probs_dropout_prob,
        tie_word_embeddings=True,
    )
    state = {}
    for name, value in bert.state_dict().items():
        if name.startswith(BERT_IGNORED):
            continue
        for src, dst in BERT_TO_ELECTRA:
            if name.startswith(src):
                state[dst + name[len(src):]] = value
                break
        else:
            raise ValueError(f"BertForMaskedLM parameter {name!r} has no ELECTRA counterpart")
    electra = ElectraForMaskedLM(config)
    missing, unexpected = electra.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise ValueError(f"BERT -> ELECTRA conversion: missing {missing}, unexpected {unexpected}")
    return electra


def warm_started_model(cfg: PretrainConfig, special: SpecialIds, mlm: ElectraForMaskedLM) -> PretrainingModel:
    """The pretraining model for `cfg` (electra or electric) with its discriminator's encoder copied from `mlm`."""
    if cfg.objective == "mlm":
        raise ValueError("a warm start hands an MLM's encoder to a discriminator; objective mlm has none")
    mc = mlm.config
    sizes = (mc.hidden_size, mc.embedding_size, mc.num_hidden_layers, mc.vocab_size)
    want = (cfg.hidden_size, cfg.embedding_size, cfg.num_hidden_layers, special.vocab_size)
    if sizes != want:
        raise ValueError(f"the masked LM has hidden/embedding/layers/vocab {sizes}, the run {want}")
    if is_pre_layer_norm(mc) != (cfg.layer_norm == "pre"):
        raise ValueError(f"the masked LM is {'pre' if is_pre_layer_norm(mc) else 'post'}-LayerNorm, the run "
                         f"--layer-norm {cfg.layer_norm}")
    disc = electra_model(ElectraForPreTraining,
                         ElectraConfig(**{**mc.to_dict(), "architectures": ["ElectraForPreTraining"]}))
    missing, unexpected = disc.electra.load_state_dict(mlm.electra.state_dict(), strict=False)
    if unexpected or [k for k in missing if not k.endswith("position_ids")]:
        raise ValueError(f"the masked LM's encoder does not fit the discriminator: missing {missing}, "
                         f"unexpected {unexpected}")
    with torch.no_grad():  # a fresh head at the label prior whatever --disc-bias-init says: the encoder is warm
        disc.discriminator_predictions.dense_prediction.bias.fill_(
            obj.disc_output_bias(cfg.objective, cfg.mask_prob, special.vocab_size))
    # joint: a fresh generator, which PretrainingModel ties to the discriminator's (warm) embeddings
    return PretrainingModel(cfg, special, discriminator=disc, generator=mlm if cfg.generator_mode == "frozen" else None)
