"""An NVIDIA Triton model repository entry for an exported graph (config.pbtxt and NAME/1/model.onnx)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from electric.checkpoint import (
    atomic_dir,
)
from electric.export.errors import ExportError

_ONNX_TO_TRITON = {1: "TYPE_FP32", 10: "TYPE_FP16", 7: "TYPE_INT64", 6: "TYPE_INT32", 9: "TYPE_BOOL"}


def _dims(value_info) -> list[int]:
    """Dims of a graph input/output without the batch axis; symbolic dims become -1."""
    dims = value_info.type.tensor_type.shape.dim[1:]
    return [d.dim_value if d.HasField("dim_value") else -1 for d in dims]


def triton_config(name: str, onnx_path: Path, *, max_batch_size: int = 128, gpu: bool | None = None) -> str:
    """config.pbtxt for Triton's onnxruntime backend, with names/dtypes/dims read from the graph."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    init = {i.name for i in graph.initializer}

    def tensor(v) -> str:
        dtype = _ONNX_TO_TRITON.get(v.type.tensor_type.elem_type)
        if dtype is None:
            raise ExportError(f"{v.name}: ONNX element type {v.type.tensor_type.elem_type} has no Triton type here")
        dims = ", ".join(str(d) for d in _dims(v))
        return f'  {{\n    name: "{v.name}"\n    data_type: {dtype}\n    dims: [ {dims} ]\n  }}'

    inputs = ",\n".join(tensor(v) for v in graph.input if v.name not in init)
    outputs = ",\n".join(tensor(v) for v in graph.output)
    preferred = ", ".join(str(b) for b in (8, 16, 32, 64, 128) if b <= max_batch_size) or str(max_batch_size)
    lines = [
        f'name: "{name}"',
        'platform: "onnxruntime_onnx"',
        f"max_batch_size: {max_batch_size}",
        f"input [\n{inputs}\n]",
        f"output [\n{outputs}\n]",
        f"dynamic_batching {{\n  preferred_batch_size: [ {preferred} ]\n  max_queue_delay_microseconds: 1000\n}}",
    ]
    if gpu is not None:
        lines.append(f"instance_group [\n  {{\n    count: 1\n    kind: {'KIND_GPU' if gpu else 'KIND_CPU'}\n  }}\n]")
    return "\n".join(lines) + "\n"


def triton_name(out_dir: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", out_dir.resolve().name).strip("-.")
    return name or "electric"


def write_triton(repo: Path, name: str, onnx_path: Path, precision: str, overwrite: bool,
                 max_batch_size: int = 128) -> Path:
    """REPO/NAME/config.pbtxt and REPO/NAME/1/model.onnx (atomic: complete or absent)."""
    final = repo / name
    if final.exists() and not overwrite:
        raise ExportError(f"Triton model {str(final)!r} already exists (pass --overwrite to replace it)")
    gpu = {"fp16": True, "int8": False}.get(precision)
    with atomic_dir(final) as tmp:
        (tmp / "1").mkdir()
        shutil.copyfile(onnx_path, tmp / "1" / "model.onnx")
        (tmp / "config.pbtxt").write_text(triton_config(name, onnx_path, max_batch_size=max_batch_size, gpu=gpu))
    return final
