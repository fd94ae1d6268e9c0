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
from _bench_models import SIZES, random_discriminator  # noqa: E402
from _runtime_exporters import compare_exporters  # noqa: E402
from _runtime_report import machine_name, report  # noqa: E402
from _runtime_timing import CEILING_BATCH, SEQ_LEN, batched, gemm_ceiling, log, measure, pll  # noqa: E402

from electric.evaluation.metrics import spearman  # noqa: E402
from electric.export.exporter import ExportOptions, export_model  # noqa: E402
from electric.hardware import cpu_flags, int8_gemm_kernel  # noqa: E402
from electric.inference.backend import TorchBackend  # noqa: E402
from electric.inference.runtime import CPU, CUDA, OnnxBackend  # noqa: E402

# ---- data and models ----------------------------------------------------------------------------

def find_tokenizer(work: Path) -> Path:
    for cand in (REPO / "runs" / "electric-tiny" / "discriminator", REPO / "runs" / "tok"):
        if (cand / "tokenizer.json").is_file() or (cand / "vocab.txt").is_file():
            return cand
    import training.tokenizer

    out = work / "tok"
    if training.tokenizer.main(["--data", str(SHARED / "corpus" / "enwiki" / "wiki_00"), "--vocab-size", "16000",
                        "--out", str(out)]):
        raise SystemExit("training the tokenizer failed")
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


def trained_model(work: Path) -> tuple[Path, str]:
    d = REPO / "runs" / "electric-tiny" / "discriminator"
    if (d / "config.json").is_file():
        return d, str(d.relative_to(REPO))
    import training.pretrain

    wiki = work / "wiki_sample"
    with open(SHARED / "corpus" / "enwiki" / "wiki_00", encoding="utf-8") as f:
        wiki.write_text("".join(f.readline() for _ in range(3000)), encoding="utf-8")
    run = work / "electric-debug"
    rc = training.pretrain.main(["--objective", "electric", "--preset", "debug", "--data", str(wiki), "--tokenizer",
                   str(find_tokenizer(work)), "--out", str(run), "--max-steps", "30", "--num-proc", "1"])
    if rc:
        raise SystemExit(f"debug pretraining failed ({rc})")
    return run / "discriminator", "a 30-step debug Electric run (runs/electric-tiny was not there)"


# ---- sections -----------------------------------------------------------------------------------

def bench_size(size, tok_dir, work, data, args) -> dict:
    ids, mask, cand = data
    src = random_discriminator(size, tok_dir, work / f"{size}-hf", max_positions=512)
    out = work / f"{size}-onnx"
    fp16 = torch.cuda.is_available()
    manifest = export_model(src, out, ExportOptions(quantize="int8", fp16=fp16, threads=args.threads), log=log)
    # the int8 graph made the other way (electric export --int8-graph fused): fused BERT ops, QAttention
    fused = work / f"{size}-onnx-fused"
    export_model(src, fused, ExportOptions(quantize="int8", int8_graph="fused", threads=args.threads), log=log)
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
    return {"rows": rows, "quality": quality, "parity": manifest.parity, "src": src, "one_thread": single,
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


def trained_quality(work: Path, args) -> dict:
    src, what = trained_model(work)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src)
    ids, mask, cand = real_sentences(tok, args.sentences)
    out = work / "trained-onnx"
    manifest = export_model(src, out, ExportOptions(quantize="int8", threads=args.threads), log=log)
    o32 = batched(OnnxBackend(out, precision="fp32", threads=args.threads).run, ids, mask)
    o8 = batched(OnnxBackend(out, precision="int8", threads=args.threads).run, ids, mask)
    cfg = json.loads((src / "config.json").read_text())
    return {"what": what, "config": {k: cfg[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size")},
            "spearman": spearman(pll(o32, cand), pll(o8, cand)), "max_abs_diff": float(np.abs(o8 - o32)[cand].max()),
            "parity": manifest.parity}


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
            src = results["small"]["src"] if "small" in results else \
                random_discriminator("small", tok_dir, work / "small-hf", max_positions=512)
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
