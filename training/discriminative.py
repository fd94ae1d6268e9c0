"""Discriminative training on n-best lists with references: the one-pass score the server serves, fine-tuned with the
minimum-word-error loss (electric.finetuning.mwer) so that it ranks this recogniser's hypotheses by their errors.

    result = train_on_lists(TrainSpec(source=RUN, part="discriminator", out=DIR, lists=train_lists, ...))

`electric adapt --train-lists LISTS` calls it after the Electric continuation. The loop, top to bottom:

1. a seeded slice of the lists (HELD_BACK_FRACTION) is held back to choose the epoch and to stop early; the rest
   train, those whose hypotheses all have the same errors left out (they carry no gradient);
2. every distinct hypothesis is tokenised once, as the server tokenises it (electric.inference.encoding);
3. the combination's scalars (the first pass's scale alpha and the model's lam) start from the untrained model's
   scores on a sample of the training lists (`init_scalars`: the ratio with the fewest errors); they, a word and a
   piece bonus are then
   learned with the model (lr SCALAR_LR), and the guard tunes the served weights again on dev afterwards;
4. AdamW at `lr` with a linear warm-up (10%) and decay over `epochs`, LISTS_PER_STEP lists a step, dropout on;
   the held-back WER (and loss) after each epoch, the epoch-0 model included: the best is kept, two epochs
   without a better one stop the run, and so does `minutes`;
5. Ctrl-C saves the state (model, optimiser, scalars, the epoch's order and position, the best so far) in
   `out/state.pt`, and the same call resumes from it; an epoch's end saves it too.

The result is `out/run` (a run directory whose `part` holds the best model: what `electric export` takes) and a
record of the training (epochs, steps, tokens a second, the held-back WER per epoch, the chosen epoch).
"""

from __future__ import annotations

import math
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electric.finetuning.mwer import hypothesis_errors, informative, mwer_loss, padded, sentence_scores

HELD_BACK_FRACTION = 0.1  # of the train lists: choose the epoch and stop early on them, never on --dev
MIN_HELD_BACK = 20
LISTS_PER_STEP = 16
SCALAR_LR = 1e-2  # the combination's alpha, lam, word and piece bonus
PATIENCE = 2  # epochs without a better held-back WER before stopping
INIT_SAMPLE = 400  # training lists the scalars' grid is fitted on
RATIO_GRID = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)  # first pass : model, in unit spreads
SHARPNESS = 3.0  # the combined score's spread within a list at the start
SCORE_BATCH = 64  # hypotheses a forward pass when scoring without gradients


class Interrupted(Exception):
    """Ctrl-C during training: the state is saved in `out/state.pt`; the same call resumes."""


@dataclass(frozen=True)
class TrainSpec:
    source: Path  # a run directory (RUN/config.json and RUN/<part>)
    part: str  # "discriminator" (Electric's energy: the score is sum -s_t) or "generator" (the cloze model)
    out: Path  # the work directory: out/run (the result), out/state.pt (to resume)
    lists: list  # NBestList with references
    metric: str = "wer"
    epochs: int = 4
    minutes: float = 10.0
    lr: float = 5e-5
    seed: int = 0
    progress: bool = True


@dataclass
class Encoded:
    """The lists as index arrays into one table of distinct hypotheses, tokenised once."""

    ids: list[np.ndarray]  # per distinct hypothesis: its token ids
    candidates: list[np.ndarray]  # per distinct hypothesis: (T,) bool, the tokens scored
    hyp: list[np.ndarray]  # per list: (N,) indices into ids
    first: list[np.ndarray]  # per list: (N,) first-pass score (or -rank without one)
    errors: list[np.ndarray]  # per list: (N,) edit errors
    words: list[np.ndarray]
    pieces: list[np.ndarray]
    pad_id: int = 0


