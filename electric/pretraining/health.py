"""Training health: is the discriminator learning, or has it collapsed? Pure functions over tensors.

Measured on the fixed validation slice at every evaluation (training/pretrain.py) and logged as
`val_disc_auc` (`val_energy_auc` for Electric's energy alone), `val_unigram_noise_auc` (against fixed unigram
noise, which only context can detect), `val_disc_acc_gain`, `val_logit_spread`, `val_token_cosine`,
`val_gen_nll` and `val_unigram_nll`.

What a collapse looks like (measured, BENCHMARKS.md "Pretraining recipe"): with the output bias at 0
and a hot lr the discriminator maps every token to nearly the same last-layer state (cross-sequence
cosine 0.99+ where a healthy or MLM encoder sits at 0.5-0.95), its output barely varies between
tokens (spread ~0.001), and it ranks replaced tokens no better than chance (AUC ~0.5; Electric's
corrected logit can fall below 0.5 because log q alone then decides it).
"""

from __future__ import annotations

import math

import torch

from electric.evaluation.metrics import roc_auc

# A discriminator is reported collapsed when it ranks replaced vs original no better than this ...
COLLAPSE_MAX_AUC = 0.6
# ... and, at the same time, its tokens share one state or its outputs do not vary.
COLLAPSE_MIN_COSINE = 0.9
COLLAPSE_MAX_SPREAD = 0.01
# Ranking replaced tokens *below* originals once the generator beats the unigram NLL is a failure whatever the
# states look like: Electric's corrected logit does this when its energy stays flat while an under-confident cloze
# model's log q decides (AUC 0.43-0.45 at lr 1e-3 with cosine 0.77, cloze NLL 5.1-6.4 vs unigram 6.84). Before
# that (an untrained generator) healthy runs dip below 0.5 too (debug Electric: 0.42 at step 10).
COLLAPSE_BELOW_CHANCE_AUC = 0.47

COLLAPSE_WHAT = ("the discriminator has collapsed: every token gets nearly the same state and it cannot tell "
                 "replaced tokens from original ones (or ranks them the wrong way), so it is learning nothing.")
COLLAPSE_GENERIC = ("Otherwise try a lower --lr (the tiny preset's default is tuned), a longer warmup "
                    "(--warmup-steps / --min-warmup-steps), and the default --disc-bias-init prior.")


def collapse_advice(start: str) -> str:
    """What to do about a collapse, for a run that started `start`: "scratch", "warm" (--warm-start) or
    "checkpoint" (--init-from). A run is never told to do what it already did."""
    if start == "warm":
        return (f"{COLLAPSE_WHAT} This run warm-started from MLM: its MLM stage may have been too short to leave the "
                "unigram phase (a longer run or a larger --warm-start gives it more), or start from a checkpoint you "
                f"have (--init-from; docs/pretraining.md). {COLLAPSE_GENERIC}")
    if start == "checkpoint":
        return (f"{COLLAPSE_WHAT} This run started from --init-from: continue it at a lower --lr (its encoder is "
                "trained; the fresh head needs a gentle start) or a longer warmup (--warmup-steps / "
                "--min-warmup-steps), with the default --disc-bias-init prior.")
    return (f"{COLLAPSE_WHAT} At CPU budgets a discriminator trained from scratch stalls like this once its generator "
            "is good: start from a checkpoint you have (--init-from DIR) or warm-start it from MLM (--warm-start 0.4); "
            f"docs/pretraining.md. {COLLAPSE_GENERIC}")


def tensor_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """`electric.evaluation.metrics.roc_auc` (the project's one ROC-AUC: ties count half, NaN with one class) of
    `scores` for `labels` (1 = positive), both tensors of one shape."""
    if scores.shape != labels.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and labels {tuple(labels.shape)} differ in shape")
    return roc_auc(labels.detach().bool().flatten().cpu().numpy(), scores.detach().double().flatten().cpu().numpy())


def logit_spread(logits: torch.Tensor, attention_mask: torch.Tensor) -> float:
    """Standard deviation of the discriminator's outputs over real (non-pad) tokens: (B, T), (B, T)."""
    vals = logits.detach().float()[attention_mask.bool()]
    return float(vals.std()) if vals.numel() > 1 else 0.0


def token_cosine(hidden: torch.Tensor, attention_mask: torch.Tensor) -> float:
    """Mean cosine similarity between the states of real tokens from *different* sequences: (B, T, H).

    Exact over all cross-sequence pairs: with u_i the unit vectors and S_b their sum per sequence,
    sum over pairs in different sequences = |sum_b S_b|^2 - sum_b |S_b|^2.
    """
    if hidden.dim() != 3 or hidden.shape[:2] != attention_mask.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} must be (B, T, H) over attention_mask "
                         f"{tuple(attention_mask.shape)}")
    real = attention_mask.bool()
    unit = torch.nn.functional.normalize(hidden.detach().double(), dim=-1) * real[..., None]  # (B, T, H)
    per_seq = unit.sum(dim=1)  # (B, H)
    n = real.sum(dim=1).double()  # (B,)
    pairs = n.sum() ** 2 - (n ** 2).sum()
    if pairs <= 0:
        return math.nan
    cross = per_seq.sum(dim=0).pow(2).sum() - per_seq.pow(2).sum()
    return float(cross / pairs)


