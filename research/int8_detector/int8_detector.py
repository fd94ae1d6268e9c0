"""What loses the rank in a detector's static int8 graph, and what wins it back: each variant's sentence-score
Spearman against the fp32 graph (the export's gate, on the same parity batches), and the speed of a request.

    python research/int8_detector/int8_detector.py --model runs/qs/electric-atis --model runs/qs/electric-atis/detector \
        --model ENERGY_CHECKPOINT --parity PARITY.txt --calibration CALIBRATION.txt

For each --model - an `electric export` directory (its model.onnx as it is: the scorer and the detector of an
`electric adapt` model directory) or a checkpoint (exported, and checked against torch, as `electric export` does:
the Electric continuation's energy model, which served as the detector before the lists trained one) -
1. the fp32 graph;
2. static int8 variants, each compared with fp32 on the parity batches (Spearman of sentence scores, the gate's
   measure; per token; max |logit diff|):
   - the export's own: int8 weights per channel, min-max ranges of 256 calibration sentences;
   - weights per tensor; ranges by percentile and by entropy; ranges from 64 sentences, or from all of the
     calibration text's not among the parity sentences (800 in an adapt work directory);
   - one encoder layer kept fp32 at a time, and one kind of MatMul kept fp32 in every layer (query, key, value,
     attention output, FFN in, FFN out): where the rank is lost;
   - the export's own with the worst layer kept fp32;
3. the speed of a request through onnxruntime (the machine's cores): one sentence, and 16, median ms of fp32, the
   export's int8 and the best variant.
Writes results/int8_detector.json and int8_detector.md (the CPU named). Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from electric.export.exporter import (  # noqa: E402
    ExportOptions,
    check_fp32_parity,
    export_fp32,
    plan_export,
)
from electric.export.graph import KEEP_FP32, quantize_int8_static  # noqa: E402
from electric.export.parity import (  # noqa: E402
    compare,
    parity_batches,
    parity_sentences,
    read_sentences,
    run_batches,
)
from electric.hardware import cpu_description  # noqa: E402
from electric.inference.runtime import CPU, OnnxRunner  # noqa: E402
from electric.tokenization import load_tokenizer  # noqa: E402

MATMULS = {"query": "/attention/self/query/", "key": "/attention/self/key/", "value": "/attention/self/value/",
           "attention output": "/attention/output/dense/", "FFN in": "/intermediate/dense/"}
GATE = 0.99


def layers(fp32: Path) -> int:
    import onnx

    names = [n.name for n in onnx.load(str(fp32), load_external_data=False).graph.node]
    return len({n.split("/layer.")[1].split("/")[0] for n in names if "/layer." in n})


def variants(n_layers: int) -> list[tuple[str, dict]]:
    """(name, how): `keep` adds module paths kept fp32; `per_channel`, `ranges`, `sentences` as quantize_int8_static
    and the export's calibration take them."""
    out = [("the export's (per channel, min-max, 256 sentences)", {}),
           ("weights per tensor", {"per_channel": False}),
           ("ranges: percentile 99.999", {"ranges": "percentile"}),
           ("ranges: entropy", {"ranges": "entropy"}),
           ("ranges from 64 sentences", {"sentences": 64}),
           ("ranges from every held-out calibration sentence", {"sentences": 100_000})]
    out += [(f"layer {i} fp32", {"keep": [f"/layer.{i}/"]}) for i in range(n_layers)]
    out += [(f"{name} fp32 in every layer", {"keep": [path]}) for name, path in MATMULS.items()]
    out.append(("FFN out fp32 in every layer", {"keep": [f"/layer.{i}/output/dense/" for i in range(n_layers)]}))
    return out


def median_ms(runner: OnnxRunner, batch: dict, repeats: int) -> float:
    args = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    for _ in range(3):
        runner.run(*args)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        runner.run(*args)
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


@dataclass
class Fp32:
    """What the variants are measured against: the fp32 graph, its runner and outputs on the parity batches."""

    path: Path
    runner: OnnxRunner
    outputs: list
    kind: str
    tokenizer: object
    max_length: int
    sentences: list[str]
    batches: list[dict]


def fp32_graph(model: Path, args: argparse.Namespace, work: Path) -> Fp32:
    """An export directory's model.onnx as it is, or a checkpoint's, exported and checked as `electric export` does."""
    if (model / "electric.json").is_file():
        tokenizer = load_tokenizer(model)
        max_length = int(json.loads((model / "config.json").read_text()).get("max_position_embeddings", 512))
        sentences, _ = parity_sentences(args.parity)
        batches = parity_batches(tokenizer, sentences, max_length, False)
        runner = OnnxRunner(model / "model.onnx", max_length=max_length, pad_token_id=tokenizer.pad_token_id,
                            providers=[CPU])
        return Fp32(model / "model.onnx", runner, run_batches(runner.run, batches), "discriminator", tokenizer,
                    max_length, sentences, batches)
    options = ExportOptions(quantize="int8", overwrite=True, parity_data=args.parity, calibration_data=args.calibration)
    plan = plan_export(model, work / "out", options, log=lambda *_: None)
    fp32 = check_fp32_parity(plan, export_fp32(plan, work, print), print)
    return Fp32(fp32.path, fp32.runner, fp32.outputs, plan.kind, plan.tokenizer, plan.max_length, plan.sentences,
                plan.batches)


