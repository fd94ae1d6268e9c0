"""`electric.objectives` is `electric.pretraining.objectives` (the same module object, so every name, private
ones included, and monkeypatching work): kept for the import path users' scripts and docs name."""

import sys

from electric.pretraining import objectives

sys.modules[__name__] = objectives
