"""Electric: pretrain ELECTRA-family encoders, export them to ONNX, and score text in one pass.

Layers (docs/architecture.md): `pretraining`, `inference`, `evaluation`, `export`, and the `cli` on top; the
shared modules `checkpoint`, `batching`, `words`, `textio`, `hardware` below them. `scoring`, `backend`,
`nbest`, `config`, `modeling`, `objectives`, `data` and `health` are the old import paths of modules that now
live in the layers (the same module objects)."""

__version__ = "0.1.0"
