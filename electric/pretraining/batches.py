"""Training batches: seeded per-epoch shuffles sharded by rank, padding, and each micro-step's randomness."""

from __future__ import annotations

import torch

from electric.batching import pad_rows
from electric.pretraining.data import DataError


class Batches:
    """Seeded per-epoch shuffles of the training set, sharded by rank; resumable by (epoch, index)."""

    def __init__(self, ds, batch_size: int, pad_id: int, seed: int, rank: int, world: int):
        self.ds, self.batch_size, self.pad_id, self.seed = ds, batch_size, pad_id, seed
        # whole global micro-batches (world x batch_size sequences) per epoch, so every rank takes as many steps
        self.rank, self.world, self.per_rank = rank, world, len(ds) // (world * batch_size) * batch_size
        if self.per_rank < batch_size:
            raise DataError(f"only {len(ds)} training sequences for {world} process(es); need at least "
                            f"{batch_size * world} for one micro-batch of {batch_size} each: give more text, or a "
                            "smaller --batch-size")
        self.epoch, self.index = 0, 0
        self.tokens_read = 0  # non-padding tokens this process has read since it started (not saved)
        self._perm: tuple[int, torch.Tensor] | None = None  # (epoch, this rank's order), drawn once per epoch

    @property
    def epoch_fraction(self) -> float:
        return self.epoch + self.index / self.per_rank

    def _order(self) -> torch.Tensor:
        if self._perm is None or self._perm[0] != self.epoch:
            g = torch.Generator().manual_seed(self.seed * 1000 + self.epoch)
            perm = torch.randperm(len(self.ds), generator=g)[: self.per_rank * self.world]
            # the k-th global micro-batch is perm's k-th block of world x batch_size; this rank reads its slot of
            # each, so a slot holds the same rows however the global batch is split over processes and micro-steps
            order = perm.view(-1, self.world, self.batch_size)[:, self.rank].reshape(-1)
            self._perm = (self.epoch, order)
        return self._perm[1]

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.index + self.batch_size > self.per_rank:
            self.epoch, self.index = self.epoch + 1, 0
        rows = self._order()[self.index: self.index + self.batch_size].tolist()
        self.index += self.batch_size
        ids, mask = collate(self.ds[rows]["input_ids"], self.pad_id)
        self.tokens_read += int(mask.sum())
        return ids, mask

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, s: dict) -> None:
        self.epoch, self.index = s["epoch"], s["index"]


def collate(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = pad_rows(rows, pad_id)  # (B, T) int64 each
    return torch.from_numpy(ids), torch.from_numpy(mask)


def step_rng(seed: int, step: int, slot: int, device: torch.device) -> torch.Generator:
    """Masking and sampling randomness of one micro-batch: a pure function of (seed, step, slot), where slot is
    the micro-batch's place in the step's global batch (micro-step x processes + rank). With `Batches`' slots, N
    processes accumulating A micro-steps take the same steps as one process accumulating N x A (dropout aside)."""
    g = torch.Generator(device=device)
    g.manual_seed((seed * 1_000_003 + step) * 10_007 + slot * 101)
    return g
