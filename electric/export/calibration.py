"""Fit the calibration `electric export` stores in the manifest: Platt scaling of the discriminator's s_t on
held-out text that the model's own generator corrupts as pretraining does (see `electric.inference.calibration`
for what the probability means and how it is applied)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from electric.inference.calibration import Calibration, replaced_probs

METHOD = "platt"
FIT_SHARE = 2 / 3  # of the calibration sentences: fit on these, report the held-out check on the rest
MAX_SENTENCES = 1500
MIN_REPLACED = 100  # fewer replaced tokens than this in the fit part: the calibration is noisy (warned)
# Fewer candidate tokens than this in the fit part: warned loudly and flagged in the manifest
# (fit.enough_tokens). Derived, not measured: at a replaced fraction near 0.15 the mean probability of a fit on
# N tokens is within +-2 standard errors = +-2 * sqrt(0.15 * 0.85 / N) of the truth, +-0.016 at N = 2000, and
# each of the 10 ECE bins still holds ~200 tokens. The 11 built-in sentences give ~100 tokens (ECE 0.13 seen).
# TODO(issue 23): measure held-out ECE against fit tokens on a quiet machine and set this from the curve.
MIN_FIT_TOKENS = 2000


def fit_platt(scores: np.ndarray, labels: np.ndarray, max_iter: int = 100, tol: float = 1e-10) -> Calibration:
    """Logistic regression of `labels` (1 = replaced) on one feature, `scores`, by Newton's method.

    At the optimum the mean fitted probability equals the mean label (the intercept's equation), so the
    fit is unbiased on its own data; how well that carries to new text is what the held-out check says."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    if s.shape != y.shape or s.size == 0:
        raise ValueError(f"scores {s.shape} and labels {y.shape} must be the same non-empty length")
    rate = float(y.mean())
    if rate in (0.0, 1.0):
        raise ValueError(f"every label is {int(rate)}: nothing to calibrate against")
    mu, sd = float(s.mean()), float(s.std())
    if not sd > 0:
        return Calibration(0.0, math.log(rate / (1 - rate)))
    x = np.stack([(s - mu) / sd, np.ones_like(s)], axis=1)  # (N, 2): standardised for a well-scaled Newton step
    w = np.array([0.0, math.log(rate / (1 - rate))])

    def nll(w: np.ndarray) -> float:
        z = x @ w
        return float(np.sum(np.logaddexp(0.0, z) - y * z))

    loss = nll(w)
    for _ in range(max_iter):
        p = 0.5 * (1.0 + np.tanh(0.5 * (x @ w)))
        grad = x.T @ (p - y)
        hess = (x * (p * (1 - p))[:, None]).T @ x + 1e-9 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while t > 1e-6 and nll(w - t * step) > loss:  # halve until the loss does not rise
            t /= 2
        w, new = w - t * step, nll(w - t * step)
        if loss - new <= tol * max(1.0, abs(loss)):
            loss = new
            break
        loss = new
    scale = w[0] / sd
    return Calibration(float(scale), float(w[1] - scale * mu))


def corrupted_batches(tokenizer, generator, sentences: Sequence[str], *, mask_prob: float, temperature: float,
                      max_length: int, seed: int = 0, batch_size: int = 32):
    """Yield (input_ids, attention_mask, candidates, labels) NumPy (B, T) batches: each sentence tokenised,
    k = max(1, round(mask_prob * n)) of its n tokens chosen and replaced by `generator` samples through pretraining's
    own generator pass (`electric.modeling.corruption.corrupt`, with `draw_noise`'s draws from a generator seeded
    with `seed`); label 1 where the token now differs."""
    import torch

    from electric.modeling.cloze import ElectricForClozeLM
    from electric.modeling.corruption import corrupt, draw_noise, electra_labels, max_predictions

    rng = torch.Generator().manual_seed(seed)
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
    most = max_predictions(mask_prob, max_length)
    objective = "electric" if isinstance(generator, ElectricForClozeLM) else "electra"  # what its noise needs
    for i in range(0, len(sentences), batch_size):
        enc = tokenizer(list(sentences[i:i + batch_size]), padding=True, truncation=True, max_length=max_length,
                        split_special_tokens=True, return_tensors="pt")  # "[SEP]" in a sentence is text, as served
        ids, mask = enc["input_ids"], enc["attention_mask"]  # (B, T)
        noise = draw_noise(rng, ids.shape, objective=objective, vocab_size=generator.config.vocab_size,
                           max_predictions=most, temperature=temperature)
        with torch.no_grad():
            c = corrupt(generator, ids, mask, special, noise, mask_prob=mask_prob, max_predictions=most,
                        mask_id=tokenizer.mask_token_id)
        labels = electra_labels(ids, c.corrupted)  # (B, T)
        yield c.corrupted.numpy(), mask.numpy(), c.candidates.numpy(), labels.numpy().astype(bool)


def collect(run: Callable[[np.ndarray, np.ndarray], np.ndarray], batches) -> tuple[np.ndarray, np.ndarray]:
    """(s, labels) over the candidate tokens of `batches`, s from `run(input_ids, attention_mask)` (B, T)."""
    scores, labels = [], []
    for ids, mask, cand, lab in batches:
        s = np.asarray(run(ids, mask), dtype=np.float64)  # (B, T)
        scores.append(s[cand])
        labels.append(lab[cand])
    return np.concatenate(scores), np.concatenate(labels)


def check(calibration: Calibration, scores: np.ndarray, labels: np.ndarray) -> dict:
    """How the calibration does on data it was not fitted on: mean probability vs the replaced fraction,
    Brier score, expected calibration error (10 bins) and ROC-AUC; `mean_raw_prob` is sigma(s) for scale."""
    from electric.evaluation import metrics as M

    p = replaced_probs(scores, calibration)
    y = labels.astype(np.float64)
    bins = np.minimum((p * 10).astype(int), 9)
    ece = sum(abs(float(p[bins == b].mean() - y[bins == b].mean())) * float((bins == b).mean())
              for b in range(10) if (bins == b).any())
    return {"tokens": int(y.size), "replaced_fraction": float(y.mean()), "mean_prob": float(p.mean()),
            "mean_raw_prob": float(replaced_probs(scores, None).mean()), "brier": float(np.mean((p - y) ** 2)),
            "ece": float(ece), "roc_auc": float(M.roc_auc(labels, scores))}


def find_generator(model_dir: Path) -> Path | None:
    """RUN/generator beside RUN/discriminator (a pretraining run's layout), if it holds a checkpoint."""
    gen = model_dir.resolve().parent / "generator"
    return gen if model_dir.resolve().name == "discriminator" and (gen / "config.json").is_file() else None


# What a generator without its run's config.json was trained with: PretrainConfig's defaults (a test keeps them so).
DEFAULT_SETTINGS = {"mask_prob": 0.15, "temperature": 1.0}


def run_settings(generator_dir: Path) -> dict:
    """mask_prob and temperature of the run that trained `generator_dir` (RUN/config.json), else the defaults."""
    from electric.checkpoint import CheckpointError

    cfg_path = generator_dir.resolve().parent / "config.json"
    if not cfg_path.is_file():
        return {**DEFAULT_SETTINGS, "settings_from": "defaults"}
    try:
        values = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{str(cfg_path)!r} is not a readable JSON config: {e}") from None
    if not isinstance(values, dict):
        raise CheckpointError(f"{str(cfg_path)!r} is not a JSON object")
    return {**{k: float(values.get(k, v)) for k, v in DEFAULT_SETTINGS.items()}, "settings_from": str(cfg_path)}


def load_generator(generator_dir: Path):
    """An ELECTRA masked-LM generator or Electric's two-tower cloze generator, on CPU, eval mode, its attention
    through SDPA (the boolean masks of pretraining's generator pass are written for it)."""
    from transformers import AutoModelForMaskedLM

    import electric.modeling.cloze  # noqa: F401 - registers ElectricForClozeLM with the Auto classes
    from electric.checkpoint import CheckpointError

    try:
        return AutoModelForMaskedLM.from_pretrained(generator_dir, attn_implementation="sdpa").eval()
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"could not load the generator {str(generator_dir)!r}: {e}") from e


