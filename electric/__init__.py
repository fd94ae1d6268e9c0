"""Electric: pretrain ELECTRA-family encoders, fine-tune them, export them to ONNX, and score text in one pass.

Layers (docs/architecture.md), each a subpackage: `modeling` (the networks), `pretraining`, `finetuning`,
`inference`, `evaluation`, `export`, and the `cli` on top; the shared modules `checkpoint`, `tokenization`,
`batching`, `words`, `textio`, `hardware` and `shared_data` below them. Import each module from its layer
(`electric.inference.scoring`, `electric.evaluation.nbest`, ...): there are no aliases at older flat paths."""

__version__ = "0.1.0"
# the name pip installs this project by (pyproject.toml's project.name; `electric` on PyPI is another project)
DISTRIBUTION = "electric-scoring"