@dataclass
class Scalars:
    log_alpha: torch.Tensor
    log_lam: torch.Tensor
    word: torch.Tensor = field(default_factory=lambda: torch.zeros((), requires_grad=True))
    piece: torch.Tensor = field(default_factory=lambda: torch.zeros((), requires_grad=True))

    def params(self) -> list[torch.Tensor]:
        return [self.log_alpha, self.log_lam, self.word, self.piece]

    def to_dict(self) -> dict[str, float]:
        return {k: float(v.detach()) for k, v in (("alpha", self.log_alpha.exp()), ("lam", self.log_lam.exp()),
                                                   ("word", self.word), ("piece", self.piece))}


def encode_lists(lists: list, tokenizer: Any, max_length: int, metric: str) -> Encoded:
    from electric.evaluation.nbest.combination import num_words
    from electric.inference.encoding import encode

    index: dict[str, int] = {}
    for nb in lists:
        for h in nb.hyps:
            index.setdefault(h, len(index))
    enc = encode(tokenizer, list(index), max_length, truncate=True)
    errors = hypothesis_errors(lists, metric)
    first = [np.asarray(nb.first_pass_scores, dtype=np.float64) if nb.first_pass_scores is not None
             else -np.arange(len(nb.hyps), dtype=np.float64) for nb in lists]
    return Encoded(ids=[e.input_ids for e in enc], candidates=[np.asarray(e.candidates, dtype=bool) for e in enc],
                   hyp=[np.array([index[h] for h in nb.hyps]) for nb in lists], first=first, errors=errors,
                   words=[np.array([num_words(h) for h in nb.hyps], dtype=np.float64) for nb in lists],
                   pieces=[np.array([int(enc[index[h]].candidates.sum()) for h in nb.hyps], dtype=np.float64)
                           for nb in lists], pad_id=int(tokenizer.pad_token_id or 0))


def batch_tensors(enc: Encoded, texts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention mask, candidates), each (B, T), of the distinct hypotheses `texts`."""
    from electric.batching import pad_rows, pad_values

    ids, mask = pad_rows([enc.ids[t] for t in texts], enc.pad_id)
    cand = pad_values([enc.candidates[t].astype(np.int64) for t in texts], 0).astype(bool)
    return torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(cand)


def list_scores(model: torch.nn.Module, kind: str, enc: Encoded, lists: list[int]) -> torch.Tensor:
    """(L, N) sentence scores of the lists' hypotheses (0 at padding), with gradients when enabled."""
    texts = np.unique(np.concatenate([enc.hyp[u] for u in lists]))
    ids, mask, cand = batch_tensors(enc, texts)
    s = sentence_scores(model, kind, ids, mask, cand)  # (B,)
    pos = {int(t): b for b, t in enumerate(texts)}
    n = max(len(enc.hyp[u]) for u in lists)
    gather = torch.zeros((len(lists), n), dtype=torch.long)
    for i, u in enumerate(lists):
        gather[i, : len(enc.hyp[u])] = torch.tensor([pos[int(t)] for t in enc.hyp[u]])
    return s[gather]


def combined(scores: torch.Tensor, enc: Encoded, lists: list[int], sc: Scalars) -> tuple[torch.Tensor, ...]:
    """(z, errors, valid), each (L, N): z = alpha a + lam s + word * words + piece * pieces."""
    a, valid = padded([enc.first[u] for u in lists])
    e, _ = padded([enc.errors[u] for u in lists])
    w, _ = padded([enc.words[u] for u in lists])
    p, _ = padded([enc.pieces[u] for u in lists])
    z = sc.log_alpha.exp() * a + sc.log_lam.exp() * scores + sc.word * w + sc.piece * p
    return z, e, valid


