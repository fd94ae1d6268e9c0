"""Pretraining: the run config (`config`), every forward pass and the pretraining wrapper (`modeling`; importing
it registers Electric's two-tower cloze generator with transformers' Auto classes), the objectives as pure
functions over tensors (`objectives`), the corpus -> token-block datasets (`data`) and the health measures and
collapse rule (`health`). The loop that drives them is training/pretrain.py."""
