"""Entry points that train: tokenizer, pretrain, finetune. They need the `train` extra (torch, transformers,
datasets); a serving install has none of them and gets this message instead of a missing-module traceback."""

import sys

from electric.checkpoint import MissingExtra, require_extra

try:
    require_extra("training (python -m training.tokenizer / pretrain / finetune)",
                  ("torch", "transformers", "datasets"), "train")
except MissingExtra as e:
    if sys.argv[:1] != ["-m"]:  # imported by other code: the error is theirs to handle
        raise
    # `python -m training.X` (sys.argv[0] is "-m" while Python finds the module): one line and exit status 2, as
    # the `electric` commands and the entry points' own errors
    print(f"error: {e}", file=sys.stderr)
    raise SystemExit(2) from None
