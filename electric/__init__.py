"""Electric: pretrain ELECTRA-family encoders, export them to ONNX, and score text in one pass."""

__version__ = "0.1.0"
