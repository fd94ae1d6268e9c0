"""Can the `tiny` discriminator learn context at all within a CPU budget? Train it against FIXED unigram noise.

    python research/fixed_noise_probe/fixed_noise_probe.py --lr 1e-4 --minutes 10
    python research/fixed_noise_probe/fixed_noise_probe.py --lr 5e-4 --minutes 10

No generator: at every step the usual 15% of positions are replaced by draws from the corpus unigram
distribution, and the discriminator alone is trained (BCE, bf16 autocast where the CPU has native bf16,
AdamW, 300 warmup steps, batch 32). Replaced tokens then have the same marginal as the originals, so only
context can detect them; the held-out AUC (the same fixed validation slice and seeds at every print) says
how fast the architecture learns that signal when nothing else moves. This separates "the discriminator
cannot learn context this fast" from "the generator took its easy signal away" in ELECTRA runs.
Prints one line per 100 steps: step, tokens, training loss, held-out AUC. A diagnostic, not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from electric.hardware import cpu_description, resolve_precision  # noqa: E402
from electric.pretraining import health  # noqa: E402
from electric.pretraining.batches import collate  # noqa: E402
from electric.pretraining.config import resolve_config  # noqa: E402
from electric.pretraining.data import build_datasets  # noqa: E402
from electric.pretraining.modeling import PretrainingModel, SpecialIds  # noqa: E402
from electric.pretraining.validation import unigram_baseline  # noqa: E402
from electric.shared_data import shared_data_dir  # noqa: E402
from electric.tokenization import load_tokenizer  # noqa: E402

WARMUP = 300


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (default 1e-4, tiny's)")
    ap.add_argument("--minutes", type=float, default=10.0, help="training time (default 10)")
    ap.add_argument("--data", nargs="+", default=[str(shared_data_dir() / "corpus" / "enwiki" /
                                                      f"wiki_0{i}") for i in range(5)])
    ap.add_argument("--tokenizer", default=str(REPO / "runs" / "tok8k"), help="tokenizer directory (runs/tok8k)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--init-from", help="warm start: the discriminator's encoder from this masked LM directory (e.g. a "
                                        "run's warm_start/); its head fresh, bias at the prior")
    ap.add_argument("--freeze-encoder", action="store_true",
                    help="train the head only (with --init-from: does the MLM's encoder already hold the signal?)")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tok = load_tokenizer(args.tokenizer)
    train, val = build_datasets(args.data, tok, 128, 256)
    cfg = resolve_config("tiny", "electra", {"lr": args.lr})
    special = SpecialIds.from_tokenizer(tok)
    if args.init_from:  # any checkpoint --init-from takes: its encoder under a fresh head at the label prior
        from electric.pretraining.init_from import adopt_architecture, pretraining_model, resolve_init

        source = resolve_init(args.init_from)
        model = pretraining_model(adopt_architecture(cfg, source), special, source)
    else:
        model = PretrainingModel(cfg, special)
    disc = model.discriminator
    if args.freeze_encoder:
        disc.electra.requires_grad_(False)
    noise = unigram_baseline(train, special.vocab_size, special.all_special).exp().float()  # (V,)
    noise[list(special.all_special)] = 0.0
    bf16 = resolve_precision("auto", "cpu")[0] == "bf16"
    print(f"machine: {cpu_description()}; lr {args.lr:g}; bf16 {bf16}; init from {args.init_from or 'scratch'}"
          f"{', encoder frozen' if args.freeze_encoder else ''}", flush=True)

    def corrupt(ids, mask, rng):  # (B, T), (B, T): as training health's fixed-noise AUC corrupts
        return model.fixed_noise_inputs(ids, mask, noise, rng)

    @torch.no_grad()
    def held_out_auc() -> float:
        disc.eval()
        rng = torch.Generator().manual_seed(7)
        scores, labels = [], []
        for b in range(8):
            ids, mask = collate(val[b * 32:(b + 1) * 32]["input_ids"], special.pad)
            noisy, lab = corrupt(ids, mask, rng)
            real = mask.bool()
            scores.append(disc(noisy, attention_mask=mask).logits[real])
            labels.append(lab[real])
        disc.train()
        return health.tensor_auc(torch.cat(scores), torch.cat(labels))

    opt = torch.optim.AdamW([p for p in disc.parameters() if p.requires_grad], lr=args.lr, weight_decay=cfg.weight_decay, eps=cfg.adam_eps)
    rng = torch.Generator().manual_seed(0)
    start, step = time.time(), 0
    while time.time() - start < args.minutes * 60:
        rows = torch.randint(len(train), (cfg.batch_size,), generator=rng).tolist()
        ids, mask = collate(train.select(rows)["input_ids"], special.pad)
        noisy, lab = corrupt(ids, mask, rng)
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / WARMUP)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            s = disc(noisy, attention_mask=mask).logits  # (B, T)
        real = mask.bool()
        loss = F.binary_cross_entropy_with_logits(s.float()[real], lab[real])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(disc.parameters(), cfg.max_grad_norm)
        opt.step()
        step += 1
        if step % 100 == 0:
            print(f"step {step} tokens {step * cfg.batch_size * 128:,} loss {loss.item():.4f} "
                  f"held-out AUC {held_out_auc():.3f}", flush=True)


if __name__ == "__main__":
    main()
