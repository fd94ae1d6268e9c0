"""Pretraining on two nodes: `torchrun --nnodes 2` with c10d rendezvous, both launchers on this machine (gloo).

The distributed run must take the same steps as one process that accumulates the same global batch: `Batches`
gives each rank a slot of every global micro-batch and `step_rng` draws a slot's masks from its place in the
global batch, so N processes x A micro-steps equal 1 process x N*A micro-steps (dropout off; it draws from each
process's own generator)."""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import datasets
import pytest
import torch
from safetensors.torch import load_file

from electric.pretraining.batches import Batches, step_rng
from training.distributed import Dist

REPO = Path(__file__).resolve().parents[1]
RANK_LINE = re.compile(r"^rank (\d+) of 2 \(node (\d+), local rank 0, [^)]*\): steps (\d+)-(\d+), ([\d,]+) tokens "
                       r"read from its shard$", re.M)


def test_a_slot_holds_the_same_rows_however_the_global_batch_is_split():
    ds = datasets.Dataset.from_dict({"input_ids": [[5, i + 10] for i in range(23)]})
    one = Batches(ds, 2, 0, seed=3, rank=0, world=1)
    two = [Batches(ds, 2, 0, seed=3, rank=r, world=2) for r in range(2)]
    assert two[0].per_rank == 10  # 23 rows: 5 whole global micro-batches of 2 x 2
    for _ in range(5):  # the first epoch: the single process's micro-batches alternate between the ranks' slots
        for b in two:
            assert torch.equal(b.next()[0], one.next()[0])
    assert two[0].epoch_fraction == 1.0
    assert two[0].tokens_read == two[1].tokens_read == 5 * 2 * 2
    # a slot's masks depend on its place in the global batch, not on which process draws them
    a = torch.rand(4, generator=step_rng(1, 7, 3, torch.device("cpu")))
    assert torch.equal(a, torch.rand(4, generator=step_rng(1, 7, 3, torch.device("cpu"))))
    assert not torch.equal(a, torch.rand(4, generator=step_rng(1, 7, 2, torch.device("cpu"))))


def test_a_bare_cuda_device_is_this_processs_own_gpu(monkeypatch):
    set_to = []
    monkeypatch.setattr(torch.cuda, "set_device", set_to.append)  # no GPU needed: only the index is checked
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert Dist("cuda").device == torch.device("cuda", 1) and set_to == [torch.device("cuda", 1)]
    assert Dist("cuda:0").device == torch.device("cuda", 0)


