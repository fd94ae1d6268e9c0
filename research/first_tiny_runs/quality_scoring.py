"""Quality of each scoring method on pretrained runs: BLiMP accuracy and LibriSpeech 5-best WER.

    python research/first_tiny_runs/quality_scoring.py --runs runs/mlm-tiny runs/electra-tiny runs/electric-tiny
    python research/first_tiny_runs/quality_scoring.py --runs runs/electric-tiny --limit 50 --out /tmp/q.md   # quick look

For every run directory (or model directory) and every scoring method it supports:
- `electric` (Electric PLL, sum of -s_t) and `electra` (sum of log(1 - sigma(s_t))) on RUN/discriminator;
- `mlm-pll` (and with --word-l2r `mlm-pll-word-l2r`) on RUN/generator of an `--objective mlm` run (the
  full-size masked LM) or on a bare masked-LM directory; with --small-generators also on the 1/4-size
  generator of an `electra` run (never on Electric's two-tower cloze generator, which is not a masked LM);
it reports BLiMP accuracy on every set of --blimp (a pair is right when the good sentence scores higher)
and the WER of reranking --nbest: weights tuned on a seeded half of the utterances, WER reported on the
other half, with first-hypothesis and oracle WER on the whole set and on that half. Missing runs are
listed and skipped. Writes a Markdown table (--out) and optionally JSON (--json).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
from electric.shared_data import shared_data_dir  # noqa: E402

SHARED = shared_data_dir()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_RUNS = ["runs/mlm-tiny", "runs/electra-tiny", "runs/electric-tiny"]


def run_info(path: Path) -> dict:
    """Objective, size and training budget of a run directory (empty for a bare model directory)."""
    from electric.checkpoint import run_parts

    info: dict = {"path": str(path)}
    cfg = path / "config.json"
    if run_parts(path):
        if cfg.is_file():
            c = json.loads(cfg.read_text())
            info.update({k: c.get(k) for k in ("objective", "preset", "hidden_size", "num_hidden_layers",
                                               "max_seq_length", "batch_size", "time_budget_minutes", "precision")})
        metrics = path / "metrics.jsonl"
        if metrics.is_file():
            last = None
            with open(metrics, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        row = json.loads(line)
                        if "tokens" in row:
                            last = row
            if last:
                info.update(step=last.get("step"), tokens=last.get("tokens"), elapsed_s=last.get("elapsed_s"))
    return info


def methods_for(path: Path, word_l2r: bool, small_generators: bool = False) -> list[tuple[str, Path]]:
    """(method, model directory) pairs that apply to a run or model directory. MLM PLL runs on the
    generator of an `mlm` run (or a bare masked-LM directory); the small generator of an `electra` run
    only with `small_generators`."""
    from electric.checkpoint import run_parts

    def archs(d: Path) -> list[str]:
        cfg = d / "config.json"
        return (json.loads(cfg.read_text()).get("architectures") or []) if cfg.is_file() else []

    out = []
    parts = run_parts(path)
    disc, gen = parts.get("discriminator", path), parts.get("generator", path)
    if "ElectraForPreTraining" in archs(disc):
        out += [("electric", disc), ("electra", disc)]
    full_size_mlm = "discriminator" not in parts  # a model directory, or an mlm run (it has no discriminator)
    if any(a.endswith("ForMaskedLM") for a in archs(gen)) and (full_size_mlm or small_generators):
        out.append(("mlm-pll", gen))
        if word_l2r:
            out.append(("mlm-pll-word-l2r", gen))
    return out


def count_params(scorer) -> int:
    model = scorer.model if hasattr(scorer, "model") else getattr(scorer.backend, "model", None)
    return sum(p.numel() for p in model.parameters()) if model is not None else 0


_DISC_CACHE: dict[tuple[str, str], tuple[float, float]] = {}  # (model dir, text) -> (electric, electra)


def evaluate(run: Path, method: str, model_dir: Path, args, blimp_sets, nbest_lists) -> dict:
    from electric.evaluation.blimp import blimp_accuracy
    from electric.evaluation.nbest import RerankOptions, rerank_report, score_nbest
    from electric.inference.scoring import Scorer, electra_score, electric_score, load_scorer

    scorer = load_scorer(model_dir, method, backend="torch", device=args.device,
                         max_batch_tokens=args.max_batch_tokens, batch_size=args.batch_size)

    def score_fn(texts):
        if not isinstance(scorer, Scorer):
            return [s.score for s in scorer.score(texts, method=method)]
        # electric and electra come from the same discriminator pass: run it once for both
        todo = [t for t in dict.fromkeys(texts) if (str(model_dir), t) not in _DISC_CACHE]
        if todo:
            enc = scorer.encode(todo)
            for e, row in zip(enc, scorer.logits(enc), strict=True):
                _DISC_CACHE[str(model_dir), e.text] = (electric_score(e, row).score, electra_score(e, row).score)
        k = 0 if method == "electric" else 1
        return [_DISC_CACHE[str(model_dir), t][k] for t in texts]

    res: dict = {"run": str(run), "method": method, "model": str(model_dir), "params": count_params(scorer)}
    t0 = time.perf_counter()
    res["blimp"] = blimp_accuracy(blimp_sets, score_fn, chunk_size=512, progress=args.progress)
    res["blimp_seconds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    lm = score_nbest(nbest_lists, score_fn, chunk_size=256, progress=args.progress)
    # the lists have no first-pass scores, but their order is Whisper's beam order: a first-pass order
    # the pieces each hypothesis is scored on: the no-LM baseline's per-piece bonus (the length every LM score carries)
    pieces = score_nbest(nbest_lists, lambda texts: [e.num_candidates for e in scorer.encode(texts)], chunk_size=256)
    weights, report = rerank_report(nbest_lists, lm, RerankOptions(metric="wer", dev_fraction=0.5, seed=args.seed,
                                                                   prior="rank"), pieces=pieces)
    for split in ("dev", "test"):
        report[split].pop("ids", None)
    res["nbest"] = report
    res["nbest_seconds"] = time.perf_counter() - t0
    return res


def markdown(results: list[dict], infos: dict, skipped: list[str], args, cmd: str, n_utts: int) -> str:
    lines = ["# Scoring quality: BLiMP and LibriSpeech test-clean 5-best", "", f"Command: `{cmd}` "
             f"({time.strftime('%Y-%m-%d %H:%M')})", ""]
    if args.limit:
        lines += [f"**Partial run**: first {args.limit} pairs of each BLiMP set and the first {args.limit} n-best "
                  "lists only.", ""]
    if args.mlm_limit:
        lines += [f"**MLM PLL rows are partial**: first {args.mlm_limit} pairs of each BLiMP set and the first "
                  f"{args.mlm_limit} n-best lists (MLM PLL runs one pass per token: the whole sets take hours on "
                  "this CPU).", ""]
    lines += ["## Runs", "", "| run | objective | size | steps | tokens seen | training time | precision |",
              "|---|---|---|---|---|---|---|"]
    for path, info in infos.items():
        size = f"{info.get('preset') or '?'} (hidden {info.get('hidden_size')}, {info.get('num_hidden_layers')} layers)" \
            if info.get("hidden_size") else "model directory"
        tokens = f"{info['tokens']:,}" if info.get("tokens") else "?"
        minutes = f"{info['elapsed_s'] / 60:.1f} min" if info.get("elapsed_s") else "?"
        lines.append(f"| {path} | {info.get('objective', '?')} | {size} | {info.get('step', '?')} | {tokens} | "
                     f"{minutes} | {info.get('precision', '?')} |")
    for s in skipped:
        lines.append(f"| {s} | {'not found: skipped' if '(' not in s else 'failed'} | | | | | |")
    if not results:
        return "\n".join(lines + ["", "No run could be evaluated.", ""])
    sets = list(results[0]["blimp"]["sets"])
    lines += ["", "## BLiMP accuracy (%)", "", "A pair is right when the good sentence scores strictly higher.", "",
              "| set | " + " | ".join(f"{Path(r['run']).name} {r['method']}" for r in results) + " |",
              "|---|" + "---|" * len(results)]
    for s in sets:
        lines.append(f"| {s} | " + " | ".join(f"{r['blimp']['sets'][s]['accuracy']:.1f}" for r in results) + " |")
    lines.append("| **overall** | " + " | ".join(f"**{r['blimp']['overall']['accuracy']:.1f}**" for r in results)
                 + " |")
    lines.append("| pairs | " + " | ".join(str(r["blimp"]["overall"]["pairs"]) for r in results) + " |")
    first = max(results, key=lambda r: r["nbest"]["num_utterances"])["nbest"]
    lines += ["", "## LibriSpeech test-clean, Whisper 5-best: WER (%)", "",
              f"{first['num_utterances']} utterances: first hypothesis {first['all']['first']:.2f}%, oracle "
              f"{first['all']['oracle']:.2f}%. Weights tuned on a seeded half (seed {args.seed}) by grid search over "
              "total = -beta*rank + lm*LM + length*words; WER on the other half (test). Rows scored on fewer "
              "utterances (see the utterances column) split those into their own halves. \"test no LM\" is the "
              "rank prior with a word and a piece bonus tuned on dev (the length every LM score carries): the part "
              "of a gain that needs no LM. The LM is kept only when its dev gain over that is significant (paired "
              "bootstrap), else \"test reranked\" is \"test no LM\" (or the first hypothesis, when the bonuses' own "
              "dev gain is not significant either).", "",
              "| run | method | params | utterances (dev/test) | test first | test oracle | test LM only "
              "| test no LM | **test reranked** | dev reranked | weights (lm, length/word) | grid edge |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        n = r["nbest"]
        w = n["weights"]
        edge = "; ".join(n["grid"]["on_edge"]) or "-"
        lines.append(f"| {Path(r['run']).name} | {r['method']} | {r['params'] / 1e6:.1f}M | "
                     f"{n['dev']['num_utterances']}/{n['test']['num_utterances']} | {n['test']['first']:.2f} | "
                     f"{n['test']['oracle']:.2f} | {n['test']['lm_only']:.2f} | {n['test']['no_lm']:.2f} | "
                     f"**{n['test']['reranked']:.2f}** | "
                     f"{n['dev']['reranked']:.2f} | {w['lm']:g}, {w['length']:g} | {edge} |")
    lines += ["", "Time per method (scoring BLiMP / n-best, this machine): " + "; ".join(
        f"{Path(r['run']).name} {r['method']} {r['blimp_seconds']:.0f} s / {r['nbest_seconds']:.0f} s" for r in results),
        ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="+", default=DEFAULT_RUNS, help="run (or model) directories")
    ap.add_argument("--blimp", default=str(SHARED / "blimp"))
    ap.add_argument("--nbest", default=str(SHARED / "nbest/librispeech_test_clean.whisper5best.json"))
    ap.add_argument("--limit", type=int, help="first N pairs per BLiMP set and first N n-best lists (quick look)")
    ap.add_argument("--mlm-limit", type=int, help="the same limit for MLM PLL methods only (they are n times slower)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the dev/test halves")
    ap.add_argument("--word-l2r", action="store_true", help="also score with mlm-pll-word-l2r")
    ap.add_argument("--small-generators", action="store_true",
                    help="also run MLM PLL on the (1/4-size) generator of ELECTRA runs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-batch-tokens", type=int, default=8192)
    ap.add_argument("--out", default=str(REPO / "research/first_tiny_runs/results/scoring_quality.md"))
    ap.add_argument("--json", help="also write all figures as JSON here")
    ap.add_argument("--progress", action="store_true", help="progress bars on stderr")
    args = ap.parse_args(argv)

    import torch
    from transformers.utils import logging as hf_logging

    from electric.evaluation.blimp import read_blimp
    from electric.evaluation.nbest import read_nbest

    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    blimp_sets = read_blimp(args.blimp, args.limit)
    lists, _ = read_nbest(args.nbest)
    if args.limit:
        lists = lists[: args.limit]
    results, infos, skipped = [], {}, []
    for r in args.runs:
        path = Path(r)
        if not path.is_dir():
            print(f"{r}: not found, skipped", file=sys.stderr)
            skipped.append(r)
            continue
        infos[r] = run_info(path)
        methods = methods_for(path, args.word_l2r, args.small_generators)
        if not methods:
            print(f"{r}: no discriminator or masked LM inside, skipped", file=sys.stderr)
        for method, model_dir in methods:
            t0 = time.perf_counter()
            try:
                if method.startswith("mlm") and args.mlm_limit:
                    sub_sets = {k: v[: args.mlm_limit] for k, v in blimp_sets.items()}
                    res = evaluate(path, method, model_dir, args, sub_sets, lists[: args.mlm_limit])
                else:
                    res = evaluate(path, method, model_dir, args, blimp_sets, lists)
            except (OSError, ValueError) as e:  # e.g. the run was overwritten while we read it
                print(f"{r} {method}: failed: {e}", file=sys.stderr)
                skipped.append(f"{r} ({method}: failed: {e})")
                continue
            results.append(res)
            n = res["nbest"]
            print(f"{r} {method}: BLiMP {res['blimp']['overall']['accuracy']:.1f}%, test WER first "
                  f"{n['test']['first']:.2f}% -> no LM {n['test']['no_lm']:.2f}% -> reranked {n['test']['reranked']:.2f}% "
                  f"(oracle {n['test']['oracle']:.2f}%)"
                  f" [{time.perf_counter() - t0:.0f} s]", flush=True)
            write_outputs(results, infos, skipped, args, argv, len(lists))  # keep what is done so far
    write_outputs(results, infos, skipped, args, argv, len(lists))
    print(f"-> {args.out}")
    return 0 if results else 1


def write_outputs(results, infos, skipped, args, argv, n_utts) -> None:
    cmd = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__, REPO), *(argv or sys.argv[1:])])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(markdown(results, infos, skipped, args, cmd, n_utts), encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": infos, "skipped": skipped, "results": results}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
