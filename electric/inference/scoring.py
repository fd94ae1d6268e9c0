"""Sentence scores from one pass (Electric PLL, ELECTRA detection, Electric's cloze model) and classic MLM PLL.

Scoring is split in three steps so that a server can batch many clients' texts together:

1. `encode(tokenizer, texts, max_length)` -> one `Encoded` per text: token ids with [CLS]/[SEP],
   character offsets, the candidate mask (positions that are neither special nor padding), word ids,
   and the model rows to run (one row, or several overlapping windows with `sliding_window=True`);
2. `run_logits(backend, encoded)` runs the rows through `backend.run` in padded batches under a token
   budget (`max_batch_tokens`), bucketed by length (`electric.batching.plan_batches`, `pad_rows`), and
   stitches windows back into one (T,) row per text: discriminator logits s_t, or a cloze model's
   log q(x_t | x_not_t) of each input token (electric.inference.cloze: the vocabulary axis stays in the model);
3. pure post-processing of ONE row: `electric_score(enc, row)` (PLL = sum of -s_t over candidates),
   `electra_score(enc, row)` (sum of log(1 - p_t)), `cloze_score(enc, row)` (sum of log q(x_t | x_not_t)) -
   `score_row(enc, row, method)` picks one - and `electra_detect(enc, row)` (per-token and per-word replaced
   probabilities p_t: sigma(s_t), or calibrated with the model's `electric.inference.calibration`).

`Scorer(backend).score(texts, method=...)` wraps the three steps. `MaskedLMScorer(model_dir)` computes the
classic MLM pseudo-log-likelihood (Salazar et al. 2020) with a torch masked LM that
`electric.inference.masked_lm` loads and runs: one masked copy per candidate token, copies of many texts
batched together, the vocabulary head only at the masked position; `method="mlm-pll-word-l2r"` also masks the
later pieces of the same word (Kauf & Ivanova 2023, "PLL-word-l2r"). `load_scorer(model, method)` picks the
scorer a method needs from a model or run directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from electric.batching import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_BATCH_TOKENS,
    pad_rows,
    plan_batches,
    progress_bar,
)
from electric.checkpoint import (
    ARCHITECTURE_KINDS,
    MANIFEST,
    CheckpointError,
    ExportManifest,
    require_local_dir,
    resolve_model_dir,
)
from electric.inference.backend import Backend, load_backend
from electric.inference.calibration import Calibration, replaced_logits, replaced_probs
from electric.inference.encoding import (
    Encoded,
    encode,
)
from electric.inference.masked_lm import (
    check_masked_lm_config,
    load_masked_lm,
    mlm_token_logprobs,
    read_config,
)
from electric.inference.methods import (  # noqa: F401 - scoring's names, defined where the CLI reads them cheaply
    CLOZE_METHODS,
    DISCRIMINATOR_METHODS,
    METHODS,
    METHODS_OF_KIND,
    MLM_METHODS,
)
from electric.results import Detection, TextScore, TokenDetection, TokenScore, WordDetection
from electric.words import word_groups

# ---- 2. batching -------------------------------------------------------------------------------------


def run_logits(backend, encoded: Sequence[Encoded], *, max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
               batch_size: int = DEFAULT_BATCH_SIZE, pad_id: int | None = None,
               progress: bool = False) -> list[np.ndarray]:
    """One (T,) row per `Encoded` - discriminator logits s_t, or a cloze model's log q(x_t | x_not_t) - from padded,
    length-bucketed batches."""
    if pad_id is None:
        pad_id = backend.tokenizer.pad_token_id
    rows, owner = [], []
    for i, e in enumerate(encoded):
        for k, r in enumerate(e.rows()):
            rows.append(r)
            owner.append((i, k))
    results: list[np.ndarray | None] = [None] * len(rows)
    batches = plan_batches([len(r) for r in rows], max_batch_tokens=max_batch_tokens, batch_size=batch_size)
    for batch in progress_bar(batches, progress, "batches"):
        ids, mask = pad_rows([rows[i] for i in batch], pad_id)
        logits = np.asarray(backend.run(ids, mask))  # (B, T) s_t
        if logits.shape != ids.shape:
            raise ValueError(f"backend returned logits of shape {logits.shape} for inputs of shape {ids.shape}; "
                             "scoring needs a discriminator or a cloze model ((B, T) outputs)")
        for b, i in enumerate(batch):
            results[i] = logits[b, : len(rows[i])]
    per_item: list[list[np.ndarray]] = [[] for _ in encoded]
    for (i, _k), result in zip(owner, results, strict=True):
        assert result is not None  # every row is in one batch
        per_item[i].append(result)
    return [e.stitch(rs) for e, rs in zip(encoded, per_item, strict=True)]


# ---- 3. per-item results (their types: electric.results) ---------------------------------------------


def _check_row(encoded: Encoded, row: np.ndarray) -> np.ndarray:
    row = np.asarray(row, dtype=np.float64).reshape(-1)
    if row.shape[0] < encoded.length:
        raise ValueError(f"input {encoded.index}: logits row has {row.shape[0]} positions, "
                         f"the text has {encoded.length} tokens")
    return row[: encoded.length]


def token_scores_to_text_score(encoded: Encoded, per_position: np.ndarray, method: str,
                               per_token: bool = False) -> TextScore:
    """Sum a (T,) array of per-token scores over the candidates (the common tail of every method)."""
    cand = encoded.candidates
    n = int(cand.sum())
    total = float(per_position[cand].sum())
    tokens = None
    if per_token:
        tokens = [TokenScore(encoded.tokens[t], int(encoded.offsets[t, 0]), int(encoded.offsets[t, 1]),
                             float(per_position[t])) for t in np.flatnonzero(cand)]
    return TextScore(encoded.text, total, total / n if n else 0.0, n, method, encoded.truncated, tokens)


def electric_score(encoded: Encoded, logits_row: np.ndarray, per_token: bool = False) -> TextScore:
    """Electric pseudo-log-likelihood: sum over candidates of -s_t (log p(x_t | x_not_t) = -E(x)_t)."""
    return token_scores_to_text_score(encoded, -_check_row(encoded, logits_row), "electric", per_token)


def _log_not_replaced(s: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, s)  # log(1 - sigma(s)), stable


def electra_score(encoded: Encoded, logits_row: np.ndarray, per_token: bool = False,
                  calibration: Calibration | None = None) -> TextScore:
    """ELECTRA sentence score sum_t log(1 - p_t); per token log(1 - p_t), with p_t the replaced probability
    (electric.inference.calibration: sigma(scale * s_t + bias) with the model's calibration, else sigma(s_t))."""
    s = replaced_logits(_check_row(encoded, logits_row), calibration)
    return token_scores_to_text_score(encoded, _log_not_replaced(s), "electra", per_token)


def cloze_score(encoded: Encoded, logprob_row: np.ndarray, per_token: bool = False) -> TextScore:
    """Cloze pseudo-log-likelihood: sum over candidates of log q(x_t | x_not_t), one pass of Electric's cloze model
    (`logprob_row`: its (T,) log-probabilities of the input tokens, electric.inference.cloze)."""
    return token_scores_to_text_score(encoded, _check_row(encoded, logprob_row), "cloze", per_token)


def score_row(encoded: Encoded, row: np.ndarray, method: str, per_token: bool = False,
              calibration: Calibration | None = None) -> TextScore:
    """The `method` score of one text from its one-pass row (a discriminator's s_t, or a cloze model's log q)."""
    if method == "electric":
        return electric_score(encoded, row, per_token)
    if method == "electra":
        return electra_score(encoded, row, per_token, calibration)
    if method == "cloze":
        return cloze_score(encoded, row, per_token)
    raise ValueError(f"method {method!r} is not a one-pass score (one of {DISCRIMINATOR_METHODS + CLOZE_METHODS})")


def electra_detect(encoded: Encoded, logits_row: np.ndarray, calibration: Calibration | None = None) -> Detection:
    """Per-token replaced probability p_t (calibrated when the model has a calibration, else sigma(s_t)),
    per-word max and mean over pieces, and the sentence score sum_t log(1 - p_t)."""
    s = _check_row(encoded, logits_row)
    prob = replaced_probs(s, calibration)
    cand = np.flatnonzero(encoded.candidates)
    tokens = [TokenDetection(encoded.tokens[t], int(encoded.offsets[t, 0]), int(encoded.offsets[t, 1]),
                             float(prob[t]), float(s[t])) for t in cand]
    words = []
    for pos in word_groups(encoded.word_ids, cand).values():
        start, end = int(encoded.offsets[pos, 0].min()), int(encoded.offsets[pos, 1].max())
        p = prob[pos]
        words.append(WordDetection(encoded.text[start:end], start, end, float(p.max()), float(p.mean()), len(pos)))
    words.sort(key=lambda w: w.start)
    total = float(_log_not_replaced(replaced_logits(s[cand], calibration)).sum())
    return Detection(encoded.text, total, total / len(cand) if len(cand) else 0.0, len(cand), tokens, words,
                     encoded.truncated)


# ---- convenience: discriminator scorer -----------------------------------------------------------------


class Scorer:
    """One-pass scores from a backend (`electric.inference.backend.load_backend`): Electric PLL and ELECTRA scores
    from a discriminator, cloze scores from Electric's cloze model (`methods`: what this backend gives)."""

    def __init__(self, backend: Backend, *, max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
                 batch_size: int = DEFAULT_BATCH_SIZE, truncate: bool = False, sliding_window: bool = False,
                 window_stride: int | None = None, progress: bool = False, max_length: int | None = None):
        """`max_length`: tokens per input, [CLS]/[SEP] included; default the backend's (the length the model was
        trained on); more, up to its position table (`backend.max_positions`), scores with positions it never
        trained."""
        kind = backend.kind
        if kind not in METHODS_OF_KIND:
            raise CheckpointError(f"scoring needs a discriminator (ElectraForPreTraining) or Electric's cloze model "
                                  f"(ElectricForClozeLM), got a {kind} model")
        self.methods = METHODS_OF_KIND[kind]  # the first is the default
        self.backend = backend
        self.tokenizer = backend.tokenizer
        self.max_length = int(max_length or backend.max_length)
        if not 3 <= self.max_length <= backend.max_positions:
            raise ValueError(f"max_length {self.max_length}: expected 3 to the model's {backend.max_positions} "
                             "positions")
        self.max_batch_tokens, self.batch_size = max_batch_tokens, batch_size
        self.truncate, self.sliding_window, self.window_stride = truncate, sliding_window, window_stride
        self.progress = progress
        # P(replaced) = sigma(scale * s + bias) for an export with a calibration, else sigma(s)
        self.calibration: Calibration | None = backend.calibration

    @classmethod
    def from_dir(cls, model_dir: str | Path, backend: str = "auto", **kwargs) -> Scorer:
        return cls(load_backend(model_dir, backend), **kwargs)

    def encode(self, texts: Sequence[str], start_index: int = 0) -> list[Encoded]:
        return encode(self.tokenizer, texts, self.max_length, truncate=self.truncate,
                      sliding_window=self.sliding_window, window_stride=self.window_stride, start_index=start_index)

    def logits(self, encoded: Sequence[Encoded]) -> list[np.ndarray]:
        return run_logits(self.backend, encoded, max_batch_tokens=self.max_batch_tokens,
                          batch_size=self.batch_size, progress=self.progress)

    def score(self, texts: Sequence[str], method: str | None = None, per_token: bool = False,
              start_index: int = 0) -> list[TextScore]:
        """`method` (default: this backend's first, electric or cloze) of each text."""
        method = method or self.methods[0]
        if method in MLM_METHODS:
            raise ValueError(f"method {method!r} needs a masked LM (MaskedLMScorer), not a {self.backend.kind} model")
        if method not in self.methods:
            raise ValueError(f"method {method!r} does not apply to a {self.backend.kind} model (it gives "
                             f"{', '.join(self.methods)})")
        enc = self.encode(texts, start_index)
        return [score_row(e, row, method, per_token, self.calibration) for e, row in zip(enc, self.logits(enc),
                                                                                          strict=True)]

    def detect(self, texts: Sequence[str], start_index: int = 0) -> list[Detection]:
        if self.backend.kind != "discriminator":
            raise ValueError(f"replaced-token detection needs a discriminator, not a {self.backend.kind} model")
        enc = self.encode(texts, start_index)
        return [electra_detect(e, row, self.calibration) for e, row in zip(enc, self.logits(enc), strict=True)]


# ---- classic MLM pseudo-log-likelihood (the model and its log-probs: electric.inference.masked_lm) ----------


class MaskedLMScorer:
    """Classic MLM pseudo-log-likelihood for any local masked-LM directory (torch)."""

    def __init__(self, model_dir: str | Path, *, device: str | None = None,
                 max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, batch_size: int = DEFAULT_BATCH_SIZE,
                 truncate: bool = False, sliding_window: bool = False, window_stride: int | None = None,
                 progress: bool = False):
        self.model, self.tokenizer = load_masked_lm(model_dir, device)
        self.max_length = int(getattr(self.model.config, "max_position_embeddings", 512))
        if self.model.config.model_type in ("roberta", "xlm-roberta", "camembert"):
            self.max_length -= 2  # RoBERTa position ids start after the padding index
        self.max_batch_tokens, self.batch_size = max_batch_tokens, batch_size
        self.truncate, self.sliding_window, self.window_stride = truncate, sliding_window, window_stride
        self.progress = progress

    def encode(self, texts: Sequence[str], start_index: int = 0) -> list[Encoded]:
        return encode(self.tokenizer, texts, self.max_length, truncate=self.truncate,
                      sliding_window=self.sliding_window, window_stride=self.window_stride, start_index=start_index)

    def token_logprobs(self, encoded: Sequence[Encoded], word_l2r: bool = False) -> list[np.ndarray]:
        return mlm_token_logprobs(self.model, encoded, mask_id=self.tokenizer.mask_token_id,
                                  pad_id=self.tokenizer.pad_token_id, word_l2r=word_l2r,
                                  max_batch_tokens=self.max_batch_tokens, batch_size=self.batch_size,
                                  progress=self.progress)

    def score(self, texts: Sequence[str], method: str = "mlm-pll", per_token: bool = False,
              start_index: int = 0) -> list[TextScore]:
        if method not in MLM_METHODS:
            raise ValueError(f"MaskedLMScorer computes {MLM_METHODS}, not {method!r}")
        enc = self.encode(texts, start_index)
        lps = self.token_logprobs(enc, word_l2r=method == "mlm-pll-word-l2r")
        return [token_scores_to_text_score(e, lp, method, per_token) for e, lp in zip(enc, lps, strict=True)]


# ---- loading by method ---------------------------------------------------------------------------------


def model_dir_for_method(path: str | Path, method: str) -> Path:
    """A model directory for `method`: `path` itself, or inside a pretraining run directory
    RUN/discriminator (electric, electra) or RUN/generator (cloze, mlm-pll) (`electric.checkpoint.resolve_model_dir`
    with the part the method needs)."""
    d = require_local_dir(path, "model")
    sub = "generator" if method in MLM_METHODS + CLOZE_METHODS else "discriminator"
    return resolve_model_dir(d, (sub,), missing=f"run directory {str(d)!r} has no {sub}/ for --method {method}")


def only_method(model: str | Path) -> str | None:
    """The one method a model directory can be scored by, or None when it has several or says none: an export's
    manifest names its methods (`scoring_methods`), a checkpoint's config.json its kind (METHODS_OF_KIND). Only
    Electric's cloze model, or its export, has one (cloze); a discriminator has two (electric, electra), a run
    directory holds two models. Nothing is loaded."""
    d = Path(model)
    try:
        if (d / MANIFEST).is_file():
            methods: Sequence[str] = ExportManifest.read(d).scoring_methods
        elif (d / "config.json").is_file():
            archs = read_config(d).get("architectures") or []
            methods = next((METHODS_OF_KIND.get(ARCHITECTURE_KINDS[a], ()) for a in archs if a in ARCHITECTURE_KINDS),
                           ())
        else:
            return None
    except (OSError, ValueError):  # unreadable: loading it says why
        return None
    return methods[0] if len(methods) == 1 and methods[0] in METHODS else None


def check_model_dir(model: str | Path, method: str, backend: str = "auto") -> Path:
    """The model directory for `method` (`model_dir_for_method`), checked from its config.json alone (no model is
    loaded, torch is not imported): a masked LM for mlm-pll methods, Electric's cloze model (a checkpoint or its
    export) for cloze, a discriminator for the others."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} (one of {', '.join(METHODS)})")
    d = model_dir_for_method(model, method)
    if method in MLM_METHODS:
        if backend not in ("auto", "torch"):
            raise ValueError(f"--method {method} runs on torch only (got --backend {backend})")
        return check_masked_lm_config(d)
    if not (d / "config.json").is_file():
        return d
    archs = read_config(d).get("architectures") or []
    cloze = "ElectricForClozeLM" in archs
    if method in CLOZE_METHODS and not cloze:
        use = "--method mlm-pll for a masked LM" if any(a.endswith("ForMaskedLM") for a in archs) else \
            "--method electric or electra for a discriminator"
        raise CheckpointError(f"{str(d)!r} holds a {archs[0] if archs else 'model without architectures'}, not "
                              "Electric's cloze model; --method cloze needs an ElectricForClozeLM directory (RUN/generator "
                              f"of an `--objective electric` run, or its `electric export`); use {use}")
    if method in DISCRIMINATOR_METHODS and cloze:
        raise CheckpointError(f"{str(d)!r} holds Electric's cloze model (ElectricForClozeLM), not a discriminator; "
                              f"score it with --method cloze, or point --method {method} at RUN/discriminator")
    if method in DISCRIMINATOR_METHODS and any(a.endswith("ForMaskedLM") for a in archs):
        raise CheckpointError(f"{str(d)!r} holds a {archs[0]}, not a discriminator; --method {method} needs "
                              "an ElectraForPreTraining directory (e.g. RUN/discriminator); use --method mlm-pll "
                              "for a masked LM")
    return d


def load_scorer(model: str | Path, method: str = "electric", backend: str = "auto", device: str | None = None,
                **kwargs) -> Scorer | MaskedLMScorer:
    """A scorer for `method` from a model or run directory (see `model_dir_for_method`): a `Scorer` over a discriminator
    or a cloze model (torch or ONNX), a `MaskedLMScorer` for mlm-pll; `kwargs` go to the scorer (max_batch_tokens,
    batch_size, truncate, sliding_window, progress)."""
    d = check_model_dir(model, method, backend)
    if method in MLM_METHODS:
        return MaskedLMScorer(d, device=device, **kwargs)
    try:
        be = load_backend(d, backend, **({"device": device} if device else {}))
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("electric.inference.runtime"):
            raise CheckpointError("the ONNX backend (electric.inference.runtime) is not available in this installation; "
                                  "use --backend torch") from e
        raise
    return Scorer(be, **kwargs)

