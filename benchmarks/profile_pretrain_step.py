"""Where one pretraining step's CPU time goes: torch.profiler over a few optimizer steps of one objective.

    python benchmarks/profile_pretrain_step.py --objective electric            # tiny, bf16 autocast, 8k vocab
    python benchmarks/profile_pretrain_step.py --objective mlm --precision fp32 --threads 1
    python benchmarks/profile_pretrain_step.py --losses 12 --precision fp32 --temperature 2 [--repo OTHER_CHECKOUT]

Builds `PretrainingModel` as `training.pretrain` does (the preset's values for the objective), feeds it a
fixed random batch (B x T ids from the vocabulary, [CLS] ... [SEP]), and prints the median milliseconds per step
and the operators by self CPU time (forward and backward together). A profile, not a test; compare objectives
in one run and on a quiet machine. `--losses N` prints instead the losses of N seeded optimizer steps (lr 1e-3, one
padded row), with `--repo` another checkout's `electric` package: a change to the step that must not change the
objective gives the same losses in fp32.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

_repo = sys.argv[sys.argv.index("--repo") + 1] if "--repo" in sys.argv[:-1] else str(Path(__file__).resolve().parents[1])
sys.path.insert(0, _repo)

from electric.pretraining.config import resolve_config  # noqa: E402
from electric.pretraining.modeling import PretrainingModel, SpecialIds  # noqa: E402


def build(objective: str, preset: str, vocab_size: int, seq_len: int, temperature: float | None = None
          ) -> PretrainingModel:
    torch.manual_seed(0)
    cfg = resolve_config(preset, objective, {"max_seq_length": seq_len, "warm_start": 0.0,
                                             "temperature": temperature})
    model = PretrainingModel(cfg, SpecialIds(0, 4, 2, 3, vocab_size, (0, 1, 2, 3, 4)))
    return model.train()


def batch(B: int, T: int, V: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, V, (B, T), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    return ids, torch.ones_like(ids)


def step(model, opt, ids, am, seed: int, bf16: bool) -> float:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model(ids, am, model.draw_noise(ids, torch.Generator().manual_seed(seed)))
    out["loss"].backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(out["loss"].detach())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objective", choices=("mlm", "electra", "electric"), default="electric")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    ap.add_argument("--vocab-size", type=int, default=8000, help="the bundled tokenizer's size (8000)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10, help="timed steps (median reported), then 3 profiled")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=25, help="operators to print")
    ap.add_argument("--temperature", type=float, help="sampling temperature (default: the preset's)")
    ap.add_argument("--losses", type=int, metavar="N", help="print the losses of N seeded steps instead")
    ap.add_argument("--repo", default=_repo, help="the checkout whose `electric` package runs (default: this one)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = build(args.objective, args.preset, args.vocab_size, args.seq_len, args.temperature)
    ids, am = batch(args.batch_size, args.seq_len, args.vocab_size)
    bf16 = args.precision == "bf16"
    if args.losses:
        am[3, args.seq_len * 3 // 4:] = 0  # one row with padding
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for i in range(args.losses):
            print(i, f"{step(model, opt, ids, am, i, bf16):.6f}")
        return
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step(model, opt, ids, am, 0, bf16)  # warm-up: allocators, first-call dispatch
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        loss = step(model, opt, ids, am, i + 1, bf16)
        times.append(time.perf_counter() - t0)
    ms = 1000 * statistics.median(times)
    print(f"{args.objective} {args.preset} {args.precision} threads={args.threads}: {ms:.1f} ms/step, "
          f"{args.batch_size * args.seq_len / ms * 1000:,.0f} tokens/s (last loss {loss:.4f})")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(3):
            step(model, opt, ids, am, 100 + i, bf16)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
