"""int8 that ignores its batch: fp32, static int8 and dynamic int8 of one export, side by side (not a test: prints
figures and writes benchmarks/results/int8_determinism.json).

    electric export --model RUN/discriminator --out OUT/static --quantize int8 --no-calibration
    electric export --model RUN/discriminator --out OUT/dynamic --quantize int8 --int8-method dynamic --no-calibration
    python benchmarks/bench_int8_determinism.py --static OUT/static --dynamic OUT/dynamic [--atis]
    python benchmarks/bench_int8_determinism.py --static OUT/static --dynamic OUT/dynamic --atis-only

For each graph (fp32 = OUT/static's model.onnx), run by the server's runtime (OnnxBackend.run, padded and bucketed):
- max_abs_diff: the most a text's outputs (each real token's, and its sentence score) move between the text scored
  alone and the same text inside a batch of 1-63 random batch-mates (real ATIS hypotheses; one batch-mate of the
  model's full length in some trials);
- cpu_ms_c1 / cpu_ms_c64: process CPU ms per request, requests of one sentence run one at a time (c=1) or 64 to a
  batch (c=64, what the server's batcher makes of 64 concurrent requests), --threads onnxruntime threads;
- spearman: of the sentence scores vs fp32 on --sentences real sentences (SST-2 dev, and ATIS 5-best hypotheses);
- atis_wer (--atis): the guarded ATIS rerank of each graph, what `electric eval nbest --model OUT/X --nbest
  atis_test.whisper5best.json` gives with $ELECTRIC_ONNX_PRECISION set to the graph's precision (method electric;
  weights tuned on the seeded half of the lists the tool tunes on by default, WER on the other half): the first
  hypothesis's WER, no LM's (first pass + tuned word and piece bonuses), with the LM's weights tuned on dev
  (`with_lm`), the reranked lists' (what the guard applied) and whether the guard applied the LM. --atis-only
  measures only that and adds it to the rows of an existing --out, its other figures kept.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from electric.batching import pad_rows  # noqa: E402
from electric.checkpoint import ExportManifest  # noqa: E402
from electric.evaluation.metrics import spearman  # noqa: E402
from electric.evaluation.nbest import RerankOptions, read_nbest, rerank_nbest  # noqa: E402
from electric.export.parity import read_sentences  # noqa: E402
from electric.hardware import int8_gemm_kernel  # noqa: E402
from electric.inference.backend import load_backend  # noqa: E402
from electric.inference.records import text_scores  # noqa: E402
from electric.inference.scoring import Scorer  # noqa: E402
from electric.shared_data import shared_data_dir  # noqa: E402

SHARED = shared_data_dir()
ATIS_TEST = SHARED / "nbest" / "atis_test.whisper5best.json"


def atis_hypotheses(n: int) -> list[str]:
    data = json.loads(ATIS_TEST.read_text())
    return [h for item in data for h in item["input"]][:n]


def encode(tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    """[CLS] ... [SEP] ids of each text, cut to `max_length` (its [SEP] kept)."""
    rows = [tokenizer.backend_tokenizer.encode(t).ids for t in texts]
    return [r if len(r) <= max_length else [*r[: max_length - 1], r[-1]] for r in rows]


def scores(backend, rows: list[list[int]], batch: int = 32) -> np.ndarray:
    """One number per row: the sum of the graph's per-token outputs over the non-special tokens (discriminator: minus
    it, the PLL; cloze: the cloze score)."""
    special = set(backend.tokenizer.all_special_ids)
    sign = -1.0 if backend.kind == "discriminator" else 1.0
    out = []
    for i in range(0, len(rows), batch):
        chunk = rows[i : i + batch]
        logits = backend.run(*pad_rows(chunk, backend.tokenizer.pad_token_id))
        for r, row in enumerate(chunk):
            keep = np.array([t not in special for t in row])
            out.append(sign * float(logits[r, : len(row)][keep].sum()))
    return np.array(out)


def batch_difference(backend, rows: list[list[int]], long_row: list[int], trials: int, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    pad = backend.tokenizer.pad_token_id
    worst = 0.0
    for trial in range(trials):
        text = rows[int(rng.integers(len(rows)))] if trial % 5 else long_row
        mates = [rows[int(j)] for j in rng.integers(0, len(rows), int(rng.integers(1, 64)))]
        if trial % 5 == 1:
            mates.append(long_row)
        at = int(rng.integers(0, len(mates) + 1))
        alone = backend.run(*pad_rows([text], pad))[0]
        inside = backend.run(*pad_rows([*mates[:at], text, *mates[at:]], pad))[at, : len(text)]
        worst = max(worst, float(np.abs(inside - alone).max()), abs(float(inside.sum() - alone.sum())))
    return worst


def cpu_ms_per_request(backend, rows: list[list[int]], concurrency: int, seconds: float) -> float:
    pad = backend.tokenizer.pad_token_id
    for i in range(0, 2 * concurrency, concurrency):  # warm
        backend.run(*pad_rows([rows[(i + j) % len(rows)] for j in range(concurrency)], pad))
    done, t0, c0, i = 0, time.perf_counter(), time.process_time(), 0
    while time.perf_counter() - t0 < seconds:
        chunk = [rows[(i + j) % len(rows)] for j in range(concurrency)]
        backend.run(*pad_rows(chunk, pad))
        done, i = done + concurrency, i + concurrency
    return (time.process_time() - c0) * 1000 / done


def atis_wer(backend, utterances: int | None = None) -> dict:
    """The guarded ATIS rerank with `backend`'s Electric scores, as `electric eval nbest` runs it by default (its
    Scorer's batches, `rerank_nbest` with the default options: dev = a seeded half of the lists, seed 0): test WER
    (percent) of the first hypothesis, of no LM, of the LM weights tuned on dev, of the reranked lists, and whether
    the guard applied the LM. `utterances`: the first so many lists only (default all)."""
    lists, _ = read_nbest(ATIS_TEST)
    scorer = Scorer(backend)
    result = rerank_nbest(lists[:utterances], lambda texts: text_scores(scorer, texts, "electric"), RerankOptions())
    tuning = result.report.tuning
    test = tuning["test"]
    return {"first": test["first"], "no_lm": test["no_lm"], "with_lm": test["with_lm"], "reranked": test["reranked"],
            "lm_applied": tuning["applied"] == "lm", "lm_score": result.report.lm_score,
            "test_utterances": test["num_utterances"]}


def add_atis_wer(out: Path, graphs: dict, model: str, threads: int, utterances: int | None, command: str) -> None:
    """--atis-only: the ATIS rerank of each graph added to the rows of the report at `out` (the same model's), every
    other figure kept."""
    result = json.loads(out.read_text())
    if result["model"] != model:
        raise SystemExit(f"{out} measured {result['model']}, not {model}: run the whole bench with --atis")
    rows = {(r["precision"], r["quantisation"]): r for r in result["rows"]}
    for key, (d, p) in graphs.items():
        if key not in rows:
            raise SystemExit(f"{out} has no {key[0]}/{key[1]} row: run the whole bench with --atis")
        rows[key]["atis_wer"] = atis_wer(load_backend(d, precision=p, threads=threads), utterances)
        print(json.dumps({"precision": key[0], "quantisation": key[1], "atis_wer": rows[key]["atis_wer"]}), flush=True)
    result["atis_command"] = command
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"added atis_wer to {out}")


def cpu_name() -> tuple[str, list[str]]:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")),
                platform.processor())
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    return name, [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8") if f in flags]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--static", required=True, help="an export with static int8 (its fp32 graph is the reference)")
    ap.add_argument("--dynamic", required=True, help="the same checkpoint exported with --int8-method dynamic")
    ap.add_argument("--sentences", type=int, default=400, help="SST-2 dev sentences and ATIS hypotheses, each")
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=8.0, help="timed seconds per graph and concurrency")
    ap.add_argument("--atis", action="store_true", help="also the guarded ATIS rerank's WERs of each graph")
    ap.add_argument("--atis-only", action="store_true",
                    help="only the ATIS rerank, added to the rows of the existing --out (its other figures kept)")
    ap.add_argument("--atis-utterances", type=int, help="the first so many ATIS test lists (default all 809)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "int8_determinism.json"))
    args = ap.parse_args(argv)
    command = "python benchmarks/bench_int8_determinism.py " + shlex.join(sys.argv[1:] if argv is None else argv)

    graphs = {("fp32", "none"): (args.static, "fp32"), ("int8", "static"): (args.static, "int8"),
              ("int8", "dynamic"): (args.dynamic, "int8")}
    manifest = ExportManifest.read(args.static)
    assert manifest.int8_method == "static", "--static must be a static int8 export"
    assert ExportManifest.read(args.dynamic).int8_method == "dynamic"
    if args.atis_only:
        add_atis_wer(Path(args.out), graphs, manifest.source["path"], args.threads, args.atis_utterances, command)
        return 0
    reference: dict[str, np.ndarray] = {}
    rows_out = []
    for (precision, method), (d, p) in graphs.items():
        be = load_backend(d, precision=p, threads=args.threads)
        length = be.runner.max_length
        sst2 = encode(be.tokenizer, read_sentences(SHARED / "glue" / "sst2" / "dev.tsv", args.sentences), 128)
        atis = encode(be.tokenizer, atis_hypotheses(args.sentences), 128)
        long_text = " ".join(read_sentences(SHARED / "glue" / "sst2" / "dev.tsv", 200))
        long_row = encode(be.tokenizer, [long_text], length)[0]
        row = {"precision": precision, "quantisation": method,
               "max_abs_diff": batch_difference(be, sst2 + atis, long_row, args.trials)}
        for name, rows in (("sst2", sst2), ("atis", atis)):
            s = scores(be, rows)
            reference.setdefault(name, s)
            row[f"spearman_{name}"] = float(spearman(reference[name], s))
        row["cpu_ms_c1"] = cpu_ms_per_request(be, atis, 1, args.seconds)
        row["cpu_ms_c64"] = cpu_ms_per_request(be, atis, 64, args.seconds)
        if args.atis:
            row["atis_wer"] = atis_wer(be, args.atis_utterances)
        print(json.dumps(row), flush=True)
        rows_out.append(row)
    name, flags = cpu_name()
    result = {"model": manifest.source["path"], "kind": manifest.kind, "max_length": manifest.max_length,
              "cpu": name, "cpu_flags": flags, "int8_kernel": int8_gemm_kernel(), "threads": args.threads,
              "command": command,
              "rows": rows_out}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
