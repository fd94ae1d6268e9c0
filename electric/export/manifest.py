"""What `electric export` records in electric.json (electric.checkpoint.ExportManifest, built by the exporter's
`build_manifest`) beyond its plan: what the graph's output means, the libraries' versions, the checkpoint's hash; and
`add_serving_defaults`, what `electric adapt` adds to a written manifest."""

from __future__ import annotations

import hashlib
from pathlib import Path

from electric.checkpoint import ExportManifest, Kind

# what the graph's output is, for the manifest
OUTPUT_MEANINGS: dict[Kind, str] = {
    "discriminator": "(B, T) discriminator logits s_t (Electric: the energy, score -sum s_t; ELECTRA: replaced logit)",
    "cloze": "(B, T) log q(x_t | x_not_t) of each input token from Electric's two-tower cloze model (the vocabulary "
             "axis stays inside the graph); the cloze score of a text is their sum over its tokens",
    "classifier": "(B, C) class logits (C = 1: a regression value)",
    "tagger": "(B, T, C) per-token class logits",
}


def export_versions() -> dict[str, str]:
    """The versions of the libraries an export is made with."""
    import onnx
    import onnxruntime
    import torch
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


def add_serving_defaults(export_dir: str | Path, *, rerank_weights: dict | None = None, detector: str | None = None,
                         ngram: str | None = None, adapted: dict | None = None) -> ExportManifest:
    """Write into an export's manifest what `electric serve --model DIR` applies by default
    (electric.checkpoint.serving_defaults reads it): `rerank_weights` for /v1/rerank requests that give none,
    `detector` (a discriminator export inside DIR, by its relative path) for /v1/detect, `ngram` (an ARPA n-gram LM
    inside DIR, by its relative path) for /v1/rerank's n-gram weight, and `adapted` (where `electric adapt`'s model
    card and report lie). Returns the new manifest; the file is replaced whole."""
    d = Path(export_dir)
    manifest = ExportManifest.read(d)
    if detector is not None:
        kind = ExportManifest.read(d / detector).kind
        if kind != "discriminator":
            raise ValueError(f"{str(d / detector)!r} holds a {kind} export; a detector is a discriminator")
    if ngram is not None and not (d / ngram).is_file():
        raise ValueError(f"{str(d / ngram)!r}: no such n-gram file inside the export")
    manifest = manifest.model_copy(update={k: v for k, v in (("rerank_weights", rerank_weights), ("detector", detector),
                                                             ("ngram", ngram), ("adapted", adapted)) if v is not None})
    manifest.write(d)
    return manifest
