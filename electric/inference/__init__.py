"""Inference: text -> tokens -> padded, length-bucketed batches -> a backend's logits -> scores.

`scoring` (encode, batch, score, detect; the MLM pseudo-log-likelihood), `backend` (the torch backend and
`load_backend`, which picks torch or ONNX for a directory), `runtime` (the ONNX Runtime backend; no torch),
`calibration` (applying the export's calibration to discriminator logits). Serving an export needs only
NumPy, onnxruntime and tokenizers from here."""
