"""Entry points that train: tokenizer, pretrain, finetune. They need the `train` extra (torch, transformers,
datasets); a serving install has none of them and gets this message instead of a missing-module traceback."""

from electric.checkpoint import require_extra

require_extra("training (python -m training.tokenizer / pretrain / finetune)", ("torch", "transformers", "datasets"),
              "train")
