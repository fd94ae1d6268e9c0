"""A BERT-family checkpoint a user already has, as ELECTRA modules: the start of continued pretraining.

    src = read_pretrained("ckpt/all-MiniLM-L6-v2")     # a transformers or sentence-transformers directory
    mlm = masked_lm_from(src)          # ElectraForMaskedLM: the encoder, its MLM head (fresh when it has none)
    disc = discriminator_from(src, bias)  # ElectraForPreTraining: the encoder, a fresh head at `bias`

Accepted: `BertModel`, `BertForMaskedLM`, `BertForPreTraining`, `ElectraModel`, `ElectraForPreTraining` and
`ElectraForMaskedLM` directories, and sentence-transformers directories (`modules.json`) whose first module is
one of them, at the root or in its own folder. A BERT encoder is the same network as ELECTRA's with the
embedding width equal to the hidden width, so its parameters load under ELECTRA's names unchanged; BERT's
pooler and next-sentence head are dropped. Other families (RoBERTa's byte-level BPE, DeBERTa, ...) are refused
with one line naming what is supported.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    BertForMaskedLM,
    BertModel,
    ElectraConfig,
    ElectraForMaskedLM,
    ElectraForPreTraining,
    ElectraModel,
)
from transformers.utils import logging as hf_logging

from electric.checkpoint import CheckpointError, require_local_dir
from electric.modeling.loading import load_model, no_progress_bar, read_model_config

# architecture -> (family, what it carries besides the encoder)
SUPPORTED: dict[str, tuple[str, str]] = {
    "BertModel": ("bert", "encoder"),
    "BertForMaskedLM": ("bert", "mlm"),
    "BertForPreTraining": ("bert", "mlm"),
    "ElectraModel": ("electra", "encoder"),
    "ElectraForMaskedLM": ("electra", "mlm"),
    "ElectraForPreTraining": ("electra", "discriminator"),
}
SUPPORTED_TEXT = ("BERT (BertModel, BertForMaskedLM, BertForPreTraining) or ELECTRA (ElectraModel, "
                  "ElectraForPreTraining, ElectraForMaskedLM) checkpoints, or a sentence-transformers directory of one")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")
# A BERT masked LM's head under ELECTRA's names (BERT's MLM transform is ELECTRA's generator_predictions).
BERT_HEAD_TO_ELECTRA = (
    ("cls.predictions.transform.", "generator_predictions."),
    ("cls.predictions.decoder.", "generator_lm_head."),
    ("cls.predictions.bias", "generator_lm_head.bias"),
)


@dataclass(frozen=True)
class Pretrained:
    """Where a checkpoint's encoder lies and what it is."""

    root: Path  # the directory the user named
    model_dir: Path  # the transformers directory (config.json + weights): root, or a sentence-transformers module
    architecture: str  # one of SUPPORTED
    config: dict  # its config.json
    tokenizer_dir: Path  # where tokenizer.json / vocab.txt are (model_dir, else root)

    @property
    def family(self) -> str:
        return SUPPORTED[self.architecture][0]

    @property
    def carries(self) -> str:
        """encoder, mlm (an MLM head too) or discriminator (ELECTRA's replaced-token head too)."""
        return SUPPORTED[self.architecture][1]


def transformer_dir(root: Path) -> Path:
    """The transformers directory inside `root`: `root` itself, or for a sentence-transformers directory the
    folder of its first module (its `modules.json`; path "" is the root)."""
    modules_file = root / "modules.json"
    if (root / "config.json").is_file() or not modules_file.is_file():
        return root
    try:
        modules = json.loads(modules_file.read_text())
        first = modules[0]
    except (ValueError, IndexError, KeyError, TypeError) as e:
        raise CheckpointError(f"{str(modules_file)!r} is not a sentence-transformers module list: {e}") from e
    if not str(first.get("type", "")).endswith("Transformer"):
        raise CheckpointError(f"{str(modules_file)!r}: the first module is {first.get('type')!r}, not a Transformer")
    return root / first.get("path", "")


