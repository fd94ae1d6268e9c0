"""Speed of one-pass Electric scoring vs classic MLM PLL at equal model size (not a test: prints figures).

    python benchmarks/bench_scoring.py                      # tiny and small, 2 threads
    python benchmarks/bench_scoring.py --sizes small --min-seconds 5

Both scorers are random-weight ELECTRA networks of the same size (an `ElectraForPreTraining`
discriminator for Electric, an `ElectraForMaskedLM` for MLM PLL), saved and loaded through the library's
own paths (`electric.inference.scoring.Scorer` on `TorchBackend`, `electric.inference.scoring.MaskedLMScorer`), with the same
batching (`--batch-size` rows, `--max-batch-tokens`). The sentences are real enwiki sentences of exactly
24 tokens, [CLS] and [SEP] included (22 scored tokens, so MLM PLL runs 22 masked copies per sentence).
The two methods alternate round by round in one process, so both see the same machine noise. Writes
benchmarks/results/scoring_speed.md with the command that produced it.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
from _bench_models import SIZES  # noqa: E402  - the presets' discriminator shapes

from electric.shared_data import shared_data_dir  # noqa: E402

SHARED = shared_data_dir()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")



def sentences_of_length(tokenizer, n: int, length: int, corpus: Path) -> list[str]:
    """`n` distinct enwiki sentences that tokenise to exactly `length` tokens ([CLS]/[SEP] included)."""
    out, seen = [], set()
    for f in sorted(corpus.glob("wiki_*")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.startswith("<") or len(line) < 40:
                continue
            for s in re.split(r"(?<=[.!?])\s+", line):
                if s in seen:
                    continue
                if len(tokenizer(s)["input_ids"]) == length:
                    out.append(s)
                    seen.add(s)
                    if len(out) == n:
                        return out
    raise SystemExit(f"found only {len(out)} sentences of {length} tokens in {corpus}")


def get_tokenizer(path: str | None, workdir: Path):
    from electric.tokenization import load_tokenizer

    if path:
        return load_tokenizer(path), path
    default = REPO / "runs" / "tok"
    if default.is_dir():
        return load_tokenizer(default), str(default.relative_to(REPO))
    import training.tokenizer

    out = workdir / "tok"
    if training.tokenizer.main(["--data", str(SHARED / "corpus/enwiki/wiki_00"), "--vocab-size", "16000", "--out", str(out)]):
        raise SystemExit("training the tokenizer failed")
    return load_tokenizer(out), "16,000 pieces trained on enwiki wiki_00"


def build_models(size: str, tokenizer, workdir: Path) -> tuple[Path, Path, int]:
    import torch
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    cfg = ElectraConfig(vocab_size=len(tokenizer), max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id,
                        **SIZES[size])
    torch.manual_seed(0)
    disc, mlm = ElectraForPreTraining(cfg), ElectraForMaskedLM(cfg)
    d, m = workdir / f"{size}-disc", workdir / f"{size}-mlm"
    for model, path in ((disc, d), (mlm, m)):
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    n_params = sum(p.numel() for p in disc.electra.parameters())
    return d, m, n_params


def timed(fn, texts: list[str], min_seconds: float) -> float:
    """Sentences per second of fn(texts), repeated until at least min_seconds have passed."""
    n, t0 = 0, time.perf_counter()
    while True:
        fn(texts)
        n += len(texts)
        el = time.perf_counter() - t0
        if el >= min_seconds:
            return n / el


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokenizer", help="tokenizer directory (default runs/tok, else train one on wiki_00)")
    ap.add_argument("--num-sentences", type=int, default=64)
    ap.add_argument("--length", type=int, default=24, help="tokens per sentence, [CLS]/[SEP] included")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-batch-tokens", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per method (median reported)")
    ap.add_argument("--min-seconds", type=float, default=3.0, help="least time per measurement")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/scoring_speed.md"))
    args = ap.parse_args(argv)

    import torch
    from transformers.utils import logging as hf_logging

    from electric.inference.backend import TorchBackend
    from electric.inference.scoring import MaskedLMScorer, Scorer

    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    rows = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tok, tok_desc = get_tokenizer(args.tokenizer, work)
        texts = sentences_of_length(tok, args.num_sentences, args.length, SHARED / "corpus/enwiki")
        print(f"{len(texts)} sentences of {args.length} tokens; vocabulary {len(tok)}; {args.threads} threads")
        for size in args.sizes:
            d, m, n_params = build_models(size, tok, work)
            opts = dict(max_batch_tokens=args.max_batch_tokens, batch_size=args.batch_size)
            electric = Scorer(TorchBackend(d, device="cpu"), **opts)
            mlm = MaskedLMScorer(m, device="cpu", **opts)
            # warm-up
            electric.score(texts[:4])
            mlm.score(texts[:1])
            e_rates, m_rates = [], []
            for r in range(args.rounds):
                e_rates.append(timed(electric.score, texts, args.min_seconds))  # method="electric"
                m_rates.append(timed(mlm.score, texts, args.min_seconds))  # method="mlm-pll"
                print(f"  {size} round {r + 1}: electric {e_rates[-1]:8.1f} sent/s   mlm-pll {m_rates[-1]:7.2f} sent/s",
                      flush=True)
            e, mm = statistics.median(e_rates), statistics.median(m_rates)
            rows.append((size, n_params, e, min(e_rates), max(e_rates), mm, min(m_rates), max(m_rates), e / mm))
            print(f"{size}: electric {e:.1f} sent/s, mlm-pll {mm:.2f} sent/s -> {e / mm:.1f}x")

    cmd = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__, REPO), *(argv or sys.argv[1:])])
    lines = [
        "# Scoring speed: Electric one pass vs MLM PLL",
        "",
        f"Command: `{cmd}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs visible, torch {torch.__version__} "
        f"({args.threads} threads), Python {platform.python_version()}. Random-weight models, fp32, CPU. "
        f"Load average (1 min) {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end: other "
        "processes on the machine slow both methods alike; compare the speed-up, not the absolute rates.",
        f"Input: {len(texts)} enwiki sentences of exactly {args.length} tokens ([CLS]/[SEP] included; "
        f"{args.length - 2} scored tokens each); tokenizer: {tok_desc} ({len(tok)} pieces). Batching for both: "
        f"{args.batch_size} rows, {args.max_batch_tokens} tokens. Median of {args.rounds} alternating rounds of "
        f">= {args.min_seconds:g} s each (min-max in brackets).",
        "",
        "| size | encoder params | Electric one pass (sent/s) | MLM PLL (sent/s) | speed-up |",
        "|---|---|---|---|---|",
    ]
    for size, n_params, e, e_lo, e_hi, mm, m_lo, m_hi, ratio in rows:
        lines.append(f"| {size} | {n_params / 1e6:.1f}M | {e:.1f} ({e_lo:.1f}-{e_hi:.1f}) | {mm:.2f} ({m_lo:.2f}-{m_hi:.2f}) "
                     f"| **{ratio:.1f}x** |")
    lines += [
        "",
        "Sizes: tiny = 4 layers, hidden 128, 2 heads, FFN 512, embedding 128; small = 12 layers, hidden 256, "
        "4 heads, FFN 1024, embedding 128 (ELECTRA-Small). MLM PLL runs one masked copy per scored token, copies "
        "of many sentences batched together, and the vocabulary head only at the masked position.",
        "",
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines), encoding="utf-8")
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
