"""Moved to `electric.cli.score` (the CLI) and `electric.evaluation.blimp` (the BLiMP reader and accuracy). Kept
while scripts written against the old path (benchmarks/equal_compute.py's running jobs) still import it from
here; nothing in the repository should."""

from electric.evaluation.blimp import blimp_accuracy, read_blimp  # noqa: F401
