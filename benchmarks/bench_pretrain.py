"""Pretraining throughput: our training step beside a reference step measured in the same run.

    python benchmarks/bench_pretrain.py                       # tiny and small, fp32 (and bf16 for tiny)
    python benchmarks/bench_pretrain.py --sizes small --precisions fp32 bf16 --steps 5

Reference step (what a user of plain transformers would write): `ElectraForMaskedLM` (generator,
1/4 width) with `labels=` and `ElectraForPreTraining` with `labels=`, i.e. the vocabulary head at every
position, the same sizes, batch and masking. Ours: `PretrainingModel` (vocabulary head only at masked
positions). Steps alternate between the two so machine noise hits both alike; the median step time
is reported. Prints a table and writes benchmarks/results/pretrain_speed.md. Never asserted in tests.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from electric.modeling import corruption as obj  # noqa: E402
from electric.pretraining.config import resolve_config  # noqa: E402
from electric.pretraining.modeling import PretrainingModel, SpecialIds, _electra_config  # noqa: E402


class ReferenceElectra(torch.nn.Module):
    """ELECTRA as plain transformers calls: heads at every position, losses from `labels=`."""

    def __init__(self, cfg, special: SpecialIds):
        super().__init__()
        self.cfg, self.special = cfg, special
        V, pad = special.vocab_size, special.pad
        self.generator = ElectraForMaskedLM(ElectraConfig(**_electra_config(cfg, V, pad, generator=True)))
        self.discriminator = ElectraForPreTraining(ElectraConfig(**_electra_config(cfg, V, pad, generator=False)))
        self.generator.electra.embeddings = self.discriminator.electra.embeddings
        self.generator.generator_lm_head.weight = self.discriminator.electra.embeddings.word_embeddings.weight
        self.register_buffer("special_ids", torch.tensor(special.all_special), persistent=False)

    def forward(self, ids, am, rng):
        u = torch.rand(ids.shape, generator=rng)  # (B, T)
        cand = obj.candidate_mask(ids, am, self.special_ids)
        chosen = obj.mask_tokens(cand, self.cfg.mask_prob, self.cfg.max_predictions, u)
        gen_in = obj.electra_mask_inputs(ids, chosen, self.special.mask, torch.rand(ids.shape, generator=rng))
        labels = ids.masked_fill(~chosen, -100)
        g = self.generator(gen_in, attention_mask=am, labels=labels)  # (B, T, V) logits everywhere
        logits = g.logits[chosen]  # (N, V)
        sampled = obj.sample_replacements(logits, 1.0, torch.rand(logits.shape, generator=rng))
        fake = ids.clone()
        fake[chosen] = sampled
        d = self.discriminator(fake, attention_mask=am, labels=(fake != ids).long())
        return {"loss": g.loss + 50.0 * d.loss}


def make_batch(B, T, V, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    return ids, torch.ones_like(ids)


def time_steps(models: dict, batch, steps: int, precision: str) -> dict[str, float]:
    """Alternate one optimizer step of each model; return the median seconds per step."""
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-4) for k, m in models.items()}
    times: dict[str, list[float]] = {k: [] for k in models}
    ids, am = batch
    for i in range(steps + 1):  # the first step warms up allocators and is not counted
        for name, m in models.items():
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                rng = torch.Generator().manual_seed(i)  # the draws are timed with the step, as the loop makes them
                out = m(ids, am, m.draw_noise(ids, rng) if isinstance(m, PretrainingModel) else rng)
            out["loss"].backward()
            opts[name].step()
            opts[name].zero_grad(set_to_none=True)
            if i:
                times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    ap.add_argument("--precisions", nargs="+", default=["fp32"])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab-size", type=int, default=30522, help="ELECTRA's WordPiece vocabulary (30522)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per model (median reported)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/pretrain_speed.md")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    special = SpecialIds(0, 4, 2, 3, args.vocab_size, (0, 1, 2, 3, 4))
    B, T = args.batch_size, args.seq_len
    rows = []
    for size in args.sizes:
        for precision in args.precisions:
            torch.manual_seed(0)
            models = {"reference electra": ReferenceElectra(resolve_config(size, "electra",
                                                                            {"max_seq_length": T}), special)}
            for objective in ("electra", "electric", "mlm"):
                models[objective] = PretrainingModel(resolve_config(size, objective, {"max_seq_length": T}), special)
            for m in models.values():
                m.train()
            secs = time_steps(models, make_batch(B, T, args.vocab_size), args.steps, precision)
            ref = B * T / secs["reference electra"]
            for name, s in secs.items():
                tok_s = B * T / s
                rows.append((size, precision, name, s, tok_s, tok_s / ref))
                print(f"{size:6s} {precision:5s} {name:18s} {s:7.2f} s/step {tok_s:9.0f} tokens/s  {tok_s / ref:5.2f}x ref",
                      flush=True)
    load = os.getloadavg()
    lines = [
        "# Pretraining throughput (CPU)",
        "",
        f"Command: `python benchmarks/bench_pretrain.py {' '.join(sys.argv[1:])}`".rstrip(),
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__} ({args.threads} threads); load average at the end {load[0]:.1f} / {load[1]:.1f} "
        f"(1/5 min). Batch {B} x {T} tokens, vocabulary {args.vocab_size}, random weights, median of "
        f"{args.steps} steps; models alternate step by step so noise hits them alike.",
        "",
        "| size | precision | step | s/step | tokens/s | vs reference |",
        "|---|---|---|---:|---:|---:|",
        *[f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.2f} | {r[4]:,.0f} | {r[5]:.2f}x |" for r in rows],
        "",
        "Reference = transformers `ElectraForMaskedLM(labels=)` + `ElectraForPreTraining(labels=)`: vocabulary "
        "head at every position. Ours (electra) computes it only at the masked positions; electric trains its "
        "cloze model on every candidate position (its vocabulary head runs at every token, as the method asks); "
        "mlm is the full-size masked LM.",
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
