"""One loader for every layer: a model class from a local checkpoint directory, whatever wrote it.

    model = load_model("runs/electric/discriminator", ElectraForPreTraining)   # eval mode
    cloze = load_model("runs/electric/generator", ElectricForClozeLM, dtype=torch.bfloat16)

Scoring (`electric.inference`), the export, fine-tuning and --init-from load through it: a missing or foreign
directory is a CheckpointError naming it, and a pre-LayerNorm checkpoint (`--layer-norm pre`) is built pre-LN
(no transformers class is) instead of loading silently as the post-LN network it is not.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig
from transformers.utils import logging as hf_logging

import electric.modeling.cloze  # noqa: F401 - registers the cloze model, so AutoConfig reads its config.json
from electric.checkpoint import CheckpointError, require_local_dir
from electric.modeling.pre_layer_norm import ModelT, is_pre_layer_norm, load_pre_layer_norm


def read_model_config(model_dir: str | os.PathLike, what: str = "model") -> dict[str, Any]:
    """The config.json of a local model directory, as a dict (CheckpointError when there is none)."""
    d = require_local_dir(model_dir, what)
    path = d / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{what} directory {str(d)!r} has no config.json (not a transformers checkpoint)")
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise CheckpointError(f"{str(path)!r} is not valid JSON: {e}") from e


@contextmanager
def no_progress_bar() -> Iterator[None]:
    """transformers' progress bars ("Loading weights") off while a local checkpoint loads, and as they were after:
    it loads in about a second, and in a log file (where the README promises plain lines) a bar is noise."""
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def load_model(model_dir: str | os.PathLike, cls: type[ModelT], dtype: torch.dtype | None = None,
               **kwargs: Any) -> ModelT:
    """`cls` (a transformers or Electric class, or an Auto class) from `model_dir`, in eval mode, in `dtype` when
    given; `kwargs` go to `from_pretrained` (e.g. attn_implementation). CheckpointError when it does not load."""
    read_model_config(model_dir)
    d = Path(model_dir)
    try:
        config = AutoConfig.from_pretrained(d)
        if is_pre_layer_norm(config):
            model = load_pre_layer_norm(cls, d, config)
            # transformers' stub types PreTrainedModel.to's wrapper as taking a model, not nn.Module.to's arguments
            model = model.to(dtype) if dtype is not None else model  # type: ignore[arg-type]
        else:
            in_dtype: dict[str, Any] = {"dtype": dtype} if dtype is not None else {}
            with no_progress_bar():
                model = cls.from_pretrained(d, **in_dtype, **kwargs)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise CheckpointError(f"could not load {cls.__name__} from {str(d)!r}: {e}") from e
    return model.eval()
