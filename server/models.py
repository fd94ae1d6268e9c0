"""A model the server serves, as loaded: its backend and what the engine and /info need to know of it.

    model = ServedModel(name, path, backend, settings)   # the engine, once per --model, detector and --classifier
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

from electric.checkpoint import training_health
from electric.inference import classify
from electric.inference.backend import Backend
from electric.inference.scoring import METHODS_OF_KIND
from server.settings import Settings

log = logging.getLogger("electric.server")


class ServedModel:
    """One loaded model: its kind and method, the token limit it is served with, its labels, its calibration and
    what the run that made it warned of."""

    def __init__(self, name: str, path: Path, backend: Backend, settings: Settings):
        self.name, self.path, self.backend = name, path, backend
        self.kind: str = backend.kind
        self.tokenizer: Any = cast(Any, backend.tokenizer)  # a transformers or a Rust WordPiece tokenizer (Backend.tokenizer)
        self.pad_id = int(self.tokenizer.pad_token_id or 0)
        # tokens per input: the length the model was trained on (backend.max_length), unless max_tokens_per_input
        # says otherwise - less, or more on purpose, up to the position table (positions the model never trained)
        self.trained_length, self.max_positions = int(backend.max_length), int(backend.max_positions)
        limit = settings.max_tokens_per_input or self.trained_length
        self.max_tokens = min(limit, self.max_positions, settings.max_batch_tokens)
        self.hidden_size = int(backend.config.get("hidden_size") or 256)
        self.labels = classify.label_names(backend.config) if self.kind in ("classifier", "tagger") else []
        self.method = METHODS_OF_KIND[self.kind][0] if self.kind in METHODS_OF_KIND else None  # /v1/score's method
        num_outputs = int(backend.config.get("num_labels") or len(self.labels) or 2)
        self.regression = self.kind == "classifier" and classify.is_regression(backend.config, num_outputs)
        # what the run that made the model said of it at its end (below chance, worse than its start): /info, the log
        self.training_warnings: list[str] = list((training_health(path) or {}).get("warnings") or [])
        self.calibration = backend.calibration  # detect's P(replaced) (electric.inference.calibration)

    def padded_length(self, longest: int) -> int:
        """The length a batch whose longest input has `longest` tokens is padded to (the backend's shape bucket)."""
        return self.backend.padded_length(longest)

    def log_length(self) -> None:
        """Say at start-up how long an input this model is served and why (a warning when past what it learned), and
        what its training run warned of."""
        for w in self.training_warnings:
            log.warning("%s: the run that made this model ended saying %s", self.name, w)
        if self.max_tokens > self.trained_length:
            log.warning("%s: serving up to %d tokens an input, past the %d it was trained on (max_tokens_per_input): "
                        "positions %d-%d were never trained", self.name, self.max_tokens, self.trained_length,
                        self.trained_length + 1, self.max_tokens)
        else:
            log.info("%s: serving up to %d tokens an input (the model's default %d: %s)", self.name, self.max_tokens,
                     self.trained_length, self.backend.max_length_from)

    def info(self) -> dict:
        return {"name": self.name, "kind": self.kind, "method": self.method, "path": str(self.path),
                "backend": self.backend.runtime,
                "max_length": self.max_tokens, "trained_length": self.trained_length,
                "max_positions": self.max_positions, "providers": list(self.backend.providers),
                "labels": self.labels, "regression": self.regression,
                "training_warnings": self.training_warnings}