def test_leaders_first_runs_rank_0_then_the_other_nodes_leaders_then_the_rest():
    """Three ranks on two nodes (rank 1 is node 0's second process, rank 2 node 1's first), as threads."""
    barrier, order = threading.Barrier(3, timeout=30), []

    def rank(r: int, local: int) -> None:
        d = Dist.__new__(Dist)
        d.rank, d.local_rank, d.world = r, local, 3
        d.barrier = barrier.wait
        with d.leaders_first():
            order.append(r)
        barrier.wait()  # every rank passed the same number of barriers

    threads = [threading.Thread(target=rank, args=a) for a in ((1, 1), (2, 0), (0, 0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert order == [0, 2, 1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def started(cmds: list[list[str]], env: dict) -> Iterator[list[subprocess.Popen]]:
    """Start each command in its own session; on the way out, kill whatever is still running (even on failure)."""
    procs: list[subprocess.Popen] = []
    try:
        for cmd in cmds:
            procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, start_new_session=True))
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.communicate()


def two_nodes(args: list[str]) -> list[tuple[int, str, str]]:
    """Two torchrun launchers of one node and one process each, meeting at a c10d rendezvous on this machine:
    each launcher's (exit status, stdout, stderr)."""
    endpoint, run_id = f"127.0.0.1:{free_port()}", uuid.uuid4().hex[:8]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
                "--rdzv-conf", "join_timeout=120", "-m", "training.pretrain", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    with started([launcher, launcher], env) as procs:
        results = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=600)
            results.append((p.returncode, stdout, stderr))
    for rc, _, stderr in results:
        assert rc == 0, stderr[-3000:]
    return results


def rank_lines(results: list[tuple[int, str, str]]) -> list[tuple[int, int, int, int, int]]:
    """Each launcher's one account of its process: (rank, node, first step, last step, tokens read)."""
    found = []
    for _, _, stderr in results:
        lines = RANK_LINE.findall(stderr)
        assert len(lines) == 1, stderr[-3000:]
        found.append(tuple(int(v.replace(",", "")) for v in lines[0]))
    return sorted(found)


def train_rows(out: Path) -> list[dict]:
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_two_nodes_train_checkpoint_resume_and_match_one_process(wiki_sample, tokenizer_dir, tmp_path):
    common = ["--objective", "electra", "--preset", "debug", "--data", str(wiki_sample), "--tokenizer",
              str(tokenizer_dir), "--max-steps", "6", "--batch-size", "4", "--dropout", "0", "--num-proc", "1",
              "--log-every", "1", "--eval-every", "3"]
    nodes, single = tmp_path / "two-nodes", tmp_path / "one-process"

    # two nodes x 2 sequences, stopped with a checkpoint at step 3 ...
    first = two_nodes([*common, "--out", str(nodes), "--stop-at", "3"])
    # the rendezvous numbered the launchers' nodes 0 and 1, and each one's rank stepped
    assert [(r, n, a, b) for r, n, a, b, _ in rank_lines(first)] == [(0, 0, 1, 3), (1, 1, 1, 3)]
    assert all(tokens > 0 for *_, tokens in rank_lines(first)), "each rank read its own shard"
    assert sum(stdout.count("stopped after 3 steps") for _, stdout, _ in first) == 1, "only rank 0 reports"
    assert torch.load(nodes / "state" / "trainer.pt", weights_only=False)["step"] == 3
    # ... and both launchers started again continue from it
    resumed = two_nodes(["--resume", "--out", str(nodes), "--data", str(wiki_sample)])
    assert [(r, a, b) for r, _, a, b, _ in rank_lines(resumed)] == [(0, 4, 6), (1, 4, 6)]
    assert [r["step"] for r in train_rows(nodes)] == [1, 2, 3, 4, 5, 6]

    # one process, the same global batch of 4 in two micro-steps of 2 (one thread, like each rank: the same sums)
    p = subprocess.run([sys.executable, "-m", "training.pretrain", *common, "--out", str(single), "--grad-accum", "2"],
                       cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]

    # the logged loss is the global batch's (averaged over the ranks), step for step the single process's
    loss_diff = 0.0
    for a, b in zip(train_rows(nodes), train_rows(single), strict=True):
        assert a["tokens"] == b["tokens"]
        for key in ("loss", "gen_loss", "disc_loss"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-5), (a["step"], key)
            loss_diff = max(loss_diff, abs(a[key] - b[key]))
    weight_diff = 0.0
    for name in ("discriminator", "generator"):
        a = load_file(nodes / name / "model.safetensors")
        b = load_file(single / name / "model.safetensors")
        assert a.keys() == b.keys()
        weight_diff = max(weight_diff, *((a[k] - b[k]).abs().max().item() for k in a))
    assert weight_diff < 1e-5, f"the weights differ by up to {weight_diff:.2e}"
    print(f"two nodes vs one process: logged losses differ by up to {loss_diff:.1e}, weights by {weight_diff:.1e}")


def test_a_run_resumes_only_with_the_number_of_processes_that_checkpointed_it(wiki_sample, tokenizer_dir, tmp_path,
                                                                              capsys):
    from training.pretrain import main

    out = tmp_path / "run"
    assert main(["--objective", "mlm", "--preset", "debug", "--data", str(wiki_sample), "--tokenizer",
                 str(tokenizer_dir), "--out", str(out), "--max-steps", "4", "--stop-at", "2", "--num-proc", "1"]) == 0
    state = torch.load(out / "state" / "trainer.pt", weights_only=False)
    assert state["processes"] == 1
    torch.save({**state, "processes": 2}, out / "state" / "trainer.pt")  # as if two ranks had written it
    assert main(["--resume", "--out", str(out), "--data", str(wiki_sample)]) == 2
    assert "checkpointed by 2 processes, this run has 1" in capsys.readouterr().err