@torch.no_grad()
def score_all(model: torch.nn.Module, kind: str, enc: Encoded, lists: list[int]) -> dict[int, torch.Tensor]:
    """Each list's (N,) sentence scores, without gradients, SCORE_BATCH hypotheses a pass (model in eval mode)."""
    was = model.training
    model.eval()
    texts = np.unique(np.concatenate([enc.hyp[u] for u in lists]))
    texts = texts[np.argsort([len(enc.ids[t]) for t in texts], kind="stable")]  # little padding
    s = {}
    for lo in range(0, len(texts), SCORE_BATCH):
        chunk = texts[lo: lo + SCORE_BATCH]
        got = sentence_scores(model, kind, *batch_tensors(enc, chunk))
        s.update({int(t): float(x) for t, x in zip(chunk, got, strict=True)})
    model.train(was)
    return {u: torch.tensor([s[int(t)] for t in enc.hyp[u]]) for u in lists}


def evaluate(scores: dict[int, torch.Tensor], enc: Encoded, lists: list[int], sc: Scalars) -> dict[str, float]:
    """The held-back lists' error rate of the combination's choice (errors / reference words, in %) and MWER loss."""
    with torch.no_grad():
        z, e, valid = combined(padded([scores[u].numpy() for u in lists])[0], enc, lists, sc)
        loss = float(mwer_loss(z, e, valid))
        pick = z.masked_fill(~valid, float("-inf")).argmax(dim=1)
        errs = float(e.gather(1, pick[:, None]).sum())
    return {"errors": errs, "loss": loss}


def init_scalars(scores: dict[int, torch.Tensor], enc: Encoded, lists: list[int]) -> Scalars:
    """alpha and lam from the untrained model's scores on `lists`: each score scaled to a unit spread within lists,
    their ratio the one of RATIO_GRID whose choices have the fewest errors (ties: the lower MWER loss), and the
    whole at SHARPNESS (a sharper softmax has a smaller gradient; the sharpness is learned from there)."""
    s, valid = padded([scores[u].numpy() for u in lists])
    a, _ = padded([enc.first[u] for u in lists])

    def spread(x: torch.Tensor) -> float:
        mean = (x * valid).sum(1, keepdim=True) / valid.sum(1, keepdim=True)
        return float((((x - mean) * valid) ** 2).sum() / valid.sum()) ** 0.5 or 1.0

    unit_a, unit_s = 1.0 / spread(a), 1.0 / spread(s)
    best = None
    for r in RATIO_GRID:  # alpha / lam in unit spreads
        sc = Scalars(torch.tensor(math.log(SHARPNESS * r * unit_a / (1 + r))),
                     torch.tensor(math.log(SHARPNESS * unit_s / (1 + r))))
        z, e, ok = combined(s, enc, lists, sc)
        with torch.no_grad():
            errs = float(e.gather(1, z.masked_fill(~ok, float("-inf")).argmax(1, keepdim=True)).sum())
            key = (errs, float(mwer_loss(z, e, ok)))
        if best is None or key < best[0]:
            best = (key, sc)
    assert best is not None
    return Scalars(best[1].log_alpha.clone().requires_grad_(), best[1].log_lam.clone().requires_grad_())


def load_part(source: Path, part: str) -> tuple[torch.nn.Module, str, object, int]:
    """(model in train mode, its kind, tokenizer, trained length) of RUN/part."""
    import transformers

    from electric.checkpoint import trained_length
    from electric.modeling.loading import load_model, read_model_config
    from electric.tokenization import load_tokenizer

    d = source / part
    config = read_model_config(d)
    if config.get("model_type") == "electric-cloze":
        from electric.inference.cloze import ClozeTokenLogProbs, load_cloze_model

        model: torch.nn.Module = ClozeTokenLogProbs(load_cloze_model(d))
        kind = "cloze"
    else:
        model = load_model(d, transformers.ElectraForPreTraining)
        kind = "discriminator"
    return model.train(), kind, load_tokenizer(d), trained_length(d, config)[0]


