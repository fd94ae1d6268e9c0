"""Where a run's first weights come from: --init-from (a run directory or a transformers model directory)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from electric.checkpoint import CheckpointError, existing_dir, require_local_dir
from electric.pretraining.config import PretrainConfig
from electric.pretraining.modeling import PretrainingModel, SpecialIds


def init_source(path: str) -> tuple[Path | None, Path | None, Path]:
    """(discriminator dir, generator dir, tokenizer dir) of --init-from: a run directory or a model dir."""
    d = require_local_dir(path, "--init-from")
    disc, gen = existing_dir(d / "discriminator"), existing_dir(d / "generator")
    if disc.is_dir() or gen.is_dir():
        disc = disc if disc.is_dir() else None
        gen = gen if gen.is_dir() else None
        return disc, gen, (disc or gen)
    if (d / "config.json").is_file():
        return d, None, d
    raise CheckpointError(f"--init-from {path!r} is neither a run directory nor a model directory (no config.json)")


def masked_lm_source(init_from: str) -> Path | None:
    """The masked LM that --init-from names, when it names one: an MLM run's generator/, or a transformers
    `BertForMaskedLM` / `ElectraForMaskedLM` directory. A discriminator objective warm-starts from it."""
    from electric.pretraining.warm_start import is_masked_lm_dir

    disc_dir, gen_dir, _ = init_source(init_from)
    if disc_dir is None and gen_dir is not None and is_masked_lm_dir(gen_dir):
        return gen_dir
    if disc_dir is not None and gen_dir is None and is_masked_lm_dir(disc_dir):
        return disc_dir
    return None


def build_model(cfg: PretrainConfig, special: SpecialIds, init_from: str) -> PretrainingModel:
    """A fresh model, or one whose weights come from --init-from (`cfg` has its architecture: `adopt_architecture`).
    A discriminator objective from a masked LM is a warm start: the MLM's encoder becomes the discriminator's."""
    if not init_from:
        return PretrainingModel(cfg, special)
    from transformers import AutoConfig, AutoModelForMaskedLM, ElectraForMaskedLM, ElectraForPreTraining

    from electric.pretraining.pre_layer_norm import is_pre_layer_norm, load_electra_model
    from electric.pretraining.warm_start import load_electra_mlm, warm_started_model

    disc_dir, gen_dir, _ = init_source(init_from)
    mlm_dir = masked_lm_source(init_from)
    try:
        if cfg.objective == "mlm":
            return PretrainingModel(cfg, special, generator=load_electra_mlm(mlm_dir or disc_dir or gen_dir))
        if mlm_dir is not None:
            return warm_started_model(cfg, special, load_electra_mlm(mlm_dir))
        disc = load_electra_model(ElectraForPreTraining, disc_dir) if disc_dir else None
        gen = None if gen_dir is None else (
            load_electra_model(ElectraForMaskedLM, gen_dir) if is_pre_layer_norm(AutoConfig.from_pretrained(gen_dir))
            else AutoModelForMaskedLM.from_pretrained(gen_dir))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"--init-from {init_from!r}: {e}") from e
    if cfg.generator_mode == "frozen":
        raise ValueError(f"--generator-mode frozen needs a masked LM to freeze; --init-from {init_from!r} is not one")
    expected = "ElectricForClozeLM" if cfg.objective == "electric" else "ElectraForMaskedLM"
    if gen is not None and type(gen).__name__ != expected:
        print(f"note: --init-from generator is {type(gen).__name__}, objective {cfg.objective} needs "
              f"{expected}; starting a fresh generator", file=sys.stderr)
        gen = None
    sizes = (cfg.hidden_size, cfg.embedding_size)
    if disc is not None and (disc.config.hidden_size, disc.config.embedding_size) != sizes:
        raise ValueError(f"--init-from discriminator has hidden/embedding size {disc.config.hidden_size}/"
                         f"{disc.config.embedding_size}, the config {sizes[0]}/{sizes[1]} (use adopt_architecture)")
    return PretrainingModel(cfg, special, discriminator=disc, generator=gen)


def adopt_architecture(cfg: PretrainConfig, init_from: str) -> PretrainConfig:
    """`cfg` with the architecture of the --init-from source (its config.json decides the sizes)."""
    disc_dir, gen_dir, _ = init_source(init_from)
    mlm_dir = masked_lm_source(init_from)
    src = json.loads(((mlm_dir or disc_dir or gen_dir) / "config.json").read_text())
    sizes = {
        "hidden_size": src["hidden_size"],
        "num_hidden_layers": src["num_hidden_layers"],
        "num_attention_heads": src["num_attention_heads"],
        "intermediate_size": src["intermediate_size"],
        "embedding_size": src.get("embedding_size", src["hidden_size"]),
        "max_seq_length": min(cfg.max_seq_length, src.get("max_position_embeddings", 512)),
        "layer_norm": src.get("layer_norm_position", "post"),
    }
    if gen_dir is not None and cfg.objective != "mlm" and masked_lm_source(init_from) is None:
        sizes["generator_hidden_size"] = json.loads((gen_dir / "config.json").read_text())["hidden_size"]
    return dataclasses.replace(cfg, **sizes)
