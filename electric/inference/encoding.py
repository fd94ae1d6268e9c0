"""Text -> token windows: the Rust tokenizer, truncation that never tokenizes more than it keeps, sliding windows;
text pairs as fine-tuning encodes them; many callers' inputs in one call of the batch encoder (`encode_requests`).

The first step of every scoring path (`electric.inference.scoring` batches and scores what this returns; the
server's batcher encodes each round of requests with `encode_requests`)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


class InputTooLongError(ValueError):
    """A text has more tokens than the model accepts and neither truncation nor a sliding window was asked for."""

    def __init__(self, index: int, num_tokens: int, max_length: int, at_least: bool = False):
        # at_least: only a prefix of the text was tokenised (encode_capped), num_tokens is a lower bound
        self.index, self.num_tokens, self.max_length, self.at_least = index, num_tokens, max_length, at_least
        super().__init__(f"input {index} has {self.describe()}; ask for truncation (--truncate) or a sliding window "
                         "(--sliding-window)")

    def describe(self, limit: str = "the model's maximum") -> str:
        """What the text has against `limit` (a name): `700 tokens ([CLS] and [SEP] included), more than the model's
        maximum of 512`; when only a prefix was tokenised, the count stopped past the limit and says so: `more than
        the model's maximum of 128 tokens ([CLS] and [SEP] included; counting stopped at 144)`."""
        if self.at_least:
            return (f"more than {limit} of {self.max_length} tokens ([CLS] and [SEP] included; counting stopped at "
                    f"{self.num_tokens})")
        return f"{self.num_tokens} tokens ([CLS] and [SEP] included), more than {limit} of {self.max_length}"


# ---- 1. encoding -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """Rows of a long text: content positions [start, end) of the full sequence run as
    [CLS] ids[start:end] [SEP]; this window's logits are kept for positions [keep_start, keep_end)."""

    start: int
    end: int
    keep_start: int
    keep_end: int


@dataclass
class Encoded:
    """One tokenised text. Arrays are over the full sequence [CLS] t_1 ... t_n [SEP] (T = n + 2)."""

    index: int  # position of the text in the caller's input (used in error messages)
    text: str
    input_ids: np.ndarray  # (T,) int64
    offsets: np.ndarray  # (T, 2) int64 character spans in `text`; (0, 0) for [CLS]/[SEP]
    candidates: np.ndarray  # (T,) bool: neither special nor padding
    word_ids: list[int | None]  # (T,) word index of each piece (None for specials)
    tokens: list[str]  # (T,) the pieces, e.g. "[CLS]", "hell", "##o"
    num_input_tokens: int  # T before truncation
    truncated: bool = False
    windows: list[Window] | None = None  # None: the whole sequence is one row
    cls_id: int = 0
    sep_id: int = 0

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_candidates(self) -> int:
        return int(self.candidates.sum())

    def rows(self) -> list[np.ndarray]:
        """The model inputs for this text: one (T,) row, or one row per window."""
        if self.windows is None:
            return [self.input_ids]
        cls, sep = np.array([self.cls_id]), np.array([self.sep_id])
        return [np.concatenate([cls, self.input_ids[w.start:w.end], sep]) for w in self.windows]

    def row_position(self, pos: int) -> tuple[int, int]:
        """(row index, position in that row) whose logits are used for full-sequence position `pos`."""
        if self.windows is None:
            return 0, pos
        for k, w in enumerate(self.windows):
            if w.keep_start <= pos < w.keep_end:
                return k, pos - w.start + 1
        if pos == 0:
            return 0, 0
        last = len(self.windows) - 1
        return last, self.windows[last].end - self.windows[last].start + 1  # [SEP]

    def stitch(self, row_logits: Sequence[np.ndarray]) -> np.ndarray:
        """Per-row outputs (each (len(row),) or longer, padded) -> one (T,) row over the full sequence."""
        if self.windows is None:
            return np.asarray(row_logits[0][: self.length])
        out = np.empty(self.length, dtype=np.asarray(row_logits[0]).dtype)
        out[0] = row_logits[0][0]
        for w, r in zip(self.windows, row_logits, strict=True):
            out[w.keep_start:w.keep_end] = r[w.keep_start - w.start + 1: w.keep_end - w.start + 1]
        last = self.windows[-1]
        out[-1] = row_logits[-1][last.end - last.start + 1]
        return out


