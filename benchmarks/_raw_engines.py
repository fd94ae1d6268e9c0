"""The engines without a server, for the server benchmarks to compare against: ONNX Runtime through the library
(`OnnxBackend`, as `electric serve` runs it) and transformers' torch classifier (the peer's engine): batch-1
latency and the best throughput over batch sizes on the same sentences.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def raw_runtime(model: Path, texts: list[str], seconds: float, threads: int | None) -> dict:
    from electric.batching import pad_rows, plan_batches
    from electric.inference.classify import classify_row
    from electric.inference.encoding import encode
    from electric.inference.runtime import OnnxBackend
    from electric.inference.scoring import electric_score

    be = OnnxBackend(model, threads=threads)
    if be.labels is None:  # a discriminator: the library's score
        finish = electric_score
    else:  # a classifier: label probabilities
        def finish(_encoded, logits):
            return classify_row(be.labels, False, logits)
    enc = encode(be.tokenizer, texts, be.max_length)
    pad = be.tokenizer.pad_token_id
    be.warmup()
    lat = []  # batch-1 latency, runtime only
    t_end = time.perf_counter() + seconds / 3
    i = 0
    while time.perf_counter() < t_end:
        e = enc[i % len(enc)]
        ids, mask = pad_rows([e.input_ids], pad)
        t0 = time.perf_counter()
        be.run(ids, mask)
        lat.append(time.perf_counter() - t0)
        i += 1
    e2e = []  # batch-1 latency: encode + run + electric_score (the library, as `electric score` runs it)
    t_end = time.perf_counter() + seconds / 6
    i = 0
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        e = encode(be.tokenizer, [texts[i % len(texts)]], be.max_length)[0]
        ids, mask = pad_rows([e.input_ids], pad)
        finish(e, be.run(ids, mask)[0])
        e2e.append(time.perf_counter() - t0)
        i += 1
    throughput = {}
    for bs in (8, 32, 64, 128):
        batches = plan_batches([x.length for x in enc], max_batch_tokens=1 << 30, batch_size=bs)
        padded = [pad_rows([enc[k].input_ids for k in b], pad) for b in batches]
        n, t0 = 0, time.perf_counter()
        t_end = t0 + seconds / 8
        while time.perf_counter() < t_end:
            for ids, mask in padded:
                be.run(ids, mask)
                n += ids.shape[0]
        throughput[bs] = n / (time.perf_counter() - t0)
    best = max(throughput, key=throughput.get)
    return {"providers": be.providers, "threads": be.threads, "precision": be.precision,
            "b1_p50_ms": 1e3 * float(np.percentile(lat, 50)), "b1_p99_ms": 1e3 * float(np.percentile(lat, 99)),
            "e2e_b1_p50_ms": 1e3 * float(np.percentile(e2e, 50)), "throughput": throughput,
            "best_batch": best, "best_throughput": throughput[best],
            "mean_tokens": float(np.mean([x.length for x in enc]))}


def raw_torch(ckpt: Path, texts: list[str], seconds: float) -> dict:
    """The peer's engine without its server: transformers' classifier in torch eager fp32 (torch's default
    threads, as the peer runs), batch-1 latency and the best throughput over batch sizes."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForSequenceClassification.from_pretrained(ckpt).eval()
    order = sorted(texts, key=len)
    lat, throughput = [], {}
    with torch.inference_mode():
        t_end, i = time.perf_counter() + seconds / 3, 0
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            model(**tok([texts[i % len(texts)]], return_tensors="pt"))
            lat.append(time.perf_counter() - t0)
            i += 1
        for bs in (8, 32, 64):
            batches = [tok(order[k:k + bs], padding=True, return_tensors="pt") for k in range(0, len(order), bs)]
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() < t0 + seconds / 6:
                for b in batches:
                    model(**b)
                    n += b["input_ids"].shape[0]
            throughput[bs] = n / (time.perf_counter() - t0)
    best = max(throughput, key=throughput.get)
    return {"threads": torch.get_num_threads(), "b1_p50_ms": 1e3 * float(np.percentile(lat, 50)),
            "b1_p99_ms": 1e3 * float(np.percentile(lat, 99)), "throughput": throughput, "best_batch": best,
            "best_throughput": throughput[best]}

