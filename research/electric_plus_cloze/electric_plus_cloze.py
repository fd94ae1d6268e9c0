"""Electric's energy plus its cloze model's log q: does one pass of each, summed, measure better than either?

    python research/electric_plus_cloze/electric_plus_cloze.py --adapted runs/ec4/atis-models/electric-joint \\
        --dev runs/ec4/atis/tune.json --run runs/ec4/electric-joint --mlm-pll-blimp runs/ec4/blimp/mlm.mlm-pll.json

An Electric run holds two one-pass scorers: the energy model (`--method electric`, the discriminator) and the
two-tower cloze model (`--method cloze`, the generator). Their combination score = energy + lambda * cloze (per
sentence, for the sum and for the mean over pieces) is tried over a lambda grid; lambda is chosen on the ATIS dev
lists by the reranked WER of the guarded tuning (`rerank_scored`, the same search as
`electric eval nbest`), with the model adapted to ATIS (`--adapted`). Reported: ATIS dev and test WER for every
lambda (energy alone is lambda 0, the cloze model alone its own row), and BLiMP-12 with the pretrained run
(`--run`) for every lambda, its accuracy at the ATIS-chosen lambda, and a paired bootstrap against MLM PLL's per-pair
results (`--mlm-pll-blimp`, an `electric eval blimp --report` of the v3 study). BLiMP never chooses lambda. Writes
research/electric_plus_cloze/results/electric_plus_cloze.md and .json. A benchmark: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from electric.evaluation.blimp import paired_bootstrap_mean_diff, read_blimp  # noqa: E402
from electric.evaluation.nbest import ScoredLists, read_nbest, rerank_scored, score_nbest  # noqa: E402
from electric.evaluation.nbest.scored import lm_row  # noqa: E402
from electric.hardware import cpu_description  # noqa: E402
from electric.inference.scoring import load_scorer  # noqa: E402
from electric.shared_data import shared_data_dir  # noqa: E402

LAMBDAS = (0.0, 0.1, 0.3, 1.0, 3.0, 10.0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapted", required=True, help="the Electric run adapted to ATIS (chooses lambda, ATIS WER)")
    ap.add_argument("--dev", required=True, help="ATIS dev n-best lists (the adaptation recipe's tune.json)")
    ap.add_argument("--test", default=str(shared_data_dir() / "nbest" / "atis_test.whisper5best.json"))
    ap.add_argument("--run", required=True, help="the pretrained Electric run scored on BLiMP-12")
    ap.add_argument("--blimp", default=str(shared_data_dir() / "blimp"))
    ap.add_argument("--limit", type=int, default=200, help="BLiMP pairs a set (default 200, as in the v3 study)")
    ap.add_argument("--mlm-pll-blimp", help="MLM PLL's `electric eval blimp --report` with per-pair results")
    ap.add_argument("--out", default=str(REPO / "research" / "electric_plus_cloze" / "results" / "electric_plus_cloze.md"))
    return ap.parse_args(argv)


def one_pass_rows(model: str, lists) -> dict[str, list[np.ndarray]]:
    """{method: (sum, mean, pieces) rows per list} for the energy and the cloze model."""
    out = {}
    for method in ("electric", "cloze"):
        scorer = load_scorer(model, method)
        out[method] = score_nbest(lists, lambda texts, s=scorer, m=method: [lm_row(r) for r in s.score(texts, method=m)])
    return out


def mix(rows: dict[str, list[np.ndarray]], lam: float | None) -> list[np.ndarray]:
    """energy + lam * cloze in the sum and mean columns, the pieces kept; lam None is the cloze model alone."""
    if lam is None:
        return rows["cloze"]
    return [np.column_stack([e[:, :2] + lam * c[:, :2], e[:, 2]]) for e, c in zip(rows["electric"], rows["cloze"],
                                                                                     strict=True)]


def atis(args) -> dict:
    test, _ = read_nbest(args.test)
    dev, _ = read_nbest(args.dev)
    rows = one_pass_rows(args.adapted, test + dev)
    out = {}
    for lam in (*LAMBDAS, None):
        test_scores, dev_scores = ScoredLists.from_rows(test + dev, mix(rows, lam)).split(len(test))
        rep = rerank_scored(test_scores, dev=dev_scores).report.to_dict()
        out["cloze" if lam is None else f"{lam:g}"] = {
            "dev_wer": rep["dev"]["with_lm"], "test_wer": rep["test"]["with_lm"], "applied": rep["applied"],
            "lm_score": rep["lm_score"], "first_test": rep["test"]["first"]}
    return out


def blimp(args, chosen: str, reference: dict | None) -> dict:
    sets = read_blimp(args.blimp, args.limit)
    order = list(sets)
    pairs = [(g, b) for k in order for g, b in sets[k]]
    scores = {}
    for method in ("electric", "cloze"):
        scorer = load_scorer(args.run, method)
        texts = sorted({t for p in pairs for t in p})
        t0 = time.perf_counter()
        got = dict(zip(texts, (r.score for r in scorer.score(texts, method=method)), strict=True))
        scores[method] = (np.array([[got[g], got[b]] for g, b in pairs]), time.perf_counter() - t0)
    out = {}
    base = None if reference is None else [c for k in order for c in reference["correct"][k]]
    for lam in (*LAMBDAS, None):
        e, c = scores["electric"][0], scores["cloze"][0]
        s = c if lam is None else e + lam * c
        correct = (s[:, 0] > s[:, 1]).tolist()
        row = {"accuracy": 100.0 * float(np.mean(correct))}
        if base is not None:
            r = paired_bootstrap_mean_diff(correct, base, resamples=2000, seed=0)
            row["vs_mlm_pll_points"] = {"diff": 100 * r["diff"], "ci": [100 * x for x in r["ci"]]}
        out["cloze" if lam is None else f"{lam:g}"] = row
    return {"lambdas": out, "chosen": chosen, "pairs": len(pairs),
            "seconds": {m: round(v[1], 1) for m, v in scores.items()}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reference = json.loads(Path(args.mlm_pll_blimp).read_text()) if args.mlm_pll_blimp else None
    at = atis(args)
    lam_rows = {k: v for k, v in at.items() if k != "cloze"}
    chosen = min(lam_rows, key=lambda k: (lam_rows[k]["dev_wer"], float(k)))
    bl = blimp(args, chosen, reference)
    cmd = "python research/electric_plus_cloze/electric_plus_cloze.py " + " ".join(sys.argv[1:] if argv is None else argv)
    summary = {"machine": cpu_description(), "command": cmd, "atis": at, "atis_chosen_lambda": chosen, "blimp12": bl}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = ["# Electric energy + lambda x cloze log q (one pass each)", "", f"Machine: {cpu_description()}. "
             f"Command: `{cmd}`.", "", f"Lambda chosen on ATIS dev: **{chosen}** (lowest dev WER of the tuned "
             "combination with the LM; ties to the smaller lambda). BLiMP-12 never chooses.", "",
             "| lambda | ATIS dev WER | ATIS test WER | guard applied | BLiMP-12 | vs MLM PLL (points, 95% CI) |",
             "|---|---:|---:|---|---:|---|"]
    for k in at:
        b = bl["lambdas"][k]
        vs = b.get("vs_mlm_pll_points")
        vs_text = "–" if vs is None else f"{vs['diff']:+.2f} [{vs['ci'][0]:+.2f}, {vs['ci'][1]:+.2f}]"
        name = "cloze alone" if k == "cloze" else ("energy alone" if k == "0" else k)
        lines.append(f"| {name}{' (chosen)' if k == chosen else ''} | {at[k]['dev_wer']:.2f}% | "
                     f"{at[k]['test_wer']:.2f}% | {at[k]['applied']} | {b['accuracy']:.2f}% | {vs_text} |")
    lines += ["", f"First hypothesis on ATIS test: {at['0']['first_test']:.2f}%. BLiMP-12: {bl['pairs']} pairs; "
              f"scoring seconds: energy {bl['seconds']['electric']}, cloze {bl['seconds']['cloze']} (busy machine)."]
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