def _windows(n: int, width: int, stride: int) -> list[Window]:
    """Windows of `width` content tokens every `stride` over content positions 1..n (the last one is
    aligned to the end); each position keeps the logits of the window where it is most central."""
    if n <= width:
        return [Window(1, n + 1, 1, n + 1)]
    starts = list(range(0, n - width, stride)) + [n - width]
    bounds = [0] + [(s1 + s0 + width) // 2 for s0, s1 in zip(starts, starts[1:], strict=False)] + [n]
    return [Window(s + 1, s + width + 1, lo + 1, hi + 1) for s, lo, hi in zip(starts, bounds, bounds[1:], strict=False)]


_RUST_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def rust_tokenizer(tokenizer, max_length: int | None = None):
    """The `tokenizers.Tokenizer` (Rust) behind a fast transformers tokenizer or a `WordPieceTokenizer`, as
    `tokenizer(texts, truncation=False)` runs it but without that call's Python wrapper: a private copy with no
    truncation and no padding (so settings another caller leaves on the shared one never apply), made once per
    tokenizer. With `max_length`: a copy that truncates longest-first to that many tokens, as
    `tokenizer(a, b, truncation="longest_first", max_length=max_length)` does. `encode_batch` may be called from
    several threads.

    Typed text is text: the copy never matches a special token's string in the input ("[SEP]" in a text is
    `[`, `sep`, `]`, as "[sep]" is), so the only special ids of an encoding are the [CLS]/[SEP] its post-processor
    adds - as `tokenizer(texts, split_special_tokens=True)` does. A text without such strings encodes as before."""
    copies = _RUST_TOKENIZERS.setdefault(tokenizer, {})
    rust = copies.get(max_length)
    if rust is None:
        from tokenizers import Tokenizer

        rust = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        if max_length is None:
            rust.no_truncation()
        else:
            rust.enable_truncation(max_length, stride=0, strategy="longest_first", direction="right")
        rust.no_padding()
        rust.encode_special_tokens = True  # special tokens' strings in the input are split as ordinary text
        copies[max_length] = rust
    return rust


CAP_CHARS_PER_TOKEN = 6  # encode_capped's first prefix: this many characters per token the model can keep


def _whole_word_tokens(e) -> int:
    """Content tokens of encoding `e` that belong to a word before its last one (a prefix cut leaves those as the
    whole text tokenises them: normalisation and pre-tokenisation are local; only the cut word may differ)."""
    words = [w for w in e.word_ids if w is not None]
    return sum(1 for w in words if w < words[-1]) if words else 0


def encode_capped(rust, texts: Sequence[str], max_length: int) -> tuple[list, list[bool]]:
    """Rust batch encodings of `texts` (with [CLS]/[SEP]) that never tokenise much more of a text than the
    `max_length` tokens a model can keep: a long text is first encoded on a prefix of CAP_CHARS_PER_TOKEN *
    max_length characters, doubled until the prefix has max_length - 1 tokens of whole words (then its first
    max_length - 1 tokens are the whole text's and the text is over the limit) or is the whole text.
    Returns (encodings, cut): cut[i] is True when encodings[i] is of a prefix of texts[i]. A text of n characters
    costs O(min(n, chars of max_length tokens)) except when its tokens are sparse (e.g. mostly characters the
    normaliser drops), where it costs at most one tokenisation of the whole text, which yields few tokens."""
    out: list = [None] * len(texts)
    cut = [False] * len(texts)
    size = CAP_CHARS_PER_TOKEN * max_length
    todo = list(range(len(texts)))
    while todo:
        encodings = rust.encode_batch([texts[i][:size] for i in todo], add_special_tokens=True)
        later = []
        for i, e in zip(todo, encodings, strict=True):
            if len(texts[i]) <= size:
                out[i] = e
            elif _whole_word_tokens(e) >= max_length - 1:
                out[i], cut[i] = e, True
            else:
                later.append(i)
        todo, size = later, size * 2
    return out, cut


def from_encoding(e, text: str, index: int, max_length: int, *, truncate: bool = False,
                  window_stride: int | None = None, cls_id: int = 0, sep_id: int = 0, cut: bool = False) -> Encoded:
    """One `Encoded` from the Rust tokenizer's encoding `e` of `text` (with [CLS]/[SEP]). Longer than
    `max_length` tokens: `truncate` keeps the first max_length - 2 pieces, a `window_stride` makes windows of
    max_length - 2 pieces every that many (see `encode`), neither raises `InputTooLongError` naming `index`.
    `cut`: `e` encodes only a prefix of `text` (`encode_capped`), which is over the limit; no windows then."""
    ids = np.asarray(e.ids, dtype=np.int64)
    offsets = np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2)
    special = np.asarray(e.special_tokens_mask, dtype=bool)
    word_ids, tokens = e.word_ids, e.tokens
    n_tok = len(ids)
    truncated, windows = False, None
    if n_tok > max_length:
        if truncate:
            keep = list(range(max_length - 1)) + [n_tok - 1]
            ids, offsets, special = ids[keep], offsets[keep], special[keep]
            word_ids, tokens = [word_ids[k] for k in keep], [tokens[k] for k in keep]
            truncated = True
        elif window_stride is not None and not cut:
            windows = _windows(n_tok - 2, max_length - 2, window_stride)
        else:
            raise InputTooLongError(index, n_tok, max_length, at_least=cut)
    return Encoded(index=index, text=text, input_ids=ids, offsets=offsets, candidates=~special, word_ids=word_ids,
                   tokens=tokens, num_input_tokens=n_tok, truncated=truncated, windows=windows, cls_id=cls_id,
                   sep_id=sep_id)


