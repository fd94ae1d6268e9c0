"""Timing for bench_runtime: engines measured in alternating windows (the fastest call), and the runtime's own
ceiling - plain fp32 MatMul and int8 MatMulInteger graphs of a discriminator's product shapes, on the same
threads, and the fraction of that ceiling the model's graphs reach.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from _bench_models import SIZES

from electric.inference.runtime import CPU, make_session

SEQ_LEN = 24  # tokens in every benchmark sentence
CEILING_BATCH = 32  # the batch of the GEMM ceiling


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


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