def save_part(model: torch.nn.Module, kind: str, spec: TrainSpec, dest: Path) -> None:
    """`dest` as a run directory like the source: its config.json and `part` (the source's files, these weights)."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp).mkdir(parents=True)
    if (spec.source / "config.json").is_file():
        shutil.copy2(spec.source / "config.json", tmp / "config.json")  # the trained length (max_seq_length)
    shutil.copytree(spec.source / spec.part, tmp / spec.part)
    inner: Any = model.model if kind == "cloze" else model  # ClozeTokenLogProbs wraps the ElectricForClozeLM
    inner.save_pretrained(tmp / spec.part)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def split_lists(spec: TrainSpec, enc: Encoded) -> tuple[list[int], list[int]]:
    """(train, held back) list indices: a seeded HELD_BACK_FRACTION held back; uninformative lists do not train."""
    idx = list(range(len(spec.lists)))
    random.Random(spec.seed).shuffle(idx)
    n_held = max(MIN_HELD_BACK, round(HELD_BACK_FRACTION * len(idx)))
    held, train = sorted(idx[:n_held]), sorted(idx[n_held:])
    return [u for u in train if informative(enc.errors[u])], held


def train_on_lists(spec: TrainSpec, log: Callable[[str], None] = print) -> dict:
    """Fine-tune RUN/part on the lists (the module's docstring); returns the training's record. Raises Interrupted
    (state saved) on Ctrl-C."""
    from tqdm.auto import tqdm

    torch.manual_seed(spec.seed)
    model, kind, tokenizer, max_length = load_part(spec.source, spec.part)
    enc = encode_lists(spec.lists, tokenizer, max_length, spec.metric)
    train, held = split_lists(spec, enc)
    ref_words = sum(len((spec.lists[u].ref or "").split()) for u in held) if spec.metric == "wer" else sum(
        len(spec.lists[u].ref or "") for u in held)
    steps_per_epoch = math.ceil(len(train) / LISTS_PER_STEP)
    total_steps = steps_per_epoch * spec.epochs
    state_path, best_dir = spec.out / "state.pt", spec.out / "run"
    spec.out.mkdir(parents=True, exist_ok=True)

    decay = [p for n, p in model.named_parameters() if not any(k in n.lower() for k in ("bias", "layernorm"))]
    no_decay = [p for n, p in model.named_parameters() if any(k in n.lower() for k in ("bias", "layernorm"))]

    def make_optimizer(sc: Scalars) -> torch.optim.Optimizer:
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.01, "lr": spec.lr, "base_lr": spec.lr},
                                  {"params": no_decay, "weight_decay": 0.0, "lr": spec.lr, "base_lr": spec.lr},
                                  {"params": sc.params(), "weight_decay": 0.0, "lr": SCALAR_LR,
                                   "base_lr": SCALAR_LR}], betas=(0.9, 0.999), eps=1e-6)

    warmup = max(1, round(0.1 * total_steps))

    def lr_factor(step: int) -> float:
        return min(1.0, (step + 1) / warmup) * max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    if state_path.is_file():
        st = torch.load(state_path, weights_only=False)
        model.load_state_dict(st["model"])
        sc = Scalars(*(torch.tensor(v, requires_grad=True) for v in st["scalars"]))
        opt = make_optimizer(sc)
        opt.load_state_dict(st["optimizer"])
        step, epoch, pos, order = st["step"], st["epoch"], st["pos"], st["order"]
        history, best, elapsed, tokens = st["history"], st["best"], st["elapsed"], st["tokens"]
        torch.set_rng_state(st["torch_rng"])
        log(f"resuming discriminative training at epoch {epoch + 1}, step {step} of {total_steps}")
    else:
        log(f"{len(train):,} lists train ({len(spec.lists) - len(held) - len(train):,} whose hypotheses all have "
            f"the same errors left out), {len(held):,} held back to choose the epoch; {steps_per_epoch} steps an "
            f"epoch of {LISTS_PER_STEP} lists, {spec.epochs} epochs at most, {spec.minutes:g} minutes at most")
        sample = random.Random(spec.seed).sample(train, min(INIT_SAMPLE, len(train)))
        start_scores = score_all(model, kind, enc, sorted(set(sample) | set(held)))
        sc = init_scalars(start_scores, enc, sample)
        opt = make_optimizer(sc)
        first = evaluate(start_scores, enc, held, sc)
        history = [{"epoch": 0, "step": 0, **first, "rate": 100 * first["errors"] / max(1, ref_words),
                    "scalars": sc.to_dict()}]
        best = {"epoch": 0, **history[0]}
        save_part(model, kind, spec, best_dir)
        step, epoch, pos, order, elapsed, tokens = 0, 0, 0, None, 0.0, 0
        log(f"held back before training: {spec.metric.upper()} {history[0]['rate']:.2f}% (alpha "
            f"{sc.to_dict()['alpha']:.3g}, lam {sc.to_dict()['lam']:.3g} from the grid)")

    def save_state() -> None:
        tmp = state_path.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "scalars": [float(p.detach()) for p in sc.params()],
                    "optimizer": opt.state_dict(), "step": step, "epoch": epoch, "pos": pos, "order": order,
                    "history": history, "best": best, "elapsed": elapsed, "tokens": tokens,
                    "torch_rng": torch.get_rng_state()}, tmp)
        tmp.replace(state_path)

    budget_s = spec.minutes * 60
    bar = tqdm(total=total_steps, initial=step, desc="discriminative training", unit="step", dynamic_ncols=True,
               disable=not spec.progress)
    t_start = time.perf_counter() - elapsed
    stopped = "epochs"
    try:
        while epoch < spec.epochs:
            if order is None:
                order = list(train)
                random.Random(spec.seed * 1000 + epoch).shuffle(order)
                pos = 0
            model.train()
            while pos < len(order):
                batch = order[pos: pos + LISTS_PER_STEP]
                for g in opt.param_groups:
                    g["lr"] = g["base_lr"] * lr_factor(step)
                z, e, valid = combined(list_scores(model, kind, enc, batch), enc, batch, sc)
                loss = mwer_loss(z, e, valid)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                tokens += sum(len(enc.ids[t]) for u in batch for t in enc.hyp[u])
                pos += len(batch)
                step += 1
                elapsed = time.perf_counter() - t_start
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{float(loss.detach()):.3f}", tok_s=f"{tokens / elapsed:,.0f}")
                if elapsed > budget_s:
                    break
            epoch_done = pos >= len(order)
            got = evaluate(score_all(model, kind, enc, held), enc, held, sc)
            rec = {"epoch": epoch + (1 if epoch_done else pos / len(order)), "step": step, **got,
                   "rate": 100 * got["errors"] / max(1, ref_words), "scalars": sc.to_dict()}
            history.append(rec)
            better = (rec["errors"], rec["loss"]) < (best["errors"], best["loss"])
            log(f"epoch {rec['epoch']:.2f}: held-back {spec.metric.upper()} {rec['rate']:.2f}%, MWER loss "
                f"{rec['loss']:.4f}" + (" (the best so far)" if better else ""))
            if better:
                best = {"epoch": rec["epoch"], **rec}
                save_part(model, kind, spec, best_dir)
            epoch, order = (epoch + 1, None) if epoch_done else (epoch, order)
            save_state()
            if elapsed > budget_s:
                stopped = "minutes"
                break
            if best["epoch"] <= epoch - PATIENCE:
                stopped = "no better held-back WER"
                break
    except KeyboardInterrupt:
        bar.close()
        save_state()
        raise Interrupted(f"discriminative training interrupted at step {step}; its state is in {state_path}") \
            from None
    bar.close()
    return {"part": spec.part, "kind": kind, "lists": len(spec.lists), "train_lists": len(train),
            "held_back_lists": len(held), "lists_per_step": LISTS_PER_STEP, "lr": spec.lr, "epochs": spec.epochs,
            "minutes_budget": spec.minutes, "steps": step, "tokens": tokens, "seconds": round(elapsed, 1),
            "tokens_per_s": round(tokens / max(elapsed, 1e-9)), "stopped": stopped, "history": history,
            "chosen_epoch": best["epoch"], "held_back_before": history[0]["rate"], "held_back_after": best["rate"],
            "run": str(best_dir)}
