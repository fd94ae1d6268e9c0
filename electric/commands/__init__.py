"""Subcommands of the `electric` CLI (see electric/cli.py)."""

from __future__ import annotations

import os
import sys


def quiet_progress_bars() -> None:
    """Silence every progress bar of this process (`--quiet`): ours, transformers' weight loading, the hub's
    and datasets' bars, and any other tqdm bar (TQDM_DISABLE, read by every tqdm created from now on)."""
    os.environ["TQDM_DISABLE"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # transformers reads it when imported
    os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    # imported before the variables were set: tell them (not imported: nothing to import - an ONNX export needs
    # neither, and a serving install has no transformers)
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
