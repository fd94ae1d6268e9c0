"""`electric.scoring` is `electric.inference.scoring` (the same module object, so every name and
monkeypatching work): kept for `from electric.scoring import ...` (README, docs) and users' scripts; code in
the repository imports the new home."""

import sys

from electric.inference import scoring

sys.modules[__name__] = scoring
