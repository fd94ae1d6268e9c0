"""electric.json, the manifest an export directory carries: what the runtime and the server read to load and serve
it (kind, files, inputs and output, lengths, int8 method, parity, calibration, where it came from)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Protocol

import torch

from electric.checkpoint import MANIFEST, Kind, atomic_write_text, training_health
from electric.inference.runtime import CLOZE_INPUT_NAMES, CLOZE_OUTPUT_NAME, INPUT_NAMES, OUTPUT_NAME
from electric.inference.scoring import METHODS_OF_KIND


class Exported(Protocol):
    """What the manifest reads of an export (electric.export.exporter.ExportPlan; read-only)."""

    @property
    def options(self) -> Any: ...  # its ExportOptions: int8_method, attn_implementation

    @property
    def src(self) -> Path: ...

    @property
    def config(self) -> dict: ...

    @property
    def kind(self) -> Kind: ...

    @property
    def arch(self) -> str: ...

    @property
    def exporter(self) -> str: ...

    @property
    def opset(self) -> int: ...

    @property
    def max_length(self) -> int: ...

    @property
    def trained(self) -> tuple[int, str]: ...

# what the graph's output is, for the manifest
OUTPUT_MEANINGS = {
    "discriminator": "(B, T) discriminator logits s_t (Electric: the energy, score -sum s_t; ELECTRA: replaced logit)",
    "cloze": "(B, T) log q(x_t | x_not_t) of each input token from Electric's two-tower cloze model (the vocabulary "
             "axis stays inside the graph); the cloze score of a text is their sum over its tokens",
    "classifier": "(B, C) class logits (C = 1: a regression value)",
    "tagger": "(B, T, C) per-token class logits",
}
FORMAT_VERSION = 1


def _versions() -> dict:
    import onnx
    import onnxruntime
    import transformers

    from electric import __version__

    return {"electric": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def checkpoint_hash(d: Path) -> str:
    """sha256 over the checkpoint's top-level files (names and bytes, in name order)."""
    h = hashlib.sha256()
    for p in sorted(x for x in d.iterdir() if x.is_file()):
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def build_manifest(plan: Exported, files: dict, parity: dict, calibration: dict | None) -> dict:
    """electric.json: everything the runtime and server need to know about this directory."""
    src, config, kind, trained = plan.src, plan.config, plan.kind, plan.trained
    versions = _versions()
    id2label = config.get("id2label") or {}
    labels = [id2label[k] for k in sorted(id2label, key=int)] if kind in ("classifier", "tagger") and id2label else None
    cloze = kind == "cloze"
    return {
        "format": "electric-onnx",
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "architecture": plan.arch,
        "labels": labels,
        "problem_type": config.get("problem_type"),
        "max_length": plan.max_length,  # the position table: the most the graph takes
        # the length the model was trained on and where that comes from (electric.checkpoint.trained_length): what
        # the runtime, `electric score` and the server take by default; older manifests lack it (the table, then)
        "trained_length": trained[0],
        "trained_length_from": trained[1],
        "opset": plan.opset,
        "precision": {"cpu": "int8" if "int8" in files else "fp32", "cuda": "fp16" if "fp16" in files else "fp32"},
        # how model.int8.onnx scales its activations (INT8_METHODS): "static" = the same score in any batch; "dynamic"
        # = a text's score moves a little with its batch-mates; null without int8
        "int8_method": plan.options.int8_method if "int8" in files else None,
        "files": files,
        "inputs": list(CLOZE_INPUT_NAMES if cloze else INPUT_NAMES),
        "output": CLOZE_OUTPUT_NAME if cloze else OUTPUT_NAME,
        "output_meaning": OUTPUT_MEANINGS[kind],
        "scoring_methods": list(METHODS_OF_KIND.get(kind, ())),  # electric score/serve --method on this directory
        "source": {"path": str(src.resolve()), "sha256": checkpoint_hash(src)},
        "exporter": {"name": "torch.onnx TorchScript (dynamo=False)" if plan.exporter == "legacy"
                     else "torch.onnx torch.export (dynamo=True)",
                     "attn_implementation": "sdpa" if cloze else plan.options.attn_implementation},  # cloze: SDPA
        "versions": versions,
        "onnxruntime": versions["onnxruntime"],
        "parity": parity,
        # what the pretraining run said of this model at its end (its warnings: below chance, worse than its start)
        "training_health": training_health(src),
        # discriminators: P(replaced) = sigmoid(scale * s + bias) (electric.inference.calibration); null = raw sigmoid(s)
        **({"calibration": calibration} if kind == "discriminator" else {}),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def add_serving_defaults(export_dir: str | Path, *, rerank_weights: dict | None = None, detector: str | None = None,
                         adapted: dict | None = None) -> dict:
    """Write into an export's manifest what `electric serve --model DIR` applies by default
    (electric.checkpoint.serving_defaults reads it): `rerank_weights` for /v1/rerank requests that give none,
    `detector` (a discriminator export inside DIR, by its relative path) for /v1/detect, and `adapted` (where
    `electric adapt`'s model card and report lie). Returns the new manifest; the file is replaced whole."""
    d = Path(export_dir)
    manifest = json.loads((d / MANIFEST).read_text())
    if detector is not None:
        kind = json.loads((d / detector / MANIFEST).read_text()).get("kind")
        if kind != "discriminator":
            raise ValueError(f"{str(d / detector)!r} holds a {kind} export; a detector is a discriminator")
    manifest.update({k: v for k, v in (("rerank_weights", rerank_weights), ("detector", detector),
                                       ("adapted", adapted)) if v is not None})
    atomic_write_text(d / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return manifest
