"""What a failed export raises; nothing is written when it does."""

from __future__ import annotations


class ExportError(RuntimeError):
    """The export could not be completed (the output directory was not written)."""


class ParityError(ExportError):
    """The exported graph does not reproduce the checkpoint closely enough (`spearman`: a variant's sentence-score
    Spearman against fp32, when that is what fell short)."""

    def __init__(self, message: str, spearman: float | None = None):
        super().__init__(message)
        self.spearman = spearman
