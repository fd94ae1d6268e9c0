"""Kept so that `from electric.backend import load_backend` (docs/export.md, users' scripts) keeps working: the
backends live in `electric.inference.backend` (torch) and `electric.inference.runtime` (ONNX)."""

from electric.inference.backend import Backend, TorchBackend, load_backend, resolve_backend  # noqa: F401