def unigram_log_probs(counts: torch.Tensor) -> torch.Tensor:
    """Add-one unigram log-probabilities from token counts: (V,) -> (V,)."""
    c = counts.double()
    return torch.log((c + 1) / (c.sum() + c.numel()))


def collapse_reasons(auc: float, cosine: float, spread: float, gen_nll: float = math.nan,
                     unigram_nll: float = math.nan) -> list[str]:
    """Why the discriminator counts as collapsed ([] = healthy): low AUC together with one state or flat outputs,
    or an AUC clearly below chance against a generator that beats the unigram NLL."""
    if math.isnan(auc) or auc >= COLLAPSE_MAX_AUC:
        return []
    if auc < COLLAPSE_BELOW_CHANCE_AUC and gen_nll < unigram_nll:  # False when either is unknown (nan)
        return [f"AUC {auc:.3f} < {COLLAPSE_BELOW_CHANCE_AUC}: it ranks replaced tokens below original ones "
                f"(generator NLL {gen_nll:.2f} < unigram {unigram_nll:.2f})"]
    reasons = []
    if not math.isnan(cosine) and cosine >= COLLAPSE_MIN_COSINE:
        reasons.append(f"token cosine {cosine:.3f} >= {COLLAPSE_MIN_COSINE}")
    if spread < COLLAPSE_MAX_SPREAD:
        reasons.append(f"logit spread {spread:.4f} < {COLLAPSE_MAX_SPREAD}")
    if reasons:
        reasons.insert(0, f"AUC {auc:.3f} < {COLLAPSE_MAX_AUC}")
    return reasons


def collapse_reasons_in(row: dict) -> list[str]:
    """collapse_reasons of one logged evaluation (`val_*` keys); [] when it has no discriminator figures."""
    if "val_disc_auc" not in row:
        return []
    return collapse_reasons(row["val_disc_auc"], row.get("val_token_cosine", math.nan),
                            row.get("val_logit_spread", math.inf), row.get("val_gen_nll", math.nan),
                            row.get("val_unigram_nll", math.nan))


def health_metrics(details: list[dict], unigram_lp: torch.Tensor | None) -> dict[str, float]:
    """Health over validation batches. Each item of `details` is PretrainingModel's `details` output:
    disc_logits, disc_output, labels (B, T) or None (mlm), attention_mask (B, T), hidden (B, T, H),
    gen_nll (N,), gen_targets (N,), and corrected (True when disc_logits are Electric's corrected logits);
    optionally noise_scores and noise_labels (B, T): the discriminator's output on fixed unigram noise."""
    out: dict[str, float] = {}
    mask = torch.cat([d["attention_mask"].flatten() for d in details]).bool()
    if details[0].get("disc_logits") is not None:
        logits = torch.cat([d["disc_logits"].flatten().float() for d in details])[mask]
        labels = torch.cat([d["labels"].flatten() for d in details])[mask]
        own_all = torch.cat([d["disc_output"].flatten().float() for d in details])  # all tokens, pads too
        own = own_all[mask]
        out["disc_auc"] = tensor_auc(logits, labels)
        if details[0].get("corrected"):  # Electric: also the energy alone, without log q
            out["energy_auc"] = tensor_auc(own, labels)
        acc = ((logits > 0).float() == labels).float().mean()
        out["disc_acc_gain"] = float(acc - (labels == 0).float().mean())  # minus always answering "original"
        out["logit_spread"] = logit_spread(own_all, mask)
    if "noise_scores" in details[0]:  # the same discriminator against fixed unigram noise
        noise_scores = torch.cat([d["noise_scores"].flatten() for d in details])[mask]
        noise_labels = torch.cat([d["noise_labels"].flatten() for d in details])[mask]
        out["unigram_noise_auc"] = tensor_auc(noise_scores, noise_labels)
    out["token_cosine"] = _mean([token_cosine(d["hidden"], d["attention_mask"]) for d in details])
    nll = torch.cat([d["gen_nll"].flatten().float() for d in details])
    if nll.numel():
        out["gen_nll"] = float(nll.mean())
        if unigram_lp is not None:
            targets = torch.cat([d["gen_targets"].flatten() for d in details]).cpu()
            out["unigram_nll"] = float(-unigram_lp[targets].mean())
    return out


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan
