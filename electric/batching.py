"""Rows of token ids -> batches: the one home of padding and of the length-bucketing rules.

- `pad_rows`/`pad_values`: rows of different lengths -> a (B, T) array (and its attention mask), every caller
  (scoring, the server's batches, pretraining and fine-tuning collation via `torch.from_numpy`);
- `pad_columns`: an already-padded (B, T) batch -> (B, T') with T' >= T (the ONNX runtime's shape buckets);
- `plan_batches`: offline batching (`electric score`, fine-tuning evaluation): rows sorted by length, cut by a
  row count and a padded-token budget;
- `length_bucket`: the bucket (a number) of an input's length, by which the server's online batcher groups
  queued inputs: powers of two (it must take the oldest first, so it cannot sort);
- `round_up_to_bucket`: a batch's longest length rounded up to the padded length T' the ONNX runtime runs it at
  (a multiple of 8 on CPU, a few fixed lengths on CUDA) so that it sees few distinct shapes; a backend's
  `padded_length(T)` says it, so that the server pads each batch once, straight to T';
- `progress_bar`: a tqdm bar over offline batches when asked for (scoring, MLM PLL).

NumPy only, so serving, training and the benchmarks share it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

DEFAULT_MAX_BATCH_TOKENS = 8192
DEFAULT_BATCH_SIZE = 64
CPU_BUCKET_STEP = 8  # CPU: round T up to a multiple of 8 (cheap, and keeps GEMM rows aligned)
CUDA_BUCKETS = (16, 32, 64, 128, 192, 256, 384, 512)  # CUDA: a few fixed lengths


def pad_values(rows: Sequence[Sequence[int]], value: int, length: int | None = None) -> np.ndarray:
    """Rows of ints -> (B, T) int64 filled with `value` after each row; T = `length` or the longest row."""
    T = max(len(r) for r in rows) if length is None else length
    out = np.full((len(rows), T), value, dtype=np.int64)
    for b, r in enumerate(rows):
        out[b, : len(r)] = r
    return out


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int, length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ids -> (input_ids, attention_mask), both (B, T) int64; T = `length` or the longest row."""
    ids = pad_values(rows, pad_id, length)
    mask = np.zeros_like(ids)
    for b, r in enumerate(rows):
        mask[b, : len(r)] = 1
    return ids, mask


def pad_columns(a: np.ndarray, length: int, value: int) -> np.ndarray:
    """A (B, T) batch -> (B, length) int64, the new columns filled with `value` (the same array when T == length)."""
    a = np.ascontiguousarray(a, dtype=np.int64)
    if a.shape[1] == length:
        return a
    out = np.full((a.shape[0], length), value, dtype=np.int64)
    out[:, : a.shape[1]] = a
    return out


def plan_batches(lengths: Sequence[int], *, max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
                 batch_size: int = DEFAULT_BATCH_SIZE) -> list[list[int]]:
    """Group row indices into batches: sorted by length (bucketing), at most `batch_size` rows and at most
    `max_batch_tokens` padded tokens (rows x longest row) each; a row longer than the budget goes alone."""
    if batch_size < 1 or max_batch_tokens < 1:
        raise ValueError(f"batch_size and max_batch_tokens must be positive, got {batch_size}, {max_batch_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        if cur and (len(cur) + 1 > batch_size or (len(cur) + 1) * lengths[i] > max_batch_tokens):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def length_bucket(length: int) -> int:
    """The server batcher's bucket of an input of `length` tokens: ceil(log2(length)), lengths <= 16 sharing one."""
    return max(4, math.ceil(math.log2(max(length, 1))))


def round_up_to_bucket(length: int, max_length: int, on_cuda: bool) -> int:
    """The padded length for a batch whose longest row has `length` tokens: the next of the runtime's shape
    buckets (never above max_length, nor below `length`)."""
    if on_cuda:
        bucket = next((b for b in CUDA_BUCKETS if b >= length), length)
    else:
        bucket = -(-length // CPU_BUCKET_STEP) * CPU_BUCKET_STEP
    return max(length, min(bucket, max_length))


def progress_bar(it, enabled: bool, unit: str, total: int | None = None):
    """`it` behind a tqdm bar when `enabled` (tqdm imported only then), else `it` itself."""
    if not enabled:
        return it
    from tqdm.auto import tqdm

    return tqdm(it, unit=unit, total=total, leave=False, dynamic_ncols=True)