def read_pretrained(path: str | Path, what: str = "--init-from") -> Pretrained:
    """The checkpoint in `path`, checked: a supported architecture, weights and a tokenizer. CheckpointError
    (one line, naming `what` and what is supported) otherwise."""
    root = require_local_dir(path, what)
    model_dir = transformer_dir(root)
    if not (model_dir / "config.json").is_file():
        raise CheckpointError(f"{what} {str(path)!r} holds no config.json (nor a sentence-transformers modules.json "
                              "naming a folder that does): not a transformers model directory")
    config = read_model_config(model_dir, what)
    archs = config.get("architectures") or []
    arch = next((a for a in archs if a in SUPPORTED), None)
    if arch is None:  # an untagged config: the bare encoder of its model type
        arch = {"bert": "BertModel", "electra": "ElectraModel"}.get(config.get("model_type", "")) if not archs else None
    if arch is None:
        raise CheckpointError(f"{what} {str(path)!r} holds a {config.get('model_type', '?')} checkpoint "
                              f"({', '.join(archs) or 'no architectures'}); supported: {SUPPORTED_TEXT}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{what} {str(path)!r}: position_embedding_type "
                              f"{config['position_embedding_type']!r}; supported: absolute")
    if not any((model_dir / f).is_file() for f in ("model.safetensors", "pytorch_model.bin")):
        raise CheckpointError(f"{what} {str(path)!r} holds no weights (model.safetensors or pytorch_model.bin) "
                              f"in {str(model_dir)!r}")
    tok = next((d for d in (model_dir, root) if any((d / f).is_file() for f in TOKENIZER_FILES)), None)
    if tok is None:
        raise CheckpointError(f"{what} {str(path)!r} holds no tokenizer (tokenizer.json or vocab.txt)")
    return Pretrained(root, model_dir, arch, config, tok)


def electra_config(src: Pretrained, architecture: str) -> ElectraConfig:
    """The checkpoint's encoder as an ELECTRA config (a BERT's embedding width is its hidden width)."""
    c = dict(src.config)
    if src.family == "bert":
        if c.get("hidden_act", "gelu") not in ("gelu", "gelu_new", "gelu_python"):
            raise CheckpointError(f"{str(src.root)!r}: BERT hidden_act {c['hidden_act']!r}; ELECTRA's heads use gelu")
        c["embedding_size"] = c["hidden_size"]
    keep = ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "hidden_act", "max_position_embeddings", "type_vocab_size", "layer_norm_eps",
            "pad_token_id", "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_position")
    return ElectraConfig(**{k: c[k] for k in keep if k in c}, architectures=[architecture], tie_word_embeddings=True)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' "some weights were not used / newly initialised" lines (we choose the heads ourselves) and its
    weight-loading bar (`no_progress_bar`)."""
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with no_progress_bar():
            yield
    finally:
        hf_logging.set_verbosity(level)


def _encoder_and_head(src: Pretrained) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the encoder's state under ElectraModel's names, the MLM head's under ElectraForMaskedLM's; {} if none)."""
    try:
        with _quiet_transformers():
            if src.family == "electra":
                cls = {"mlm": ElectraForMaskedLM, "discriminator": ElectraForPreTraining}.get(src.carries)
                if cls is None:
                    return ElectraModel.from_pretrained(src.model_dir).state_dict(), {}
                full = load_model(src.model_dir, cls).state_dict()  # ours may be pre-LN
            else:
                model = BertForMaskedLM if src.carries == "mlm" else BertModel
                full = {("" if src.carries == "mlm" else "bert.") + k: v
                        for k, v in model.from_pretrained(src.model_dir).state_dict().items()}
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{str(src.root)!r}: could not load its {src.architecture} weights: {e}") from e
    encoder, head = {}, {}
    for name, value in full.items():
        if name.startswith(("electra.", "bert.")):
            inner = name.split(".", 1)[1]
            if not inner.startswith("pooler."):
                encoder[inner] = value
        elif name.startswith("generator_"):
            head[name] = value
        else:
            for bert_prefix, electra_prefix in BERT_HEAD_TO_ELECTRA:
                if name.startswith(bert_prefix):
                    head[electra_prefix + name[len(bert_prefix):]] = value
    return encoder, head


