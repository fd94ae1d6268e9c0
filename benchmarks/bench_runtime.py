"""Throughput and latency of the discriminator on torch, ONNX Runtime fp32 and ONNX Runtime int8.

    python benchmarks/bench_runtime.py                       # tiny + small, writes benchmarks/results/runtime.md
    python benchmarks/bench_runtime.py --compare-exporters   # + legacy/dynamo exporter, eager/SDPA, ORT fusion

Random-weight ElectraForPreTraining models at `tiny` (128 hidden, 4 layers, 2 heads, FFN 512, emb 128) and
`small` (256, 12 layers, 4 heads, FFN 1024, emb 128), on 24-token real sentences (enwiki, truncated),
`--threads` threads for every engine. Sentences/s at each batch size and batch-1 latency (fastest call).
Also: int8 vs fp32 Spearman of sentence PLL (= -sum s_t over non-special tokens), on the random models
and on a trained one (runs/electric-tiny/discriminator if present, else a 30-step debug run made here).
Also the runtime's own ceiling: plain fp32 MatMul and int8 MatMulInteger (uint8 x int8) graphs of the
discriminator's own product shapes at batch 32, on the same threads, and the fraction of that ceiling the
fp32 and int8 graphs reach; with the int8 GEMM kernel ONNX Runtime picks on this CPU (VNNI, AMX).
Figures, not tests: nothing is asserted. On a CUDA machine it adds torch fp16 and ORT fp16 on the GPU.
`--smoke` runs everything small (tiny, batches 1 and 32, short windows) and writes no report: a check that
the script works, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from electric.shared_data import shared_data_dir  # noqa: E402

SHARED = shared_data_dir()
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from electric.evaluation.metrics import spearman  # noqa: E402
from electric.export.exporter import export_model  # noqa: E402
from electric.export.graph import (  # noqa: E402
    export_onnx,
    load_for_export,
    optimize_transformer,
    quantize_int8,
    quantize_int8_fused,
)
from electric.hardware import cpu_flags, int8_gemm_kernel  # noqa: E402
from electric.inference.backend import TorchBackend  # noqa: E402
from electric.inference.runtime import CPU, CUDA, OnnxBackend, OnnxRunner, make_session  # noqa: E402

SIZES = {
    "tiny": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=2, intermediate_size=512, embedding_size=128),
    "small": dict(hidden_size=256, num_hidden_layers=12, num_attention_heads=4, intermediate_size=1024,
                  embedding_size=128),
}
SEQ_LEN = 24
CEILING_BATCH = 32


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- data and models ----------------------------------------------------------------------------

def find_tokenizer(work: Path) -> Path:
    for cand in (REPO / "runs" / "electric-tiny" / "discriminator", REPO / "runs" / "tok"):
        if (cand / "tokenizer.json").is_file() or (cand / "vocab.txt").is_file():
            return cand
    from training.tokenizer import train_tokenizer

    out = work / "tok"
    train_tokenizer([str(SHARED / "corpus" / "enwiki" / "wiki_00")], vocab_size=16000, out=out)
    return out


def real_sentences(tokenizer, n: int, length: int = SEQ_LEN) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n enwiki sentences of at least `length` tokens, truncated to exactly `length` (with [CLS]/[SEP])."""
    rows = []
    for path in sorted((SHARED / "corpus" / "enwiki").glob("wiki_*")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("<") or len(line) < 80:
                continue
            for sent in re.split(r"(?<=[.!?])\s+", line):
                ids = tokenizer(sent, truncation=True, max_length=length)["input_ids"]
                if len(ids) == length:
                    rows.append(ids)
                    if len(rows) == n:
                        ids = np.array(rows, dtype=np.int64)
                        special = np.isin(ids, tokenizer.all_special_ids)
                        return ids, np.ones_like(ids), ~special
    raise SystemExit(f"found only {len(rows)} sentences of {length} tokens in {SHARED}")


def random_model(size: str, tok_dir: Path, out: Path) -> Path:
    from transformers import AutoTokenizer, ElectraConfig, ElectraForPreTraining

    tok = AutoTokenizer.from_pretrained(tok_dir)
    torch.manual_seed(0)
    cfg = ElectraConfig(vocab_size=len(tok), max_position_embeddings=512, pad_token_id=tok.pad_token_id,
                        **SIZES[size])
    ElectraForPreTraining(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def trained_model(work: Path) -> tuple[Path, str]:
    d = REPO / "runs" / "electric-tiny" / "discriminator"
    if (d / "config.json").is_file():
        return d, str(d.relative_to(REPO))
    from training.pretrain import main as pretrain

    wiki = work / "wiki_sample"
    with open(SHARED / "corpus" / "enwiki" / "wiki_00", encoding="utf-8") as f:
        wiki.write_text("".join(f.readline() for _ in range(3000)), encoding="utf-8")
    run = work / "electric-debug"
    rc = pretrain(["--objective", "electric", "--preset", "debug", "--data", str(wiki), "--tokenizer",
                   str(find_tokenizer(work)), "--out", str(run), "--max-steps", "30", "--num-proc", "1"])
    if rc:
        raise SystemExit(f"debug pretraining failed ({rc})")
    return run / "discriminator", "a 30-step debug Electric run (runs/electric-tiny was not there)"


# ---- timing -------------------------------------------------------------------------------------

def measure(runs: dict, ids, mask, batches, seconds: float, rounds: int = 3) -> dict[str, dict]:
    """Sentences/s per engine and batch size, from the fastest call (timeit's convention: on a shared
    machine the minimum is the figure least disturbed by other jobs). Engines take turns in `rounds`
    windows per batch size, so a burst of someone else's load hits them all alike."""
    best = {name: {} for name in runs}
    for b in batches:
        x, m = ids[:b], mask[:b]
        for fn in runs.values():
            fn(x, m)  # warm-up
        for _ in range(rounds):
            for name, fn in runs.items():
                end, calls = time.perf_counter() + seconds / rounds, 0
                while calls < 2 or time.perf_counter() < end:
                    t0 = time.perf_counter()
                    fn(x, m)
                    dt = time.perf_counter() - t0
                    best[name][b] = min(best[name].get(b, dt), dt)
                    calls += 1
    out = {}
    for name, per_batch in best.items():
        out[name] = {b: b / t for b, t in per_batch.items()}
        out[name]["latency_ms"] = 1000 * per_batch[1] if 1 in per_batch else float("nan")
    return out


def pll(logits: np.ndarray, cand: np.ndarray) -> np.ndarray:
    return -(logits * cand).sum(axis=1)


def batched(run, ids, mask, bs=64) -> np.ndarray:
    return np.concatenate([run(ids[i : i + bs], mask[i : i + bs]) for i in range(0, len(ids), bs)])


# ---- sections -----------------------------------------------------------------------------------

def bench_size(size, tok_dir, work, data, args) -> dict:
    ids, mask, cand = data
    src = random_model(size, tok_dir, work / f"{size}-hf")
    out = work / f"{size}-onnx"
    fp16 = torch.cuda.is_available()
    manifest = export_model(src, out, quantize="int8", fp16=fp16, threads=args.threads, log=log)
    # the int8 graph made the other way (electric export --int8-graph fused): fused BERT ops, QAttention
    fused = work / f"{size}-onnx-fused"
    export_model(src, fused, quantize="int8", int8_graph="fused", threads=args.threads, log=log)
    runs = {"torch eager fp32 (CPU)": TorchBackend(src, device="cpu").run}
    outputs = {}
    for prec, d in (("fp32", out), ("int8", out), ("int8 fused", fused)):
        be = OnnxBackend(d, providers=[CPU], precision=prec.split()[0], threads=args.threads)
        runs[f"ORT {prec} (CPU)"] = be.run
        outputs[prec] = batched(be.run, ids, mask)
    rows = measure(runs, ids, mask, args.batches, args.seconds)
    if torch.cuda.is_available():
        gpu = {"torch eager fp16 (CUDA)": TorchBackend(src, device="cuda", dtype=torch.float16).run}
        be = OnnxBackend(out, providers=[CUDA, CPU], precision="fp16")
        gpu[f"ORT fp16 ({be.providers[0]}, IOBinding)"] = be.run
        outputs["fp16-cuda"] = batched(be.run, ids, mask)
        rows.update(measure(gpu, ids, mask, args.batches, args.seconds))
    ref = outputs["fp32"]
    quality = {k: {"spearman": spearman(pll(ref, cand), pll(v, cand)),
                   "max_abs_diff": float(np.abs(v - ref)[cand].max())} for k, v in outputs.items() if k != "fp32"}
    log(f"{size}: " + json.dumps({k: {b: round(v, 1) for b, v in r.items()} for k, r in rows.items()}))
    single = one_thread(src, out, data, args) if args.threads != 1 and not args.smoke else None
    ceiling = gemm_ceiling(size, work, args, rows)
    return {"rows": rows, "quality": quality, "parity": manifest["parity"], "src": src, "one_thread": single,
            "ceiling": ceiling}


def one_thread(src: Path, out: Path, data, args) -> dict:
    """The same engines on one thread each: a cross-check of the ratios that contention distorts less."""
    ids, mask, _ = data
    torch.set_num_threads(1)
    try:
        runs = {"torch eager fp32 (CPU)": TorchBackend(src, device="cpu").run}
        for prec in ("fp32", "int8"):
            runs[f"ORT {prec} (CPU)"] = OnnxBackend(out, providers=[CPU], precision=prec, threads=1).run
        return measure(runs, ids, mask, [1, 32], args.seconds * 2, rounds=6)
    finally:
        torch.set_num_threads(args.threads)


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
                quantize_int8(fp32, d / "int8.onnx", preprocess=pre, **({"keep_fp32": ()} if all_int8 else {}))
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


# ---- the GEMM ceiling ---------------------------------------------------------------------------

def model_gemms(size: str, batch: int, seq: int = SEQ_LEN) -> list[tuple[str, str, int, tuple[int, ...]]]:
    """The matrix products of one forward pass of the `size` discriminator on batch x seq tokens, as
    (name, kind, count, shape). kind "linear": (M, K) x (K, N) with a weight, int8 in the int8 graph;
    "linear-fp32": a weight product that int8 export keeps fp32 (head, embedding projection); "attention":
    a batched (B, M, K) x (B, K, N) product of two activations, fp32 in both graphs."""
    c = SIZES[size]
    h, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    inter, emb = c["intermediate_size"], c["embedding_size"]
    m, d = batch * seq, h // heads
    out = [("Q, K, V, attention output: (M, H) x (H, H)", "linear", 4 * layers, (m, h, h)),
           ("FFN in: (M, H) x (H, I)", "linear", layers, (m, h, inter)),
           ("FFN out: (M, I) x (I, H)", "linear", layers, (m, inter, h)),
           ("attention scores: (B heads, T, d) x (B heads, d, T)", "attention", layers, (batch * heads, seq, d, seq)),
           ("attention-weighted values: (B heads, T, T) x (B heads, T, d)", "attention", layers,
            (batch * heads, seq, seq, d)),
           ("head dense: (M, H) x (H, H)", "linear-fp32", 1, (m, h, h))]
    if emb != h:
        out.append(("embedding projection: (M, E) x (E, H)", "linear-fp32", 1, (m, emb, h)))
    return out


def gemm_flops(shape: tuple[int, ...]) -> float:
    return 2.0 * float(np.prod(shape, dtype=np.float64))  # (M, K, N) or (B, M, K, N): one multiply-add = 2


def gemm_graph(shape: tuple[int, ...], int8: bool):
    """One MatMul (fp32) or MatMulInteger (uint8 activations x int8 weights -> int32, zero points as the
    dynamic quantiser writes them) with the weight as an initializer, as ORT prepacks it in the model."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    if len(shape) == 4:  # two activations
        b, m, k, n = shape
        inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [b, m, k]),
                  helper.make_tensor_value_info("b", TensorProto.FLOAT, [b, k, n])]
        node, inits, out = helper.make_node("MatMul", ["a", "b"], ["y"]), [], (TensorProto.FLOAT, [b, m, n])
    elif int8:
        m, k, n = shape
        inputs = [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])]
        inits = [numpy_helper.from_array(rng.integers(-127, 128, (k, n)).astype(np.int8), "w"),
                 numpy_helper.from_array(np.array(128, dtype=np.uint8), "a_zero"),
                 numpy_helper.from_array(np.array(0, dtype=np.int8), "w_zero")]
        node, out = helper.make_node("MatMulInteger", ["a", "w", "a_zero", "w_zero"], ["y"]), (TensorProto.INT32, [m, n])
    else:
        m, k, n = shape
        inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])]
        inits = [numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")]
        node, out = helper.make_node("MatMul", ["a", "w"], ["y"]), (TensorProto.FLOAT, [m, n])
    graph = helper.make_graph([node], "gemm", inputs, [helper.make_tensor_value_info("y", *out)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def fastest_call(fn, seconds: float, min_calls: int = 5) -> float:
    """The fastest of the calls made in `seconds` (at least `min_calls`), after one warm-up call."""
    fn()
    best, calls, end = float("inf"), 0, time.perf_counter() + seconds
    while calls < min_calls or time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        calls += 1
    return best


def gemm_ceiling(size: str, work: Path, args, model_rows: dict) -> dict:
    """Plain GEMMs of the model's shapes at batch CEILING_BATCH on args.threads threads, and the fraction of
    that ceiling the fp32 and int8 graphs reach: (time the model's products take as plain GEMMs) / (time the
    whole graph takes) - the rest is layer norms, softmax, GELU, activation quantisation and overheads."""
    import onnx

    batch = CEILING_BATCH
    gemms = model_gemms(size, batch)
    seconds: dict[tuple, float] = {}
    rng = np.random.default_rng(0)
    for _, kind, _, shape in gemms:
        for int8 in (False, True) if kind == "linear" else (False,):
            path = work / f"gemm-{size}-{'x'.join(map(str, shape))}-{'int8' if int8 else 'fp32'}.onnx"
            onnx.save(gemm_graph(shape, int8), str(path))
            session, _ = make_session(path, [CPU], args.threads)
            feeds = {i.name: (rng.integers(0, 256, i.shape).astype(np.uint8) if i.type == "tensor(uint8)" else
                              rng.standard_normal(i.shape).astype(np.float32)) for i in session.get_inputs()}
            seconds[shape, int8] = fastest_call(lambda s=session, f=feeds: s.run(None, f), args.seconds)
    rows = [{"name": name, "kind": kind, "count": count, "gflop": count * gemm_flops(shape) / 1e9,
             "fp32_gflops": gemm_flops(shape) / seconds[shape, False] / 1e9,
             "int8_gops": gemm_flops(shape) / seconds[shape, True] / 1e9 if kind == "linear" else None}
            for name, kind, count, shape in gemms]
    total = sum(count * gemm_flops(shape) for _, _, count, shape in gemms)
    out = {"batch": batch, "gemms": rows, "gflop": total / 1e9}
    for prec in ("fp32", "int8", "int8 fused"):  # the fused graph's products are the int8 graph's (Q, K, V in one)
        ceiling = sum(count * seconds[shape, prec != "fp32" and kind == "linear"] for _, kind, count, shape in gemms)
        sent_s = model_rows[f"ORT {prec} (CPU)"][batch]
        model = batch / sent_s
        out[prec] = {"ceiling_ms": 1e3 * ceiling, "model_ms": 1e3 * model, "fraction": ceiling / model,
                     "ceiling_gflops": total / ceiling / 1e9, "achieved_gflops": total / model / 1e9}
    return out


def ceiling_lines(size: str, c: dict, args) -> list[str]:
    lines = ["", f"### Runtime ceiling: plain GEMMs of this model's shapes (batch {c['batch']} x {SEQ_LEN} tokens, "
                 f"{args.threads} threads)", "",
             "| product | per forward pass | GFLOP per batch | fp32 MatMul (GFLOP/s) | int8 MatMulInteger (GOP/s) | "
             "int8 / fp32 |", "|---|---:|---:|---:|---:|---:|"]
    for r in c["gemms"]:
        i8 = r["int8_gops"]
        int8 = f"{fmt(i8)} | {i8 / r['fp32_gflops']:.2f}×" if i8 else "— | —"
        lines.append(f"| {r['name']}{' (fp32 in the int8 graph)' if r['kind'] != 'linear' else ''} | {r['count']} | "
                     f"{r['gflop']:.3f} | {fmt(r['fp32_gflops'])} | {int8} |")
    lines.append("")
    for prec in ("fp32", "int8", "int8 fused"):
        p = c[prec]
        lines.append(f"- ORT {prec} graph: its products as plain GEMMs take {p['ceiling_ms']:.2f} ms per batch "
                     f"({fmt(p['ceiling_gflops'])} GFLOP/s), the whole graph {p['model_ms']:.2f} ms "
                     f"({fmt(p['achieved_gflops'])} GFLOP/s): **{p['fraction']:.0%} of the GEMM ceiling**"
                     + (" (goal for small: ≥ 50%)" if prec.startswith("int8") and size == "small" else "") + ".")
    return lines


def trained_quality(work: Path, args) -> dict:
    src, what = trained_model(work)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src)
    ids, mask, cand = real_sentences(tok, args.sentences)
    out = work / "trained-onnx"
    manifest = export_model(src, out, quantize="int8", threads=args.threads, log=log)
    o32 = batched(OnnxBackend(out, precision="fp32", threads=args.threads).run, ids, mask)
    o8 = batched(OnnxBackend(out, precision="int8", threads=args.threads).run, ids, mask)
    cfg = json.loads((src / "config.json").read_text())
    return {"what": what, "config": {k: cfg[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size")},
            "spearman": spearman(pll(o32, cand), pll(o8, cand)), "max_abs_diff": float(np.abs(o8 - o32)[cand].max()),
            "parity": manifest["parity"]}


# ---- report -------------------------------------------------------------------------------------

def machine_name() -> str:
    cpu = platform.processor() or platform.machine()
    if Path("/proc/cpuinfo").is_file():
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} vCPUs, {gpu}"


def fmt(x: float) -> str:
    return "n/a" if x != x else f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def report(results: dict, cmp_rows, trained, args, meta) -> str:
    b = args.batches
    lines = ["# Runtime benchmark: torch vs ONNX Runtime fp32 / int8", "",
             "Generated by `benchmarks/bench_runtime.py`; figures, not tests (±30% run to run on a shared VM).", "",
             f"Command: `{meta['command']}`", "",
             f"- Machine: {meta['machine']}; {args.threads} threads for every engine; {meta['when']}",
             f"- Load average (1/5/15 min) before: {meta['load_before']}, after: {meta['load_after']}."
             + (" **The machine was shared with other jobs while measuring**: treat ratios as more reliable than "
                "absolute figures." if meta["shared"] else ""),
             f"- Versions: {meta['versions']}",
             f"- int8 GEMM kernel ONNX Runtime dispatches to on this CPU: **{meta['int8_kernel']}** "
             f"(CPU flags: {meta['int8_flags']}; electric.hardware.int8_gemm_kernel follows MLAS's CPUID dispatch).",
             f"- Input: {args.sentences} enwiki sentences truncated to exactly {SEQ_LEN} tokens; random-weight "
             f"ElectraForPreTraining; each cell is the fastest of >= 5 calls over >= {args.seconds} s; "
             "torch = transformers eager mode (default SDPA "
             "attention, fp32, `torch.inference_mode`); ORT = `electric export` graphs through `OnnxBackend` "
             "(legacy TorchScript exporter, eager attention, opset 17; int8 = dynamic quantisation of the encoder MatMuls, head and embedding projection fp32).",
             ""]
    for size, res in results.items():
        lines += [f"## {size} ({', '.join(f'{k}={v}' for k, v in SIZES[size].items())})", "",
                  "| engine | " + " | ".join(f"batch {x} (sent/s)" for x in b) + " | batch-1 latency (ms) | "
                  "× torch at batch 32 |",
                  "|---|" + "---:|" * (len(b) + 2)]
        torch32 = res["rows"]["torch eager fp32 (CPU)"].get(32, float("nan"))
        for name, r in res["rows"].items():
            ratio = r.get(32, float("nan")) / torch32
            lines.append(f"| {name} | " + " | ".join(fmt(r[x]) for x in b) + f" | {r['latency_ms']:.2f} | {ratio:.2f}× |")
        if res.get("one_thread"):
            one = res["one_thread"]
            t1 = one["torch eager fp32 (CPU)"]
            lines += ["", "One thread per engine (cross-check; less distorted by other jobs): " + "; ".join(
                f"{name} {fmt(r[32])} sent/s at batch 32 ({r[32] / t1[32]:.2f}× torch), {r['latency_ms']:.2f} ms "
                "at batch 1" for name, r in one.items()) + "."]
        q = res["quality"]
        p = res["parity"]
        lines += ["", f"- int8 vs fp32 on these {args.sentences} sentences: PLL Spearman "
                      f"**{q['int8']['spearman']:.4f}**, max |logit diff| {q['int8']['max_abs_diff']:.3g}; the fused "
                      f"int8 graph (`--int8-graph fused`): {q['int8 fused']['spearman']:.4f}, "
                      f"{q['int8 fused']['max_abs_diff']:.3g}.",
                  f"- Export-time parity ({p['sentences']} sentences from {Path(p['source']).name}, shapes "
                  f"{p['shapes']}): fp32 vs torch max |diff| {p['fp32']['max_abs_diff']:.2e}; int8 Spearman "
                  f"{p['int8']['spearman']:.4f}, max |diff| {p['int8']['max_abs_diff']:.3g}.", ""]
        if "fp16-cuda" in q:
            lines.insert(-1, f"- fp16 on CUDA vs fp32 on CPU: PLL Spearman {q['fp16-cuda']['spearman']:.4f}, "
                             f"max |logit diff| {q['fp16-cuda']['max_abs_diff']:.3g}.")
        if res.get("ceiling"):
            lines[-1:-1] = ceiling_lines(size, res["ceiling"], args)
    if "small" in results:
        r = results["small"]["rows"]
        t = r["torch eager fp32 (CPU)"][32]
        f32, i8 = r["ORT fp32 (CPU)"][32] / t, r["ORT int8 (CPU)"][32] / t
        sp = results["small"]["quality"]["int8"]["spearman"]
        lines += ["## Targets (small, batch 32)", "",
                  f"- ORT fp32 ≥ 2× torch: **{f32:.2f}×** ({'met' if f32 >= 2 else 'not met'})",
                  f"- ORT int8 ≥ 3.5× torch with Spearman ≥ 0.99: **{i8:.2f}×**, Spearman {sp:.4f} "
                  f"({'met' if i8 >= 3.5 and sp >= 0.99 else 'not met'})"]
        one = results["small"].get("one_thread")
        if one:
            t1 = one["torch eager fp32 (CPU)"][32]
            lines.append(f"- The same ratios on one thread each: fp32 {one['ORT fp32 (CPU)'][32] / t1:.2f}×, "
                         f"int8 {one['ORT int8 (CPU)'][32] / t1:.2f}×")
        lines.append("")
    if trained:
        lines += ["## int8 on a trained model", "",
                  f"Model: {trained['what']} ({trained['config']}). On the {args.sentences} {SEQ_LEN}-token sentences: "
                  f"int8 vs fp32 PLL Spearman **{trained['spearman']:.4f}**, max |logit diff| "
                  f"{trained['max_abs_diff']:.3g}. Export-time parity: fp32 vs torch "
                  f"{trained['parity']['fp32']['max_abs_diff']:.2e}, int8 Spearman "
                  f"{trained['parity']['int8']['spearman']:.4f}.", ""]
    if cmp_rows:
        lines += ["## Graph-making paths (small, random weights)", "",
                  "| path | export+quantise (s) | fp32 graph nodes | fp32 batch 1 (ms) | fp32 batch 32 (sent/s) | int8 batch 1 (ms) | "
                  "int8 batch 32 (sent/s) | fp32 max diff vs torch | int8 PLL Spearman vs torch |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in cmp_rows:
            if "error" in row:
                lines.append(f"| {row['name']} | failed: {row['error']} | | | | | | | |")
                continue
            lines.append(f"| {row['name']} | {row['export_s']:.1f} | {row['fp32_ops']} | {row['fp32']['latency_ms']:.2f} | "
                         f"{fmt(row['fp32'][32])} | {row['int8']['latency_ms']:.2f} | {fmt(row['int8'][32])} | "
                         f"{row['fp32_diff']:.1e} | {row['int8_spearman']:.4f} |")
        ok = [r for r in cmp_rows if "error" not in r]
        if ok:
            def total(r):
                return r["fp32"][32] + r["int8"][32]

            best = max(ok, key=total)
            ours = next(r for r in ok if r["name"] == "legacy exporter, eager attention")
            gap = total(best) / total(ours) - 1
            verdict = ("it is the fastest" if best is ours else
                       f"the fastest ({best['name']}) was {gap:.0%} ahead, inside this machine's noise"
                       if gap < 0.10 else f"**{best['name']} was {gap:.0%} faster: switch `electric export` to it**")
            lines += ["", f"{args.compare_threads} onnxruntime thread(s) here, 6 alternating rounds per cell (one "
                          "thread finds uncontended moments on a shared machine far more often than two). Summed fp32 "
                          "+ int8 throughput at batch 32 decides. `electric export` uses the legacy exporter with "
                          f"eager attention and no offline fusion: {verdict}.", ""]
    if not torch.cuda.is_available():
        lines += ["## GPU", "", "No CUDA device on this machine: fp16 on the CUDA provider was not measured. "
                  "On one, the same command adds torch fp16 and ORT fp16 (CUDA provider, IOBinding) rows.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small"], choices=sorted(SIZES))
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32, 128])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=1.5, help="minimum time per measurement")
    ap.add_argument("--sentences", type=int, default=256, help="sentences for the Spearman figures (>= max batch)")
    ap.add_argument("--compare-exporters", action="store_true", help="also compare graph-making paths at small")
    ap.add_argument("--compare-threads", type=int, default=1, help="onnxruntime threads for that comparison")
    ap.add_argument("--compare-int8-only", action="store_true",
                    help="compare only the ways of making the int8 graph (plain, fused, fused + QAttention, static QDQ)")
    ap.add_argument("--no-trained", action="store_true", help="skip the trained-model int8 Spearman")
    ap.add_argument("--out", default=None, help="the report (default benchmarks/results/runtime.md; none with --smoke)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny only, batches 1 and 32, short windows, no trained model, no report: checks the script")
    args = ap.parse_args(argv)
    if args.smoke:
        args.sizes, args.batches, args.seconds, args.sentences, args.no_trained = ["tiny"], [1, 32], 0.1, 32, True
    elif args.out is None:
        args.out = str(REPO / "benchmarks" / "results" / "runtime.md")
    if CEILING_BATCH not in args.batches:
        args.batches = sorted({*args.batches, CEILING_BATCH})
    args.sentences = max(args.sentences, max(args.batches))
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    import logging

    logging.getLogger().setLevel(logging.ERROR)  # onnxruntime.quantization's advice

    import onnxruntime
    import transformers

    load_before = os.getloadavg()
    meta = {"command": "python " + " ".join(shlex.quote(a) for a in ["benchmarks/bench_runtime.py", *(argv or sys.argv[1:])]),
            "machine": machine_name(), "when": time.strftime("%Y-%m-%d %H:%M"),
            "versions": f"torch {torch.__version__}, transformers {transformers.__version__}, "
                        f"onnxruntime {onnxruntime.__version__}",
            "int8_kernel": int8_gemm_kernel(),
            "int8_flags": " ".join(sorted(f for f in cpu_flags() if "vnni" in f or f.startswith("amx"))) or "no VNNI or AMX"}
    with tempfile.TemporaryDirectory(prefix="bench-runtime-") as tmp:
        work = Path(tmp)
        tok_dir = find_tokenizer(work)
        from transformers import AutoTokenizer

        data = real_sentences(AutoTokenizer.from_pretrained(tok_dir), args.sentences)
        results = {size: bench_size(size, tok_dir, work, data, args) for size in args.sizes}
        cmp_rows = None
        if args.compare_exporters:
            src = results["small"]["src"] if "small" in results else random_model("small", tok_dir, work / "small-hf")
            cmp_rows = compare_exporters(src, work, data, args)
        trained = None if args.no_trained else trained_quality(work, args)
    load_after = os.getloadavg()
    meta["load_before"] = "/".join(f"{x:.2f}" for x in load_before)
    meta["load_after"] = "/".join(f"{x:.2f}" for x in load_after)
    meta["shared"] = load_before[0] > 1.0  # before we start: a busy core (the 1-min average decays slowly)
    text = report(results, cmp_rows, trained, args, meta)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
        log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
