"""Fine-tuning configuration: one typed dataclass, beside pretraining's `PretrainConfig`.

`FinetuneConfig` holds what a fine-tuning run is: the task, the encoder it starts from, the recipe. Fields left
at 0 are derived from the task and the encoder's size by `resolved` (the ELECTRA paper's fine-tuning defaults),
in one place; the result is validated and frozen, and saved as OUT/finetune_config.json.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from electric.finetuning.tasks import TASK_TYPES

LONG_TASKS = ("rte", "stsb")  # ELECTRA fine-tunes these small datasets for 10 epochs


@dataclass(frozen=True)
class FinetuneConfig:
    # --- what to fine-tune
    task: str  # registry name (sst2, cola, ...) or "custom" for a user's files
    task_type: str  # classification | pair-classification | regression | tagging
    model: str  # the encoder directory fine-tuning started from (resolved from --model)
    random_init: bool = False  # ignore the pretrained weights (a no-pretraining baseline of the same shape)
    # --- optimisation (ELECTRA fine-tuning defaults; 0 = derived from the task or the model's size)
    lr: float = 0.0  # peak lr of the head; 0 = 3e-4 (hidden <= 256), 1e-4 (<= 768), 5e-5 above
    layer_decay: float = 0.0  # lr multiplier per layer below the head; 0 = 0.8, or 0.9 for 24+ layers
    epochs: int = 0  # passes over the training data; 0 = 3, or 10 for RTE and STS-B
    batch_size: int = 32  # examples per optimizer step
    warmup_fraction: float = 0.1  # share of the steps with linear warmup
    weight_decay: float = 0.01  # AdamW decoupled weight decay, not on LayerNorm weights or biases
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    max_grad_norm: float = 1.0  # gradient-norm clip
    dropout: float = 0.1  # hidden and attention dropout while fine-tuning (the tiny preset pretrains without)
    patience: int = 3  # stop after this many epochs without a better dev score; 0 = never stop early
    # --- data
    max_seq_length: int = 128  # tokens per example, [CLS]/[SEP] included; longer inputs are truncated
    max_train_examples: int | None = None  # a fixed seeded sample of the training set
    max_eval_examples: int | None = None  # the first N dev (and test) examples
    # --- run
    seed: int = 0  # seeds the head's init, dropout and the data order
    precision: str = "fp32"  # fp32 | bf16 (autocast on CPU and CUDA)
    eval_batch_size: int = 64  # examples per forward pass when predicting

    def __post_init__(self) -> None:
        self.validate()

    def resolved(self, num_hidden_layers: int, hidden_size: int) -> FinetuneConfig:
        """This config with the values implied by the task and the encoder's size set (here, and only here)."""
        return dataclasses.replace(
            self,
            epochs=self.epochs or (10 if self.task in LONG_TASKS else 3),
            layer_decay=self.layer_decay or (0.9 if num_hidden_layers >= 24 else 0.8),
            lr=self.lr or (3e-4 if hidden_size <= 256 else 1e-4 if hidden_size <= 768 else 5e-5),
        )

    def validate(self) -> None:
        if self.task_type not in TASK_TYPES:
            raise ValueError(f"task_type must be one of {TASK_TYPES}, got {self.task_type!r}")
        if self.epochs < 0 or self.batch_size < 1 or self.eval_batch_size < 1:
            raise ValueError(f"epochs ({self.epochs}), batch size ({self.batch_size}) and eval batch size "
                             f"({self.eval_batch_size}) must be positive")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"warmup fraction must be in [0, 1), got {self.warmup_fraction}")
        if not 0.0 <= self.layer_decay <= 1.0:  # 0 = derived by `resolved`
            raise ValueError(f"layer decay must be in (0, 1], got {self.layer_decay}")
        if self.lr < 0:
            raise ValueError(f"lr must be > 0 (0 = derived), got {self.lr}")
        if self.max_seq_length < 8:
            raise ValueError(f"max seq length must be at least 8, got {self.max_seq_length}")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be fp32 or bf16, got {self.precision!r}")
