"""`electric export`: a checkpoint -> ONNX (fp32, int8, fp16) with parity checks, a Triton config and the
`electric.json` manifest (`exporter`), and the calibration of the discriminator's probabilities fitted on the
way (`calibration`). Needs the `export` extra (torch, onnx)."""

from electric.export.exporter import ExportError, ExportOptions, ParityError, export_model

__all__ = ["ExportError", "ExportOptions", "ParityError", "export_model"]
