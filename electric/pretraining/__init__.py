"""Pretraining: the run config (`config`), the training-time wrapper that runs one objective's forward pass over a
discriminator and its generator (`modeling`; the networks themselves, Electric's two-tower cloze model among them,
are electric.modeling's), the objectives as pure functions over tensors (`objectives`), a discriminator started
from a masked LM's encoder (`warm_start`), the corpus -> token-block datasets (`data`) and the health measures and
collapse rule (`health`). The loop that drives them is training/pretrain.py."""
