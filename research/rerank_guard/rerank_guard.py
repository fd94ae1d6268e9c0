"""Does the rerank guard keep the first pass when the LM is pure noise? The shared n-best sets with random LM scores.

    python research/rerank_guard/rerank_guard.py --seeds 20

For each set and seed: LM scores drawn from N(0, 1) per hypothesis (no signal at all), the utterances split
in halves (seeded), weights tuned on the dev half with `electric.evaluation.nbest.rerank_report` (which applies the
paired-bootstrap guard), and on the test half the WER of the LM weights tuned on dev (`with_lm`, what tuning
without the guard would apply) and of what the guard applied (`reranked`), each minus the dev-tuned result
without the LM (`no_lm`). Positive = worse than not using the LM. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from electric.evaluation.nbest import RerankOptions, read_nbest, rerank_report  # noqa: E402
from electric.shared_data import shared_data_dir  # noqa: E402

# (file, prior): LibriSpeech lists are in Whisper's beam order, the others carry first-pass scores
SETS = (("atis_test", "none"), ("wsj_eval", "none"), ("librispeech_test_clean", "rank"))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20, help="noise draws and dev/test splits per set (default 20)")
    ap.add_argument("--shared", default=str(shared_data_dir()), help="the project's data folder")
    args = ap.parse_args(argv)
    print("| set | LM kept by the guard | test WER change without the guard: mean / worst | with the guard: "
          "mean / worst |")
    print("|---|---:|---:|---:|")
    for name, prior in SETS:
        lists, _ = read_nbest(Path(args.shared) / "nbest" / f"{name}.whisper5best.json")
        kept, unguarded, guarded = 0, [], []
        for seed in range(args.seeds):
            rng = np.random.default_rng(100 + seed)
            lm = [rng.normal(size=len(nb.hyps)) for nb in lists]
            _, report = rerank_report(lists, lm, RerankOptions(dev_fraction=0.5, seed=seed, prior=prior))
            kept += report["guard"]["significant"]
            test = report["test"]
            unguarded.append(test["with_lm"] - test["no_lm"])
            guarded.append(test["reranked"] - test["no_lm"])
        print(f"| {name} (prior {prior}) | {kept}/{args.seeds} | {np.mean(unguarded):+.3f} / {max(unguarded):+.3f} | "
              f"{np.mean(guarded):+.3f} / {max(guarded):+.3f} |", flush=True)


if __name__ == "__main__":
    main()
