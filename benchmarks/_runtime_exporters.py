"""`bench_runtime.py --compare-exporters`: one model through each way of making its graph (legacy or dynamo
exporter, eager or SDPA attention, ORT's transformer fusion, QAttention, static QDQ int8, ...), with parity
against torch and fp32/int8 speed at batch 1 and 32.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from _runtime_timing import batched, log, measure, pll

from electric.evaluation.metrics import spearman
from electric.export.graph import (
    export_onnx,
    load_for_export,
    optimize_transformer,
    quantize_int8_dynamic,
    quantize_int8_fused,
)
from electric.inference.backend import TorchBackend
from electric.inference.runtime import CPU, OnnxRunner


def compare_exporters(src: Path, work: Path, data, args) -> list[dict]:
    """The same small model through each graph-making path, fp32 and int8, at batch 1 and 32."""
    from transformers import AutoTokenizer

    ids, mask, cand = data
    tok = AutoTokenizer.from_pretrained(src)
    config = json.loads((src / "config.json").read_text())
    # (exporter, attention, ORT transformer optimizer fusion, quant_pre_process before int8, int8 heads too);
    # fusion "qattention" also quantises the fused Attention nodes (their Q/K/V projection) to QAttention
    variants = [("legacy", "eager", False, False, False), ("legacy", "sdpa", False, False, False),
                ("dynamo", "eager", False, False, False), ("dynamo", "sdpa", False, False, False),
                ("legacy", "eager", True, False, False), ("legacy", "eager", "qattention", False, False),
                ("legacy", "eager", False, True, False), ("legacy", "eager", False, False, True),
                ("legacy", "eager", "static", False, False)]
    if args.compare_int8_only:  # the ways of making the int8 graph, on the default export
        variants = [v for v in variants if v[:2] == ("legacy", "eager") and not v[3] and not v[4]]
    ref = batched(TorchBackend(src, device="cpu").run, ids, mask)
    rows, runs = [], {}
    for exporter, attn, fused, pre, all_int8 in variants:
        name = f"{exporter} exporter, {attn} attention" + (", ORT transformer optimizer (fused)"
                                                            if fused in (True, "qattention") else "") \
            + (", int8 fused Attention (QAttention)" if fused == "qattention" else "") \
            + (", static QDQ int8 of every MatMul, calibrated on 64 of these sentences" if fused == "static" else "") \
            + (", quant_pre_process before int8" if pre else "") \
            + (", int8 head and embedding projection too" if all_int8 else "")
        d = work / f"cmp-{len(rows)}"
        d.mkdir()
        fp32 = d / "model.onnx"
        t0 = time.perf_counter()
        try:
            export_onnx(load_for_export(src, "ElectraForPreTraining", attn), fp32, exporter=exporter,
                        pad_token_id=tok.pad_token_id)
            if fused == "qattention":  # the int8 graph of `electric export --int8-graph fused`
                quantize_int8_fused(fp32, d / "int8.onnx", config)
            elif fused == "static":
                quantize_static_qdq(fp32, d / "int8.onnx", ids[:64], mask[:64])
            if fused in (True, "qattention"):  # the fused fp32 graph (and, for True, its plain int8)
                optimize_transformer(fp32, d / "fused.onnx", config)
                fp32 = d / "fused.onnx"
            if fused in (False, True):
                quantize_int8_dynamic(fp32, d / "int8.onnx", preprocess=pre, **({"keep_fp32": ()} if all_int8 else {}))
        except Exception as e:  # noqa: BLE001 - report, go on with the next variant
            rows.append({"name": name, "error": f"{type(e).__name__}: {str(e)[:160]}"})
            log(f"{name}: failed: {e}")
            continue
        row = {"name": name, "export_s": time.perf_counter() - t0}
        for prec, path in (("fp32", fp32), ("int8", d / "int8.onnx")):
            r = OnnxRunner(path, max_length=512, pad_token_id=tok.pad_token_id, providers=[CPU],
                           threads=args.compare_threads)
            out = batched(r.run, ids, mask)
            row[f"{prec}_diff"] = float(np.abs(out - ref)[mask.astype(bool)].max())
            row[f"{prec}_spearman"] = spearman(pll(ref, cand), pll(out, cand))
            row[f"{prec}_ops"] = len(__import__("onnx").load(str(path)).graph.node)
            runs[(len(rows), prec)] = r.run
        rows.append(row)
        log(f"{name}: exported in {row['export_s']:.0f}s")
    speed = measure(runs, ids, mask, [1, 32], args.seconds * 2, rounds=6)
    for (i, prec), r in speed.items():
        rows[i][prec] = r
    return rows


def quantize_static_qdq(src: Path, dst: Path, ids: np.ndarray, mask: np.ndarray) -> None:
    """Static int8 (QDQ format: ORT's CPU provider fuses each QuantizeLinear/DequantizeLinear pair around a MatMul
    into QLinearMatMul) of every MatMul, the attention products included, the heads and embedding projection
    kept fp32 as in the dynamic graph; activation ranges calibrated (min/max) on `ids`/`mask` in batches of 8."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from electric.export.graph import KEEP_FP32

    class Batches(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"input_ids": ids[i : i + 8], "attention_mask": mask[i : i + 8],
                                "token_type_ids": np.zeros_like(ids[i : i + 8])} for i in range(0, len(ids), 8)])

        def get_next(self):
            return next(self.feeds, None)

    exclude = [n.name for n in onnx.load(str(src)).graph.node
               if n.op_type == "MatMul" and any(k in n.name for k in KEEP_FP32)]
    quantize_static(str(src), str(dst), Batches(), quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"],
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=False,
                    nodes_to_exclude=exclude, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})

