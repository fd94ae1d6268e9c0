"""Kept so that `from electric.nbest import ...` (README, docs/scoring.md, users' scripts) keeps working: the n-best
code lives in `electric.evaluation.nbest` (readers, writers, combination, metrics, tuning, report)."""

from electric.evaluation.nbest import *  # noqa: F403
from electric.evaluation.nbest import __all__  # noqa: F401
