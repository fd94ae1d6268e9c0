"""One line, never a traceback (issue 30, item 9): a bad argument or an output that cannot be written stops
`python -m training.pretrain`, `electric export` and `electric serve` with one line on stderr naming the cause
(exit status 2 for a bad argument, 1 for what the machine refuses), before any training, export or loading."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # each case starts a Python process that imports torch or the server

REPO = Path(__file__).resolve().parents[1]
UNWRITABLE = "/proc/nope"  # a virtual file system: nothing can be made there, not even by root


def run(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", *map(str, args)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def one_line(p: subprocess.CompletedProcess, status: int, *words: str) -> str:
    """The process's one stderr line, checked: the exit status, no traceback, the words that name the cause."""
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr[-3000:]
    assert p.returncode == status, p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def pretrain(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("a line of text to train on\n" * 10)

    def pretrain(*args):
        return run("training.pretrain", "--preset", "debug", "--data", text, "--tokenizer", tmp_path / "no-tok", *args)
    return pretrain


@pytest.mark.parametrize("flag, value, words", [
    ("--lr", "-1", ("lr -1.0", "> 0")),
    ("--lr", "nan", ("lr nan",)),
    ("--log-every", "0", ("log_every 0", "at least 1")),
    ("--dropout", "1.5", ("hidden_dropout_prob 1.5", "[0, 1)")),
    ("--threads", "-2", ("threads", "-2")),
])
def test_pretrain_refuses_a_bad_value_in_one_line_and_writes_nothing(pretrain, tmp_path, flag, value, words):
    one_line(pretrain("--out", tmp_path / "run", flag, value), 2, *words)
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_pretrain_names_an_output_it_cannot_create(pretrain, tmp_path):
    one_line(pretrain("--out", f"{UNWRITABLE}/run"), 2, "--out", UNWRITABLE, "cannot be created")
    (tmp_path / "a-file").write_text("")
    one_line(pretrain("--out", tmp_path / "a-file" / "run"), 2, "--out", "a-file", "cannot be created")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_export_names_an_output_it_cannot_create(disc_dir):
    one_line(run("electric.cli", "export", "--model", disc_dir, "--out", f"{UNWRITABLE}/x"), 1,
             "--out", UNWRITABLE, "cannot be created")


def test_serve_names_a_model_that_is_not_there(tmp_path):
    one_line(run("electric.cli", "serve", "--model", tmp_path / "nope", "--http-port", "0", "--grpc-port", "-1"), 2,
             "model", "nope", "does not exist")
    one_line(run("electric.cli", "serve", "--classifier", f"sst2={tmp_path / 'gone'}", "--http-port", "0",
                 "--grpc-port", "-1"), 2, "--classifier sst2", "does not exist")


@pytest.mark.parametrize("busy", ["--http-port", "--grpc-port"])
def test_serve_names_a_port_in_use(disc_dir, busy):
    with socket.socket() as held, socket.socket() as spare:
        held.bind(("127.0.0.1", 0))
        held.listen()
        spare.bind(("127.0.0.1", 0))
        port, other = held.getsockname()[1], spare.getsockname()[1]
        spare.close()
        ports = {"--http-port": port, "--grpc-port": other} if busy == "--http-port" else \
            {"--http-port": other, "--grpc-port": port}
        p = run("electric.cli", "serve", "--model", disc_dir, *(x for kv in ports.items() for x in map(str, kv)))
    one_line(p, 1, f"{busy} {port}", "in use")