def fit_calibration(run: Callable[[np.ndarray, np.ndarray], np.ndarray], tokenizer, generator_dir: Path,
                    sentences: Sequence[str], source: str, *, max_length: int, seed: int = 0,
                    log: Callable[[str], None] = print) -> dict:
    """Fit Platt scaling of the discriminator `run` on `sentences` corrupted by its generator; returns the
    manifest's `calibration` entry: scale, bias, what it was fitted on, and a held-out check."""
    settings = run_settings(generator_dir)
    generator = load_generator(generator_dir)
    pool = list(dict.fromkeys(s for s in sentences if s.strip()))
    random.Random(seed).shuffle(pool)
    pool = pool[:MAX_SENTENCES]
    n_fit = max(1, round(FIT_SHARE * len(pool)))
    parts = {"fit": pool[:n_fit], "check": pool[n_fit:]}
    kw = dict(mask_prob=settings["mask_prob"], temperature=settings["temperature"], max_length=max_length)
    s_fit, y_fit = collect(run, corrupted_batches(tokenizer, generator, parts["fit"], seed=seed, **kw))
    calibration = fit_platt(s_fit, y_fit)
    entry = {"method": METHOD, "scale": calibration.scale, "bias": calibration.bias,
             "formula": "p_t = sigmoid(scale * s_t + bias)",
             "meaning": "P(token t was replaced), for text with mask_prob of its tokens replaced by samples of the "
                        "model's own generator (as in pretraining)",
             "generator": str(generator_dir.resolve()), "generator_architecture": type(generator).__name__,
             **settings, "seed": seed, "data": source,
             "fit": {"sentences": len(parts["fit"]), "tokens": int(y_fit.size),
                     "replaced_fraction": float(y_fit.mean()), "min_tokens": MIN_FIT_TOKENS,
                     "enough_tokens": bool(y_fit.size >= MIN_FIT_TOKENS and y_fit.sum() >= MIN_REPLACED)}}
    if not entry["fit"]["enough_tokens"]:
        log(f"WARNING: the calibration was fitted on only {int(y_fit.size)} tokens ({int(y_fit.sum())} replaced) of "
            f"{len(parts['fit'])} sentences from {source}; it needs at least {MIN_FIT_TOKENS} tokens and "
            f"{MIN_REPLACED} replaced for /v1/detect's probabilities to mean what they say. Pass more "
            "--calibration-data (e.g. ../shared/data/glue/sst2/dev.tsv); the manifest records "
            "calibration.fit.enough_tokens = false")
    if parts["check"]:
        s_chk, y_chk = collect(run, corrupted_batches(tokenizer, generator, parts["check"], seed=seed + 1, **kw))
        entry["check"] = {"sentences": len(parts["check"]), **check(calibration, s_chk, y_chk)}
        c = entry["check"]
        log(f"calibration: p = sigmoid({calibration.scale:.4g} * s + {calibration.bias:.4g}); held out "
            f"({c['tokens']} tokens): mean p {c['mean_prob']:.3f} vs replaced {c['replaced_fraction']:.3f} "
            f"(raw sigma(s) {c['mean_raw_prob']:.3f}), ECE {c['ece']:.3f}, AUC {c['roc_auc']:.3f}")
    return entry
