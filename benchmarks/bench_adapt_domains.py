"""`electric adapt` on three domains, each beside the Kneser-Ney trigram it trains on the same text: what the guard
serves, and how that compares with the trigram on dev and test (paired bootstrap, 95%).

    python benchmarks/bench_adapt_domains.py --domains atis wsj librispeech --work runs/adapt-domains

- atis: the quick start's split (scripts/quickstart.py): two thirds of ATIS train's references as text, their
  n-best lists as --train-lists, the other third's lists as --dev; ATIS test as --test.
- wsj: CoNLL-2000's newswire sentences as text (research/adaptation/adapt_recipe.py conll), wsj_eval in seeded halves
  as --dev and --test; no train lists (836 lists in all).
- librispeech: test-clean in seeded thirds: the first third's references as text and its lists as --train-lists,
  the second as --dev, the third as --test (its lists have no first-pass scores: the list's order is the prior).

Each domain's model lands in WORK/DOMAIN/model (its card and adapt.json); the table goes to stdout and to
benchmarks/results/adapt_domains.md with the machine, the versions and the command. Needs ../shared/data and
all-MiniLM-L6-v2 (scripts/fetch_checkpoint.sh). On 2 CPU cores: about 10-20 minutes a domain.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from electric.shared_data import shared_data_dir  # noqa: E402

CHECKPOINT = REPO / "runs" / "checkpoints" / "all-MiniLM-L6-v2"


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def cpu_flags() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            return " ".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16") if f in have)
    return ""


def prepare(domain: str, shared: Path, d: Path) -> list[str]:
    """The domain's files in `d`; the `electric adapt` arguments that use them."""
    from quickstart import read_lists, split_atis

    from electric.evaluation.nbest import dev_test_split

    d.mkdir(parents=True, exist_ok=True)
    nbest = shared / "nbest"
    if domain == "atis":
        test = read_lists(nbest / "atis_test.whisper5best.json")
        refs, tune, train = split_atis(read_lists(nbest / "atis_train.whisper5best.json"), test)
        (d / "text.txt").write_text("".join(f"{r}\n" for r in refs))
        for name, lists in (("dev", tune), ("test", test), ("train", train)):
            (d / f"{name}.json").write_text(json.dumps(lists))
        return ["--text", str(d / "text.txt"), "--dev", str(d / "dev.json"), "--test", str(d / "test.json"),
                "--train-lists", str(d / "train.json")]
    if domain == "wsj":
        recipe = REPO / "research" / "adaptation" / "adapt_recipe.py"
        subprocess.run([sys.executable, str(recipe), "conll", "--conll", str(shared / "tagging" / "conll2000" /
                                                                              "train.txt"), "--out", str(d / "text.txt")],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, str(recipe), "split-lists", "--nbest", str(nbest / "wsj_eval.whisper5best.json"),
                        "--dev-fraction", "0.5", "--seed", "0", "--out", str(d)], check=True, stdout=subprocess.DEVNULL)
        return ["--text", str(d / "text.txt"), "--dev", str(d / "dev.json"), "--test", str(d / "test.json")]
    if domain == "librispeech":
        lists = read_lists(nbest / "librispeech_test_clean.whisper5best.json")
        for k, u in enumerate(lists):
            u.setdefault("id", f"ls{k}")  # the file has none: named by position, apart in every third
        first, rest = dev_test_split(lists, 1 / 3, 0)
        dev_idx, test_idx = dev_test_split([lists[i] for i in rest], 0.5, 0)
        train = [lists[i] for i in first]
        dev, test = [lists[rest[i]] for i in dev_idx], [lists[rest[i]] for i in test_idx]
        held = {u["output"] for u in dev + test}
        train = [u for u in train if u["output"] not in held]
        (d / "text.txt").write_text("".join(f"{u['output']}\n" for u in train))
        for name, part in (("dev", dev), ("test", test), ("train", train)):
            (d / f"{name}.json").write_text(json.dumps(part))
        return ["--text", str(d / "text.txt"), "--dev", str(d / "dev.json"), "--test", str(d / "test.json"),
                "--train-lists", str(d / "train.json")]
    raise ValueError(f"unknown domain {domain!r}")


def row(domain: str, report: dict) -> str:
    c = report["results"]["choice"]
    t = c.get("test", {})
    cand = c["candidates"]

    def interval(g: dict) -> str:
        return f"{g['gain']:+.2f} [{g['ci'][0]:+.2f}, {g['ci'][1]:+.2f}]"

    served = cand[c["served"]]
    steps = "; ".join(f"{s['candidate']} over {s['over']} {interval(s)}{' ✓' if s['significant'] else ''}"
                      for s in c["steps"])
    disc = report.get("discriminative")
    trained = (f"{disc['train_lists']:,} lists, {disc['seconds'] / 60:.1f} min, {disc['tokens_per_s']:,} tok/s"
               if disc else "none")
    return (f"| {domain} | {t.get('first', float('nan')):.2f} | {cand['no_lm']['test']:.2f} | {cand['ngram']['test']:.2f} "
            f"| {cand['model']['test']:.2f} | {cand['model_and_ngram']['test']:.2f} | **{t.get('after', float('nan')):.2f}** "
            f"({c['served']}) | {t.get('oracle', float('nan')):.2f} | {interval(served['dev_vs_ngram'])} | "
            f"{interval(served['test_vs_ngram'])} | {steps} | {trained} |")


HEADER = ("| domain | first | no LM | 3-gram | model | model + 3-gram | served | oracle | served vs 3-gram, dev | "
          "served vs 3-gram, test | the guard's walk on dev | discriminative training |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--domains", nargs="+", default=["atis", "wsj", "librispeech"],
                    choices=["atis", "wsj", "librispeech"])
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "adapt-domains")
    ap.add_argument("--checkpoint", type=Path, default=CHECKPOINT)
    ap.add_argument("--minutes", type=float, default=4.0)
    ap.add_argument("--train-minutes", type=float, default=10.0)
    ap.add_argument("--shared", type=Path, default=shared_data_dir())
    ap.add_argument("--report", type=Path, default=REPO / "benchmarks" / "results" / "adapt_domains.md")
    args = ap.parse_args(argv)
    from training.adapt import main as electric_adapt

    rows, took = [], {}
    for domain in args.domains:
        d = args.work / domain
        adapt_args = ["--checkpoint", str(args.checkpoint), *prepare(domain, args.shared, d), "--out", str(d / "model"),
                      "--minutes", str(args.minutes), "--train-minutes", str(args.train_minutes), "--overwrite"]
        t0 = time.monotonic()
        print(f"== {domain}: electric adapt {shlex.join(adapt_args)}", flush=True)
        if electric_adapt(adapt_args) != 0:
            print(f"== {domain}: electric adapt failed", flush=True)
            continue
        took[domain] = (time.monotonic() - t0) / 60
        rows.append(row(domain, json.loads((d / "model" / "adapt.json").read_text())))
    import onnxruntime
    import torch

    text = "\n".join([
        "# electric adapt on three domains, beside the trigram", "",
        f"`python benchmarks/bench_adapt_domains.py {shlex.join(argv if argv is not None else sys.argv[1:])}` on "
        f"{cpu_name()} ({cpu_flags()}), {time.strftime('%Y-%m-%d')}; torch {torch.__version__}, onnxruntime "
        f"{onnxruntime.__version__}; minutes per domain: "
        + ", ".join(f"{k} {v:.1f}" for k, v in took.items()) + ".", "",
        "Test WER (%); the served combination is the guard's choice on dev; gains are WER points over the 3-gram's "
        "choice with their paired-bootstrap 95% interval (positive: fewer errors).", "", HEADER, *rows, ""])
    print(text)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
