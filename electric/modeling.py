"""`electric.modeling` is `electric.pretraining.modeling` (the same module object, so every name, private ones
included, and monkeypatching work): kept for the import path users' scripts and docs name. Importing it
registers ElectricForClozeLM with transformers' Auto classes, as before."""

import sys

from electric.pretraining import modeling

sys.modules[__name__] = modeling
