"""Inference backends: one interface over a PyTorch model or an ONNX Runtime session.

A backend takes padded token ids and returns the head's raw output as a NumPy array:
- kind "discriminator": (B, T) logits s_t (Electric energies / ELECTRA replaced logits);
- kind "cloze":         (B, T) log q(x_t | x_not_t) of each input token (Electric's cloze model; the vocabulary
                        axis stays inside the model: electric.inference.cloze);
- kind "classifier":    (B, C) logits (C = 1 for regression);
- kind "tagger":        (B, T, C) logits.
Scoring, export parity checks and the server all call `run`, so every path computes the same thing.

This module holds the interface, the torch implementation and `load_backend`; the ONNX Runtime one lives in
electric.inference.runtime. Both take the names they share (Kind, Runtime, MANIFEST, model_kind) from electric.checkpoint, so the
imports run one way: backend -> runtime -> checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from electric.checkpoint import (
    ARCHITECTURE_KINDS,
    MANIFEST,
    CheckpointError,
    Kind,
    Runtime,
    model_kind,
    require_extra,
    require_local_dir,
    trained_length,
)
from electric.inference.calibration import Calibration
from electric.tokenization import load_tokenizer

__all__ = ["Backend", "TorchBackend", "load_backend", "resolve_backend"]  # Kind, MANIFEST...: electric.checkpoint


class Backend(Protocol):
    """Everything a caller (scoring, export's parity check, the server) uses of a loaded model."""

    kind: Kind
    runtime: Runtime  # "onnx" (OnnxBackend) or "torch" (TorchBackend): the server's /info says it
    # longest input in tokens, [CLS]/[SEP] included, taken by default: the length the model was trained on
    # (electric.checkpoint.trained_length; an export reads it from its manifest)
    max_length: int
    max_length_from: str  # where max_length comes from, in words (the server logs it at start-up)
    max_positions: int  # the position table: the most it can take; past max_length, positions it never trained
    providers: list[str]  # e.g. ["torch:cpu"] or ["CUDAExecutionProvider", "CPUExecutionProvider"]
    config: dict  # the model's config.json (label names: config["id2label"])
    # scoring reads `backend_tokenizer` (Rust) and the special token ids: an OnnxBackend's is a
    # tokenization.WordPieceTokenizer (no transformers), a TorchBackend's a transformers tokenizer
    tokenizer: object
    calibration: Calibration | None  # discriminators: replaced-probability calibration (electric.inference.calibration)

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray,
            token_type_ids: np.ndarray | None = None) -> np.ndarray: ...

    def padded_length(self, length: int) -> int:
        """The length `run` pads a batch whose longest row has `length` tokens to: a caller that pads to it first
        makes `run` pad nothing."""

    def release_memory(self) -> None:
        """Give back memory that larger batches left with the runtime (a server calls it once idle)."""


class TorchBackend:
    """A transformers ELECTRA model (or Electric's cloze model) on torch (CPU or CUDA): the development and reference
    path."""

    runtime: Runtime = "torch"

    def __init__(self, model_dir: str | Path, device: str | None = None, dtype=None):
        require_extra("the torch backend (a transformers checkpoint; `electric export` makes an ONNX directory "
                      "that runs without torch)")
        import torch  # only the torch backend needs torch; ONNX serving installs leave it out
        import transformers

        from electric.modeling.loading import load_model, read_model_config

        d = require_local_dir(model_dir, "model")
        self.config = read_model_config(d)
        if self.config.get("model_type") not in ("electra", "electric-cloze"):
            raise CheckpointError(f"{str(d)!r} holds a {self.config.get('model_type')!r} model, not ELECTRA")
        self.kind = model_kind(self.config, str(d))
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if self.kind == "cloze":  # (B, T) log q(x_t | x_not_t): the gather runs inside the module
            from electric.inference.cloze import ClozeTokenLogProbs, load_cloze_model

            self.model = ClozeTokenLogProbs(load_cloze_model(d, dtype or torch.float32)).to(self.device).eval()
        else:
            cls = getattr(transformers, next(a for a in self.config["architectures"] if a in ARCHITECTURE_KINDS))
            self.model = load_model(d, cls, dtype or torch.float32).to(self.device)
        self.tokenizer = load_tokenizer(d)
        self.max_positions = int(self.config.get("max_position_embeddings", 512))
        self.max_length, self.max_length_from = trained_length(d, self.config)
        self.providers = [f"torch:{self.device.type}"]
        self.model_dir = d
        self.calibration: Calibration | None = None  # a checkpoint carries none: `electric export` fits one

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray,
            token_type_ids: np.ndarray | None = None) -> np.ndarray:
        import torch

        ids = torch.as_tensor(input_ids, device=self.device)
        mask = torch.as_tensor(attention_mask, device=self.device)
        if self.kind == "cloze":  # one segment: token types do not enter the cloze model
            with torch.inference_mode():
                return self.model(ids, mask).cpu().numpy()  # (B, T)
        kw = {}
        if token_type_ids is not None:
            kw["token_type_ids"] = torch.as_tensor(token_type_ids, device=self.device)
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, **kw)
        return out.logits.float().cpu().numpy()

    def padded_length(self, length: int) -> int:
        """`length`: torch runs a batch at its longest row (no shape buckets)."""
        return length

    def release_memory(self) -> None:
        """torch frees CPU tensors to malloc (the caller trims the heap); on CUDA, empty the caching allocator."""
        import torch

        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def resolve_backend(model_dir: str | Path, backend: str = "auto") -> Runtime:
    """`backend`, with `auto` resolved: `onnx` for an `electric export` directory (has electric.json), `torch` for a
    transformers one."""
    if backend == "auto":
        return "onnx" if (Path(model_dir) / MANIFEST).is_file() else "torch"
    if backend not in ("onnx", "torch"):
        raise ValueError(f"unknown backend {backend!r} (auto, torch or onnx)")
    return "onnx" if backend == "onnx" else "torch"


def load_backend(model_dir: str | Path, backend: str = "auto", **kwargs) -> Backend:
    """The model in `model_dir` on `resolve_backend(model_dir, backend)`."""
    d = require_local_dir(model_dir, "model")
    if resolve_backend(d, backend) == "torch":
        return TorchBackend(d, **kwargs)
    from electric.inference.runtime import OnnxBackend  # noqa: PLC0415 - onnxruntime is imported only when used

    return OnnxBackend(d, **kwargs)
