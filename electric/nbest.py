"""`electric.nbest` is `electric.evaluation.nbest` (the same module object, so every name and monkeypatching
work): kept for `from electric.nbest import ...` (README, docs/scoring.md) and users' scripts; code in the
repository imports the new home."""

import sys

from electric.evaluation import nbest

sys.modules[__name__] = nbest
