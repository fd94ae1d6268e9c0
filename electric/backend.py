"""`electric.backend` is `electric.inference.backend` (the same module object, so every name and
monkeypatching work): kept for `from electric.backend import load_backend` (docs/export.md) and users'
scripts; code in the repository imports the new home."""

import sys

from electric.inference import backend

sys.modules[__name__] = backend
