"""Pretraining, the library: what a step computes and from what. training/ is the entry layer over it.

Here: the run config and every value derived from it (`config`), the corpus -> token-block datasets (`data`) and the
seeded, rank-sharded batches and per-step randomness drawn from them (`batches`), where a run's first weights come
from (`init_from`: --init-from's checkpoint; `handover`: a masked LM's encoder under a discriminator), the training-time
wrapper that runs one objective's forward pass over a discriminator and its generator (`modeling`), the losses as
pure functions over tensors (`objectives`; how a batch is corrupted is electric.modeling.corruption, which export
shares), the validation pass (`validation`) and the health measures and collapse rule it reports (`health`). The
networks themselves are electric.modeling's.

training/ keeps what a run does as a program: the command line (`pretrain_args`), the loop with its optimizer,
schedule and processes (`pretrain`, `schedule`, `distributed`), the run directory and its checkpoints (`run_dir`), and
what a run writes down and shows (`report`, `progress`). Nothing here parses arguments, prints progress or writes
a run's metrics.
"""
