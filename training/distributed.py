"""Distributed pretraining the plain PyTorch way: rank, world size and device from torchrun's environment.

One node or several (`torchrun --nnodes N --rdzv-backend c10d ...`, docs/scale.md): RANK is the process's place in
the whole job, GROUP_RANK its node's, LOCAL_RANK its place on the node (which GPU it drives)."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

import torch
import torch.distributed as dist


class Dist:
    """Rank, world size and device, from torchrun's environment (one process when absent)."""

    def __init__(self, device: str | None):
        self.rank = int(os.environ.get("RANK", 0))
        self.world = int(os.environ.get("WORLD_SIZE", 1))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.node = int(os.environ.get("GROUP_RANK", 0))  # the node's rank: c10d numbers the nodes by address
        if device is None:
            device = f"cuda:{self.local_rank}" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:  # --device cuda: this process's GPU
            self.device = torch.device("cuda", self.local_rank)  # (torch.cuda.set_device refuses a bare "cuda")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.world > 1:
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def __str__(self) -> str:
        return (f"rank {self.rank} of {self.world} (node {self.node}, local rank {self.local_rank}, "
                f"{socket.gethostname()}, {self.device})")

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    @contextlib.contextmanager
    def leaders_first(self) -> Iterator[None]:
        """Run the body on rank 0 first (it fills the caches; on a filesystem all nodes share, the rest read them),
        then on each other node's local rank 0 (each fills its own node's cache), then on every other rank.
        Every rank passes two barriers, so a body that raises still releases the others."""
        turn = 0 if self.main else 1 if self.local_rank == 0 else 2
        for _ in range(turn):
            self.barrier()
        try:
            yield
        finally:
            for _ in range(2 - turn):
                self.barrier()

    def any(self, flag: bool) -> bool:
        """True on every rank if it is True on any rank."""
        if self.world == 1:
            return flag
        t = torch.tensor([float(flag)], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def average(self, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each scalar's mean over the ranks (one all-reduce; call it on every rank, with the same keys)."""
        if self.world == 1 or not values:
            return values
        keys = sorted(values)
        t = torch.stack([values[k].detach().float().reshape(()) for k in keys]).to(self.device)  # (K,)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return dict(zip(keys, t / self.world, strict=True))

    def broadcast_int(self, value: int) -> int:
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.long, device=self.device)
        dist.broadcast(t, src=0)
        return int(t.item())

    def close(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()
