"""The networks: what every layer loads and runs forward.

`cloze` (Electric's two-tower cloze noise model, registered with transformers' Auto classes), `corruption` (how
pretraining corrupts text for a discriminator: its draws, the chosen positions, a generator's samples, the labels;
export's calibration corrupts through the same generator pass), `pre_layer_norm` (the `--layer-norm pre` encoder for any ELECTRA class) and
`pretrained` (a user's BERT-family checkpoint as ELECTRA modules: the start of continued pretraining).
transformers provides the rest (`ElectraForPreTraining`, `ElectraForMaskedLM`, the fine-tuning heads). Nothing here imports pretraining, inference or export.
"""
