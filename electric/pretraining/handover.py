"""The handover: the objective's pretraining model on a masked LM's encoder (`model_on_masked_lm`).

A discriminator learns context far sooner on an encoder a likelihood objective trained first (at CPU budgets, 10-35M
tokens at `tiny`, the replaced-token signal cannot bootstrap it; the ELECTRA paper's two-stage training likewise
started the discriminator from the generator's weights). The masked LM is the run's own warm start (the MLM stage
of `--warm-start`), handed over at the switch (training/pretrain.py); resuming a run past the switch, or one whose
frozen generator is `--init-from`'s MLM, rebuilds the same shape before the checkpoint's weights replace it:

    mlm = masked_lm_from(read_pretrained("runs/mlm/generator"))  # electric.modeling.pretrained: any BERT MLM too
    model = model_on_masked_lm(cfg, special, mlm)                # cfg.objective electra or electric

The discriminator gets the MLM's embeddings and layers (copied) and a fresh head whose output bias sits at the
label prior. The generator is a fresh one sharing those embeddings (`generator_mode` joint), or, for ELECTRA,
the MLM itself, frozen (`frozen`: Fast-ELECTRA's fixed generator, whose samples a temperature schedule smooths).
"""

from __future__ import annotations

from transformers import ElectraForMaskedLM

from electric.modeling.pre_layer_norm import is_pre_layer_norm
from electric.modeling.pretrained import discriminator_on
from electric.pretraining import objectives as obj
from electric.pretraining.config import PretrainConfig
from electric.pretraining.modeling import PretrainingModel, SpecialIds


def model_on_masked_lm(cfg: PretrainConfig, special: SpecialIds, mlm: ElectraForMaskedLM) -> PretrainingModel:
    """The pretraining model for `cfg` (electra or electric) with its discriminator's encoder copied from `mlm`."""
    if cfg.objective == "mlm":
        raise ValueError("the handover gives an MLM's encoder to a discriminator; objective mlm has none")
    mc = mlm.config
    sizes = (mc.hidden_size, mc.embedding_size, mc.num_hidden_layers, mc.vocab_size)
    want = (cfg.hidden_size, cfg.embedding_size, cfg.num_hidden_layers, special.vocab_size)
    if sizes != want:
        raise ValueError(f"the masked LM has hidden/embedding/layers/vocab {sizes}, the run {want}")
    if is_pre_layer_norm(mc) != (cfg.layer_norm == "pre"):
        raise ValueError(f"the masked LM is {'pre' if is_pre_layer_norm(mc) else 'post'}-LayerNorm, the run "
                         f"--layer-norm {cfg.layer_norm}")
    # a fresh head at the label prior whatever --disc-bias-init says: the encoder is trained
    disc = discriminator_on(mc, mlm.electra.state_dict(),
                            obj.disc_output_bias(cfg.objective, cfg.mask_prob, special.vocab_size), "the masked LM")
    # joint: a fresh generator, which PretrainingModel ties to the discriminator's (trained) embeddings
    return PretrainingModel(cfg, special, discriminator=disc, generator=mlm if cfg.generator_mode == "frozen" else None)