def _load_encoder(model: ElectraForPreTraining | ElectraForMaskedLM, encoder: dict[str, torch.Tensor],
                  where: str | Path) -> None:
    missing, unexpected = model.electra.load_state_dict(encoder, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    unexpected = [k for k in unexpected if not k.endswith("position_ids")]
    if missing or unexpected:
        raise CheckpointError(f"{str(where)!r}: the encoder does not fit ELECTRA's: missing {missing[:5]}, "
                              f"unexpected {unexpected[:5]}")


def discriminator_on(config: ElectraConfig, encoder: dict[str, torch.Tensor], output_bias: float,
                     where: str | Path) -> ElectraForPreTraining:
    """An `ElectraForPreTraining` of `config` (pre-LN when it says so) whose encoder is `encoder` (ElectraModel's
    state) under a fresh head with its output bias at `output_bias`: a checkpoint's or a warm start's encoder.

    The head's output weights start at zero, so its first outputs are the bias at every token: a random output
    layer on a trained encoder's states ranks replaced tokens by chance, above or below the originals (0.38 AUC on
    all-MiniLM-L6-v2 under one seed), and a short run may not undo that. Its first gradient points it along what
    tells them apart."""
    from electric.modeling.pre_layer_norm import electra_model

    model = electra_model(ElectraForPreTraining, ElectraConfig(**{**config.to_dict(),
                                                                  "architectures": ["ElectraForPreTraining"]}))
    _load_encoder(model, encoder, where)
    with torch.no_grad():
        model.discriminator_predictions.dense_prediction.weight.zero_()
        model.discriminator_predictions.dense_prediction.bias.fill_(output_bias)
    return model


def masked_lm_from(src: Pretrained) -> ElectraForMaskedLM:
    """The checkpoint as an ELECTRA masked LM: its encoder, and its own MLM head when it has one (else a fresh
    head, whose output layer is tied to the word embeddings)."""
    from electric.modeling.pre_layer_norm import electra_model

    encoder, head = _encoder_and_head(src)
    model = electra_model(ElectraForMaskedLM, electra_config(src, "ElectraForMaskedLM"))
    _load_encoder(model, encoder, src.root)
    if head:
        missing, unexpected = model.load_state_dict(head, strict=False)
        if unexpected:
            raise CheckpointError(f"{str(src.root)!r}: MLM head parameters {unexpected[:5]} have no ELECTRA place")
    model.tie_weights()
    return model


def discriminator_from(src: Pretrained, output_bias: float) -> ElectraForPreTraining:
    """The checkpoint's encoder under a replaced-token head: the checkpoint's own for an ELECTRA discriminator,
    else a fresh one whose output bias is `output_bias` (the label prior, so the first logits are calibrated)."""
    if src.carries == "discriminator":
        with _quiet_transformers():
            return load_model(src.model_dir, ElectraForPreTraining).train()
    encoder, _ = _encoder_and_head(src)
    return discriminator_on(electra_config(src, "ElectraForPreTraining"), encoder, output_bias, src.root)


def save_as_electra(src: Pretrained, out: Path) -> Path:
    """The checkpoint's encoder written to `out` as an ELECTRA discriminator directory with its tokenizer files, for
    the code that reads ELECTRA directories (fine-tuning). The discriminator head is fresh and unused there."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    discriminator_from(src, 0.0).save_pretrained(out)
    for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if (src.tokenizer_dir / f).is_file():
            shutil.copy(src.tokenizer_dir / f, out / f)
    return out