def encode(tokenizer, texts: Sequence[str], max_length: int, *, truncate: bool = False,
           sliding_window: bool = False, window_stride: int | None = None, start_index: int = 0) -> list[Encoded]:
    """Tokenise `texts` (a fast BERT/ELECTRA tokenizer) into `Encoded` items, with one call of the Rust
    batch encoder (`rust_tokenizer`).

    A text longer than `max_length` tokens raises `InputTooLongError` (naming `start_index + i`) unless
    `truncate` (keep the first max_length - 2 pieces) or `sliding_window` (windows of max_length - 2 pieces
    every `window_stride`, default half a window; each piece is scored once, with the most context).
    """
    if truncate and sliding_window:
        raise ValueError("truncate and sliding_window exclude each other")
    if max_length < 3:
        raise ValueError(f"max_length must be at least 3, got {max_length}")
    if not getattr(tokenizer, "is_fast", False):
        from electric.checkpoint import (
            CheckpointError,  # here: the checkpoint's pydantic models cost a start 0.1 s
        )

        raise CheckpointError("scoring needs a fast tokenizer (tokenizer.json or vocab.txt loaded by load_tokenizer)")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"input {start_index + i} is a {type(t).__name__}, expected a string")
    width = max_length - 2
    stride = window_stride or max(1, width // 2)
    if not 1 <= stride <= width:
        raise ValueError(f"window_stride must be between 1 and {width}, got {stride}")
    if not texts:
        return []
    rust = rust_tokenizer(tokenizer)
    if sliding_window:  # every token is scored: the whole text
        encodings, cut = rust.encode_batch(list(texts), add_special_tokens=True), [False] * len(texts)
    else:  # at most max_length tokens are kept: never tokenise much more (encode_capped)
        encodings, cut = encode_capped(rust, texts, max_length)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    return [from_encoding(e, text, start_index + i, max_length, truncate=truncate,
                          window_stride=stride if sliding_window else None, cls_id=cls_id, sep_id=sep_id, cut=c)
            for i, (text, e, c) in enumerate(zip(texts, encodings, cut, strict=True))]



# ---- 2. text pairs, and many requests in one call ----------------------------------------------------


@dataclass
class PairEncoded:
    """A text pair: [CLS] a [SEP] b [SEP] with token type ids 0 / 1 (as the fine-tuning tokenizer makes it)."""

    index: int
    input_ids: np.ndarray  # (T,) int64
    token_type_ids: np.ndarray  # (T,) int64
    truncated: bool = False
    blank_side: int | None = None  # 0 or 1: a side the tokenizer kept nothing of (refused, as a blank text is)

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])


