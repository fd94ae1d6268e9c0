"""Electric: pretrain ELECTRA-family encoders, fine-tune them, export them to ONNX, and score text in one pass.

Layers (docs/architecture.md), each a subpackage: `modeling` (the networks), `pretraining`, `finetuning`,
`inference`, `evaluation`, `export`, and the `cli` on top; the shared modules `checkpoint`, `tokenization`,
`batching`, `words`, `textio`, `hardware` and `shared_data` below them. Import each module from its layer
(`electric.inference.scoring`, `electric.evaluation.nbest`, ...): there are no aliases at older flat paths."""

__version__ = "0.1.0"
# the name pip installs this project by (pyproject.toml's project.name; `electric` on PyPI is another project)
DISTRIBUTION = "electric-scoring"


class CheckpointError(ValueError):
    """A checkpoint or tokenizer directory is missing, malformed or of the wrong kind (electric.checkpoint's)."""


class MissingExtra(ImportError):
    """A feature needs an optional dependency this installation lacks; the message names the pip extra."""


def install_hint(extra: str) -> str:
    """How to install the pip extra `extra`: from a checkout, or by the distribution's name (`DISTRIBUTION`, not
    the import package's: `electric` on PyPI is another project)."""
    return f"pip install -e '.[{extra}]' (from a checkout) or pip install '{DISTRIBUTION}[{extra}]'"
