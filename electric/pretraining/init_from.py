"""Where a run's first weights come from: --init-from (a run directory, or any BERT-family checkpoint) and
--init-generator-from, resolved once into an `InitSource`.

    source = resolve_init(path)                       # e.g. a sentence-transformers BertModel directory
    cfg = resolve_config("tiny", "electric", {"init_from": path}, source)  # its sizes, and what it implies
    model = pretraining_model(cfg, special, source)   # its encoder as the discriminator / energy model

The encoder becomes the discriminator (Electric's energy model) under a fresh head at the label prior, unless the
source is a discriminator already (ours, or an ELECTRA one), whose head is kept. The generator / cloze model
comes from --init-generator-from or the run directory's generator/, else is built fresh at the configured width
over the checkpoint's vocabulary. Objective mlm continues the checkpoint as a masked LM (its own MLM head, or a
fresh one). `electric.modeling.pretrained` reads and converts the checkpoints.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from electric.checkpoint import CheckpointError, require_local_dir, run_parts
from electric.modeling.loading import read_model_config
from electric.modeling.pretrained import Pretrained, discriminator_from, masked_lm_from, read_pretrained
from electric.pretraining import objectives as obj
from electric.pretraining.config import PretrainConfig
from electric.pretraining.modeling import PretrainingModel, SpecialIds

if TYPE_CHECKING:
    from transformers import ElectraForMaskedLM

    from electric.modeling.cloze import ElectricForClozeLM


@dataclass(frozen=True)
class InitSource:
    """--init-from (and --init-generator-from), resolved: where each network's first weights are."""

    encoder: Pretrained  # the discriminator's (or the MLM's) encoder: a run's discriminator/ or MLM, a checkpoint
    generator: Path | None  # the generator / cloze model to continue, or None (a fresh one)
    tokenizer: Path  # the tokenizer that goes with the encoder

    def keeps_head(self, objective: str) -> bool:
        """True when the run continues the head the source has: a discriminator's for electra and electric, a masked
        LM's for mlm; False when it puts a fresh head on the encoder."""
        return self.encoder.carries == ("mlm" if objective == "mlm" else "discriminator")

    def architecture(self, objective: str, max_seq_length: int) -> dict[str, Any]:
        """The config fields the run adopts from the source: its sizes, position and token-type vocabularies, where
        its LayerNorms sit, `max_seq_length` capped at its positions (and, continuing a generator, its width)."""
        src = self.encoder.config
        sizes = {
            "hidden_size": src["hidden_size"],
            "num_hidden_layers": src["num_hidden_layers"],
            "num_attention_heads": src["num_attention_heads"],
            "intermediate_size": src["intermediate_size"],
            "embedding_size": src.get("embedding_size", src["hidden_size"]),
            "max_position_embeddings": src.get("max_position_embeddings", 512),
            "max_seq_length": min(max_seq_length, src.get("max_position_embeddings", 512)),
            "type_vocab_size": src.get("type_vocab_size", 2),
            "layer_norm": src.get("layer_norm_position", "post"),
        }
        if self.generator is not None and objective != "mlm":
            sizes["generator_hidden_size"] = read_model_config(self.generator, "generator")["hidden_size"]
        return sizes


def resolve_init(init_from: str, init_generator_from: str = "") -> InitSource:
    """The source of --init-from: a run directory (its discriminator/, else its masked LM generator/), or a
    checkpoint directory (`electric.modeling.pretrained.read_pretrained`). CheckpointError, naming the flag,
    otherwise."""
    d = require_local_dir(init_from, "--init-from")
    parts = run_parts(d)
    generator = None
    if parts:
        disc, gen = parts.get("discriminator"), parts.get("generator")
        encoder = read_pretrained(disc or parts["generator"], "--init-from")  # a run directory has one or both
        generator = gen if disc is not None else None  # a run's own generator goes with its discriminator
    else:
        encoder = read_pretrained(d, "--init-from")
    if init_generator_from:
        generator = require_local_dir(init_generator_from, "--init-generator-from")
        read_model_config(generator, "--init-generator-from")
    return InitSource(encoder, generator, encoder.tokenizer_dir)


def pretraining_model(cfg: PretrainConfig, special: SpecialIds, source: InitSource | None) -> PretrainingModel:
    """A fresh model, or one whose weights come from `source` (`cfg` has its architecture: `adopt_architecture`)."""
    if source is None:
        return PretrainingModel(cfg, special)
    if source.encoder.config.get("vocab_size", special.vocab_size) != special.vocab_size:
        raise CheckpointError(f"--init-from {str(source.encoder.root)!r} has a vocabulary of "
                              f"{source.encoder.config['vocab_size']}, the tokenizer {special.vocab_size}: pass its own "
                              "tokenizer (or none: the checkpoint's is the default)")
    if cfg.objective == "mlm":
        return PretrainingModel(cfg, special, generator=masked_lm_from(source.encoder))
    disc = discriminator_from(source.encoder, obj.disc_output_bias(cfg.objective, cfg.mask_prob, special.vocab_size))
    if disc.config.hidden_size != cfg.hidden_size or disc.config.embedding_size != cfg.embedding_size:
        raise ValueError(f"--init-from discriminator has hidden/embedding size {disc.config.hidden_size}/"
                         f"{disc.config.embedding_size}, the config {cfg.hidden_size}/{cfg.embedding_size} "
                         "(use adopt_architecture)")
    if cfg.generator_mode == "frozen":
        if source.encoder.carries != "mlm":
            raise ValueError(f"--generator-mode frozen needs a masked LM to freeze; --init-from "
                             f"{str(source.encoder.root)!r} is a {source.encoder.architecture}")
        return PretrainingModel(cfg, special, discriminator=disc, generator=masked_lm_from(source.encoder))
    return PretrainingModel(cfg, special, discriminator=disc, generator=load_generator(cfg, source.generator))


def load_generator(cfg: PretrainConfig, path: Path | None) -> ElectraForMaskedLM | ElectricForClozeLM | None:
    """The generator to continue from `path` when it is the kind the objective trains, else None (a fresh one)."""
    if path is None:
        return None
    from transformers import ElectraForMaskedLM

    from electric.modeling.cloze import ElectricForClozeLM
    from electric.modeling.loading import load_model, read_model_config

    cloze = read_model_config(path, "generator").get("model_type") == ElectricForClozeLM.config_class.model_type
    gen: ElectraForMaskedLM | ElectricForClozeLM = (load_model(path, ElectricForClozeLM) if cloze
                                                   else load_model(path, ElectraForMaskedLM)).train()
    expected = "ElectricForClozeLM" if cfg.objective == "electric" else "ElectraForMaskedLM"
    if type(gen).__name__ != expected:
        print(f"note: the generator in {str(path)!r} is a {type(gen).__name__}, objective {cfg.objective} needs "
              f"{expected}; starting a fresh generator", file=sys.stderr)
        return None
    return gen


def adopt_architecture(cfg: PretrainConfig, source: InitSource) -> PretrainConfig:
    """`cfg` with the architecture of the --init-from source (`InitSource.architecture`); the command line gets it
    from `electric.pretraining.config.resolve_config`, with the rest of what the source implies."""
    return dataclasses.replace(cfg, **source.architecture(cfg.objective, cfg.max_seq_length))