def encode_requests(tokenizer, requests: Sequence[tuple[Sequence[str | tuple[str, str]], bool]],
                    max_length: int) -> list[list[Encoded | PairEncoded] | InputTooLongError]:
    """Tokenise the inputs of many requests - each (inputs, truncate), the inputs all texts or all (a, b)
    pairs - with ONE call of the Rust batch encoder. Per request: its `Encoded` / `PairEncoded` items, or
    the `InputTooLongError` of its first input over `max_length` tokens when it did not ask to truncate.
    Texts are encoded as `encode` does them (truncation keeps the first pieces); pairs as fine-tuning does (token
    type ids 0 / 1, longest-first truncation)."""
    flat = [x if isinstance(x, str) else tuple(x) for inputs, _ in requests for x in inputs]
    encodings, cut = _encode_capped_inputs(rust_tokenizer(tokenizer), flat, max_length)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    out: list = []
    k = 0
    for inputs, truncate in requests:
        mine, k = zip(encodings[k: k + len(inputs)], cut[k: k + len(inputs)], strict=True), k + len(inputs)
        try:
            out.append([from_encoding(e, x, i, max_length, truncate=truncate, cls_id=cls_id, sep_id=sep_id, cut=c)
                        if isinstance(x, str) else
                        pair_from_encoding(tokenizer, e, c or x, i, max_length, truncate, c is not None)
                        for i, (x, (e, c)) in enumerate(zip(inputs, mine, strict=True))])
        except InputTooLongError as err:
            out.append(err)
    return out


def _encode_capped_inputs(rust, flat: list, max_length: int) -> tuple[list, list]:
    """Encodings of texts and pairs that never tokenise much more of a long text than `max_length` tokens
    (`encode_capped`). A text's cut is True when only its prefix was encoded; a pair's is the pair it encoded
    (each side cut where `encode_capped` cut it: past max_length - 1 whole-word tokens), or None when whole."""
    encodings: list = [None] * len(flat)
    cut: list = [None] * len(flat)
    texts = [k for k, x in enumerate(flat) if isinstance(x, str)]
    if texts:
        for k, e, c in zip(texts, *encode_capped(rust, [flat[k] for k in texts], max_length), strict=True):
            encodings[k], cut[k] = e, c
    pairs = [k for k, x in enumerate(flat) if not isinstance(x, str)]
    if pairs:
        sides, side_cut = encode_capped(rust, [s for k in pairs for s in flat[k]], max_length)
        for j, k in enumerate(pairs):
            a, b = (s[: e.offsets[-2][1]] if c else s for s, e, c in zip(flat[k], sides[2 * j: 2 * j + 2],
                                                                         side_cut[2 * j: 2 * j + 2], strict=True))
            if (a, b) != flat[k]:
                flat[k] = cut[k] = (a, b)
        for k, e in zip(pairs, rust.encode_batch([flat[k] for k in pairs], add_special_tokens=True), strict=True):
            encodings[k] = e
    return encodings, cut


def pair_from_encoding(tokenizer, e, pair: tuple[str, str], index: int, max_length: int, truncate: bool,
                       cut: bool = False) -> PairEncoded:
    """One `PairEncoded` from the Rust tokenizer's encoding `e` of `pair`; `cut`: `pair`'s sides are cut prefixes of
    the input's (`_encode_capped_inputs`). Longest-first truncation of cut sides equals that of the whole ones, but
    for which side gets the odd token when both were cut. Longer than `max_length` tokens without `truncate`:
    `InputTooLongError` naming `index`."""
    ids, tt, truncated = e.ids, e.type_ids, False
    kept = {side for side, special in zip(tt, e.special_tokens_mask, strict=True) if not special}
    blank_side = next((side for side in (0, 1) if side not in kept), None)
    if len(ids) > max_length:
        if not truncate:
            raise InputTooLongError(index, len(ids), max_length, at_least=cut)
        whole = rust_tokenizer(tokenizer, max_length).encode(pair[0], pair[1], add_special_tokens=True)
        ids, tt, truncated = whole.ids, whole.type_ids, True
    return PairEncoded(index, np.asarray(ids, dtype=np.int64), np.asarray(tt, dtype=np.int64), truncated, blank_side)
