"""`--server URL` on `electric score`, `rerank`, `eval nbest` and `eval blimp`: the same records, lists and reports as
`--model` on the export the server serves (scores within the export's parity: other batches, other sums), on real
text; the server's refusals as one line naming the file's line; and Ctrl-C leaving no half-written output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, require_shared

from electric.cli import main
from tests.server.helpers import KEY, free_port, metric

ODD_LINES = ["", "\u200b\u200b", "show me flights to denver"]  # blank, nothing the tokenizer keeps, a sentence


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def within_parity(a: object, b: object, tolerance: float, tokens: int = 1) -> bool:
    """`a` equals `b`, floats within the export's parity `tolerance` a token (a sum: `tokens` times it)."""
    if isinstance(a, dict) and isinstance(b, dict):
        n = int(b.get("num_tokens") or 1)
        return a.keys() == b.keys() and all(within_parity(a[k], b[k], tolerance, n if k in ("score", "mean")
                                                          else 1) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(within_parity(x, y, tolerance, tokens) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= tolerance * tokens
    return a == b


@pytest.fixture(scope="module")
def onnx_dir(disc_dir, tmp_path_factory) -> Path:
    pytest.importorskip("onnx")
    from electric.export.exporter import export_model

    out = tmp_path_factory.mktemp("cli-server-onnx") / "onnx"
    export_model(disc_dir, out, log=lambda _: None)
    return out


@pytest.fixture(scope="module")
def tolerance(onnx_dir) -> float:
    return json.loads((onnx_dir / "electric.json").read_text())["parity"]["fp32"]["tolerance"]


@pytest.fixture(scope="module")
def server(onnx_dir):
    from server.app import BackgroundServer
    from server.settings import Settings

    settings = Settings(model=onnx_dir, http_port=0, grpc_port=0, threads=1, access_log=False, api_key=KEY,
                        max_inputs_per_request=32, max_input_chars=2000)
    with BackgroundServer(settings) as s:
        yield s


@pytest.fixture(scope="module")
def atis() -> list[dict]:
    return json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())[:40]


def test_score_rerank_and_eval_through_a_server_equal_the_local_ones(capsys, monkeypatch, server, onnx_dir, tolerance,
                                                                    atis, tmp_path):
    monkeypatch.setenv("ELECTRIC_API_KEY", KEY)  # the key as a user sets it
    text = tmp_path / "atis.txt"
    text.write_text("\n".join([u["output"] for u in atis] + ODD_LINES) + "\n", encoding="utf-8")
    grpc = f"grpc://{server.grpc_target}"
    for flags in ([], ["--per-token"], ["--method", "electra"], ["--method", "electra", "--per-token"]):
        rc, _, err = run(capsys, "score", "--model", onnx_dir, *flags, "--out", tmp_path / "local.jsonl", text)
        assert rc == 0, err
        local = jsonl(tmp_path / "local.jsonl")
        assert [r.get("error") is not None for r in local[-3:]] == [True, True, False]
        for url in (server.url, grpc):
            rc, _, err = run(capsys, "score", "--server", url, *flags, "--out", tmp_path / "served.jsonl", text)
            assert rc == 0, err
            served = jsonl(tmp_path / "served.jsonl")
            assert all(within_parity(a, b, tolerance) for a, b in zip(served, local, strict=True)), (flags, url)
            assert f"with {flags[1] if flags[:1] == ['--method'] else 'electric'} (the server at {url})" in err
            assert "note: 1 blank line" in err and "note: 1 line of" in err and "had no token to score" in err

    lists = tmp_path / "atis.json"
    lists.write_text(json.dumps(atis))
    for command in (["rerank", "--out", "{}.json", "--report", "{}.report.json"], ["eval", "nbest", "--json"]):
        outputs = {}
        for who, where in (("local", ["--model", onnx_dir]), ("served", ["--server", server.url])):
            argv = [a.format(tmp_path / who) for a in command]
            rc, out, err = run(capsys, *argv, *where, "--nbest", lists, "--dev-fraction", "0.5")
            assert rc == 0, err
            report = json.loads((tmp_path / f"{who}.report.json").read_text()) if command[0] == "rerank" else \
                json.loads(out)
            assert report.pop("model") == str(where[1])
            assert report.pop("out", str(tmp_path / f"{who}.json")) == str(tmp_path / f"{who}.json")
            outputs[who] = (report, (tmp_path / f"{who}.json").read_text() if command[0] == "rerank" else None)
        assert outputs["served"] == outputs["local"]  # the same choices, weights and error rates

    blimp = require_shared("blimp")
    reports = []
    for where in (["--model", onnx_dir], ["--server", grpc]):
        rc, out, err = run(capsys, "eval", "blimp", *where, "--data", blimp, "--limit", "20", "--json")
        assert rc == 0, err
        reports.append(json.loads(out))
        assert reports[-1].pop("model") == str(where[1])
    assert reports[1]["overall"] == reports[0]["overall"] and reports[1]["sets"] == reports[0]["sets"]


def test_what_the_server_refuses_is_one_line_naming_the_line(capsys, server, onnx_dir, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("a short line\n\nanother line\n" + "word " * 300 + "\n")
    common = ["--server", server.url, "--api-key", KEY, "--out", tmp_path / "out.jsonl", text]
    rc, _, err = run(capsys, "score", *common)
    local_rc, _, local_err = run(capsys, "score", "--model", onnx_dir, "--out", tmp_path / "out.jsonl", text)
    assert rc == local_rc == 2 and not (tmp_path / "out.jsonl").exists()
    # the line over the token limit, as the local command says it (without --sliding-window)
    assert err == local_err.replace(" or --sliding-window", "")
    assert err.startswith(f"electric score: error: {text}: line 4 has more than the model's maximum of 128 tokens")
    assert run(capsys, "score", *common, "--truncate")[0] == 0 and jsonl(tmp_path / "out.jsonl")[3]["truncated"]
    (tmp_path / "out.jsonl").unlink()
    text.write_text(text.read_text() + "x" * 2500 + "\n")
    rc, out, err = run(capsys, "score", *common, "--truncate")  # a line over max_input_chars, even truncated
    assert rc == 2 and len(err.splitlines()) == 1 and not (tmp_path / "out.jsonl").exists()
    assert err == (f"electric score: error: {text}: line 5 has 2500 characters, more than the limit of 2000 "
                   f"(max_input_chars), even with truncate (it begins 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...') "
                   f"({server.url}/v1/score)\n")
    for argv, says in (
            (["--api-key", "wrong"], f"{server.url}/info: 401 unauthorized: missing or wrong API key"),
            (["--api-key", KEY, "--sliding-window"], "--sliding-window: for a local --model"),
            (["--api-key", KEY, "--method", "mlm-pll"], f"--method mlm-pll: {server.url} scores with electric or "
                                                        "electra (the mlm-pll methods need a local --model)"),
            (["--api-key", KEY, "--ray", "local"], "--ray scores with a local export on a Ray cluster")):
        rc, out, err = run(capsys, "score", "--server", server.url, *argv, text)
        assert rc == 2 and out == "" and len(err.splitlines()) == 1 and says in err, err
    down = f"http://127.0.0.1:{free_port()}"
    rc, _, err = run(capsys, "score", "--server", down, text)
    assert rc == 2 and err.startswith(f"electric score: error: {down}/info: cannot connect") and \
        len(err.splitlines()) == 1


def test_ctrl_c_during_a_long_server_job_leaves_no_output_file(server, tmp_path):
    text = tmp_path / "many.txt"
    text.write_text("".join(f"show me flights number {i} from boston to denver on monday\n" for i in range(20000)))
    out = tmp_path / "scores.jsonl"
    scored = lambda: metric(server_metrics(server), "electric_requests_total", route="/v1/score",  # noqa: E731
                            transport="http")
    before = scored()
    env = {**os.environ, "ELECTRIC_API_KEY": KEY}
    proc = subprocess.Popen([sys.executable, "-m", "electric.cli", "score", "--server", server.url, "--quiet",
                             "--chunk-size", "256", "--out", str(out), str(text)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # as from a terminal, even when the tests run in the background (where a shell starts
                            # them ignoring SIGINT, and Python then leaves it ignored)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while scored() < before + 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.strip().endswith("electric score: interrupted"), err[-2000:]
    assert not out.exists() and list(tmp_path.glob(".scores.jsonl*")) == []


def server_metrics(server) -> str:
    import httpx

    return httpx.get(f"{server.url}/metrics").text


def test_the_next_chunk_is_scored_while_this_one_is_written_and_errors_come_in_their_turn():
    """`electric score --server` keeps the server busy between chunks (`one_ahead`): the next chunk's work has
    begun before the caller is done with this one; results come in order, an error at its own chunk's turn, and a
    caller that stops is not kept waiting."""
    import threading

    from electric.cli.common import one_ahead

    started = [threading.Event() for _ in range(5)]

    def work(i: int) -> int:
        started[i].set()
        if i == 3:
            raise ValueError("chunk 3 is refused")
        return 10 * i

    seen = []
    ahead = one_ahead(work, range(5))
    for i, result in ahead:
        if i + 1 < 5:
            assert started[i + 1].wait(5), f"chunk {i + 1} had not begun while chunk {i} was used"
        if i == 3:
            with pytest.raises(ValueError, match="chunk 3 is refused"):
                result()
            break
        seen.append(result())
    ahead.close()
    assert seen == [0, 10, 20]
    slow = threading.Event()
    stopped = one_ahead(lambda i: slow.wait(30), range(3))
    next(stopped)
    t0 = time.monotonic()
    stopped.close()  # its next item's work still running: left to finish unread
    assert time.monotonic() - t0 < 1
    slow.set()