def study(model: Path, args: argparse.Namespace, work: Path) -> dict:
    plan = fp32 = fp32_graph(model, args, work)
    calibration = read_sentences(args.calibration)
    seen = set(plan.sentences)
    held_out = [t for t in calibration if t not in seen]

    def ranges_batches(n: int) -> list[dict]:
        return parity_batches(plan.tokenizer, held_out[:n], plan.max_length, False, [32] * -(-min(n, len(held_out))
                                                                                            // 32))

    runner_of = {}
    rows = []
    for name, how in variants(layers(fp32.path)):
        path = work / f"int8-{len(rows)}.onnx"
        t0 = time.perf_counter()
        quantize_int8_static(fp32.path, path, ranges_batches(how.get("sentences", 256)),
                             keep_fp32=(*KEEP_FP32, *how.get("keep", ())), per_channel=how.get("per_channel", True),
                             ranges=how.get("ranges", "minmax"))
        runner = OnnxRunner(path, max_length=plan.max_length, pad_token_id=plan.tokenizer.pad_token_id,
                            providers=[CPU])
        st = compare(plan.kind, plan.batches, fp32.outputs, run_batches(runner.run, plan.batches))
        rows.append({"variant": name, **how, "spearman": st["spearman"], "spearman_per_token": st["spearman_per_token"],
                     "max_abs_diff": st["max_abs_diff"], "passes": st["spearman"] >= GATE,
                     "range_sentences": min(how.get("sentences", 256), len(held_out)),
                     "seconds": time.perf_counter() - t0})
        runner_of[name] = runner
        print(f"{model.name} {name}: Spearman {st['spearman']:.4f} (per token {st['spearman_per_token']:.4f}), "
              f"max |diff| {st['max_abs_diff']:.3f}", file=sys.stderr)
    default = rows[0]["variant"]
    layer_rows = [r for r in rows if r["variant"].startswith("layer ")]
    worst = max(layer_rows, key=lambda r: r["spearman"])  # the layer whose fp32 wins the most back
    how = {"keep": worst["keep"]}
    name = f"the export's, {worst['variant'].removesuffix(' fp32')} kept fp32"
    path = work / "int8-worst.onnx"
    quantize_int8_static(fp32.path, path, ranges_batches(256), keep_fp32=(*KEEP_FP32, *how["keep"]))
    runner = OnnxRunner(path, max_length=plan.max_length, pad_token_id=plan.tokenizer.pad_token_id, providers=[CPU])
    st = compare(plan.kind, plan.batches, fp32.outputs, run_batches(runner.run, plan.batches))
    rows.append({"variant": name, **how, "spearman": st["spearman"], "spearman_per_token": st["spearman_per_token"],
                 "max_abs_diff": st["max_abs_diff"], "passes": st["spearman"] >= GATE})
    runner_of[name] = runner
    best = max(rows[1:], key=lambda r: r["spearman"])["variant"]
    one = parity_batches(plan.tokenizer, held_out[:1], plan.max_length, False, [1])[0]
    sixteen = parity_batches(plan.tokenizer, held_out[:16], plan.max_length, False, [16])[0]
    speed = {}
    for label, r in (("fp32", fp32.runner), (default, runner_of[default]), (best, runner_of[best])):
        speed[label] = {"1 sentence": median_ms(r, one, args.repeats), "16 sentences": median_ms(r, sixteen,
                                                                                               args.repeats // 4)}
        print(f"{model.name} {label}: {speed[label]}", file=sys.stderr)
    return {"model": str(model), "parity_sentences": len(plan.sentences), "variants": rows, "best": best,
            "speed_ms": speed, "worst_layer": worst["variant"]}


def report(results: list[dict], argv: list[str]) -> str:
    cmd = shlex.join(["python", "research/int8_detector/int8_detector.py", *argv])
    lines = ["# What loses the rank in a detector's static int8 graph", "",
             f"`{cmd}` on {cpu_description()}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}.", ""]
    for r in results:
        lines += [f"## {r['model']}", "", f"Spearman of sentence scores against fp32 on its {r['parity_sentences']} "
                  f"parity sentences (the gate: {GATE}):", "",
                  "| variant | Spearman | per token | max logit diff | passes |", "|---|---|---|---|---|"]
        lines += [f"| {v['variant']} | {v['spearman']:.4f} | {v['spearman_per_token']:.4f} | {v['max_abs_diff']:.3f} | "
                  f"{'yes' if v['passes'] else 'no'} |" for v in r["variants"]]
        lines += ["", "Median ms of a request (onnxruntime, CPU):", "", "| graph | 1 sentence | 16 sentences |",
                  "|---|---|---|"]
        lines += [f"| {k} | {v['1 sentence']:.2f} | {v['16 sentences']:.2f} |" for k, v in r["speed_ms"].items()]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", required=True, help="a detector checkpoint (repeatable)")
    ap.add_argument("--parity", required=True, help="the parity sentences (an adapt work dir's parity.txt)")
    ap.add_argument("--calibration", required=True, help="the calibration text (its calibration.txt)")
    ap.add_argument("--repeats", type=int, default=200, help="timed runs of one sentence (a quarter for 16)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"), help="the results folder")
    args = ap.parse_args(argv)
    results = []
    for model in args.model:
        with tempfile.TemporaryDirectory(prefix="int8-detector-") as tmp:
            results.append(study(Path(model), args, Path(tmp)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "int8_detector.json").write_text(json.dumps(results, indent=1) + "\n")
    text = report(results, argv)
    (out / "int8_detector.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
