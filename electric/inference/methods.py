"""The scoring methods by name: what `electric.inference.scoring` scores with, in a module light enough for the
command line's options to import (scoring itself brings in the checkpoint and backend code)."""

from __future__ import annotations

DISCRIMINATOR_METHODS = ("electric", "electra")
CLOZE_METHODS = ("cloze",)  # Electric's two-tower cloze model (RUN/generator of an Electric run): one pass
MLM_METHODS = ("mlm-pll", "mlm-pll-word-l2r")
METHODS = DISCRIMINATOR_METHODS + CLOZE_METHODS + MLM_METHODS
METHODS_OF_KIND = {"discriminator": DISCRIMINATOR_METHODS, "cloze": CLOZE_METHODS}  # a backend's kind -> its methods
