"""`electric serve` / `python -m server`: settings from flags and ELECTRIC_* variables, and a real process
that serves, logs one JSON line per request and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from server.settings import Settings
from tests.server.helpers import free_port, wait_ready

REPO = Path(__file__).resolve().parents[2]


def parse(argv: list[str]) -> Settings:
    from electric.cli import build_parser
    from server.cli import settings_from_args

    return settings_from_args(build_parser().parse_args(["serve", *argv]))


def test_every_setting_is_a_flag_and_an_environment_variable(monkeypatch):
    from electric.cli import build_parser

    help_text = build_parser()._subparsers._group_actions[0].choices["serve"].format_help()
    for name in Settings.model_fields:
        assert f"ELECTRIC_{name.upper()}" in help_text
    monkeypatch.setenv("ELECTRIC_MODEL", "/models/scorer")
    monkeypatch.setenv("ELECTRIC_HTTP_PORT", "9000")
    monkeypatch.setenv("ELECTRIC_MAX_INPUTS_PER_REQUEST", "5")
    monkeypatch.setenv("ELECTRIC_CLASSIFIERS", "sst2=/models/sst2,cola=/models/cola")
    monkeypatch.setenv("ELECTRIC_WARMUP", "false")
    s = parse(["--max-inputs-per-request", "3"])  # a flag wins over the environment
    assert (str(s.model), s.http_port, s.max_inputs_per_request, s.warmup) == ("/models/scorer", 9000, 3, False)
    assert {k: str(v) for k, v in s.classifiers.items()} == {"sst2": "/models/sst2", "cola": "/models/cola"}
    s = parse(["--classifier", "a=/x", "--classifier", "b=/y", "--no-warmup", "--api-key", "k"])
    assert set(s.classifiers) == {"a", "b"} and s.api_key.get_secret_value() == "k"
    monkeypatch.setenv("ELECTRIC_CLASSIFIERS", '{"mrpc": "/models/mrpc"}')
    assert set(parse([]).classifiers) == {"mrpc"}


@pytest.mark.parametrize("argv, words", [
    (["--classifier", "nodir"], "NAME=DIR"),
    (["--http-port", "http"], "valid integer"),
    (["--max-tokens-per-input", "9000"], "max_batch_tokens"),
])
def test_bad_settings_are_explained(argv, words, monkeypatch, capsys):
    from server.cli import main

    monkeypatch.setenv("ELECTRIC_MODEL", "/models/scorer")
    assert main(argv) == 2
    assert words in capsys.readouterr().err


def test_rerank_weights_come_from_a_report_as_is_and_flags_win(tmp_path, monkeypatch, capsys):
    from server.cli import main

    monkeypatch.setenv("ELECTRIC_MODEL", "/models/scorer")
    report = tmp_path / "report.json"  # what `electric rerank --report` writes (the parts the server reads)
    report.write_text(json.dumps({"metric": "wer", "applied": "no_lm", "lm_score": "mean", "weights": {
        "lm": 0.0, "length": 0.5, "beta": 1.0, "prior": "none", "piece": -1.25, "lm_score": "mean"}}))
    s = parse(["--rerank-weights", str(report)])
    assert s.rerank_defaults().to_dict() == {"lm": 0.0, "length": 0.5, "beta": 1.0, "prior": "none", "piece": -1.25,
                                             "lm_score": "mean", "ngram": 0.0}
    assert parse(["--rerank-weights", str(report), "--lm-weight", "2"]).rerank_defaults().lm == 2.0
    partial = tmp_path / "partial.json"  # the report's top-level "lm_score" is not the weights': they keep theirs
    partial.write_text(json.dumps({"lm_score": "mean", "weights": {"lm": 3.0, "length": 0.0}}))
    assert (parse(["--rerank-weights", str(partial)]).rerank_defaults().lm_score, parse([]).lm_score) == ("sum", "sum")
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"lm": 0.25, "pieces": 1.0}))
    assert main(["--rerank-weights", str(bare)]) == 2
    assert "'pieces'" in capsys.readouterr().err
    assert main(["--rerank-weights", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err


def test_nothing_to_serve_is_an_error(monkeypatch, capsys):
    from server.cli import main

    monkeypatch.delenv("ELECTRIC_MODEL", raising=False)
    monkeypatch.delenv("ELECTRIC_CLASSIFIERS", raising=False)
    assert main([]) == 2 and "nothing to serve" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_scorer(tmp_path_factory):
    """A random-weight ElectraForPreTraining (hidden 32) with a WordPiece tokenizer trained on 300 lines."""
    from itertools import islice

    import torch
    from conftest import require_shared
    from transformers import ElectraConfig, ElectraForPreTraining

    from training.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("cli-model")
    with open(require_shared("corpus/enwiki/wiki_01"), encoding="utf-8") as f:
        (root / "text.txt").write_text("".join(islice(f, 300)), encoding="utf-8")
    tok, _ = train_tokenizer([str(root / "text.txt")], vocab_size=600, out=root / "tok")
    torch.manual_seed(0)
    cfg = ElectraConfig(vocab_size=len(tok), embedding_size=16, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                        pad_token_id=tok.pad_token_id)
    out = root / "run" / "discriminator"  # a run directory: the server finds RUN/discriminator
    ElectraForPreTraining(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out.parent


@pytest.mark.integration
@pytest.mark.parametrize("event_loop, runs_on", [("auto", "uvloop"), ("asyncio", "asyncio")])
def test_a_real_process_serves_logs_and_stops_on_sigterm(tiny_scorer, event_loop, runs_on):
    http_port, grpc_port = free_port(), free_port()
    env = {**os.environ, "ELECTRIC_MODEL": str(tiny_scorer), "ELECTRIC_HTTP_PORT": str(http_port),
           "ELECTRIC_GRPC_PORT": str(grpc_port), "ELECTRIC_MAX_INPUTS_PER_REQUEST": "5", "PYTHONUNBUFFERED": "1",
           "ELECTRIC_EVENT_LOOP": event_loop}
    proc = subprocess.Popen([sys.executable, "-m", "electric.cli", "serve", "--max-inputs-per-request", "3"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{http_port}"
    try:
        wait_ready(proc, url)
        assert httpx.get(f"{url}/info").json()["limits"]["max_inputs_per_request"] == 3
        r = httpx.post(f"{url}/v1/score", json={"texts": ["the cat sat on the mat"]})
        assert r.status_code == 200 and r.json()["results"][0]["num_tokens"] > 0
        assert httpx.post(f"{url}/v1/score", json={"texts": ["a"] * 4}).status_code == 413
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, err[-3000:]
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    access = [x for x in lines if x.get("route") == "/v1/score"]
    assert [x["status"] for x in access] == [200, 413]
    assert access[0]["inputs"] == 1 and access[0]["total_ms"] > 0 and "queue_ms" in access[0]
    assert access[1]["error_type"] == "payload_too_large"
    assert f"event loop: {runs_on}" in [x.get("msg") for x in lines]  # uvloop is a dependency: auto takes it
    assert "Traceback" not in err


def test_the_event_loop_is_uvloop_when_installed_and_a_missing_one_is_explained(monkeypatch, capsys):
    import asyncio

    from server.app import event_loop_factory

    assert event_loop_factory("asyncio") is asyncio.new_event_loop
    assert event_loop_factory("auto").__module__.startswith("uvloop")
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if it were not installed
    assert event_loop_factory("auto") is asyncio.new_event_loop
    with pytest.raises(ValueError, match="pip install uvloop"):
        event_loop_factory("uvloop")
    from electric.cli import build_parser
    from server.cli import run

    assert run(build_parser().parse_args(["serve", "--model", "/nowhere", "--event-loop", "uvloop"])) == 2
    assert "uvloop is not installed" in capsys.readouterr().err


def test_configure_logging_leaves_no_global_state_and_follows_stderr(monkeypatch):
    """The server's log handlers write to the stderr of the moment (never to a stream a test's capture has
    closed), and leaving the block puts the loggers back as they were."""
    import io
    import logging

    from server.cli import SERVER_LOGGERS, configure_logging

    before = {n: (logging.getLogger(n).handlers[:], logging.getLogger(n).level, logging.getLogger(n).propagate)
              for n in SERVER_LOGGERS}
    converter = logging.Formatter.converter
    with configure_logging("info"):
        first, second = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "stderr", first)
        logging.getLogger("electric.server").info("one")
        first.close()  # what pytest does to a test's captured stderr
        monkeypatch.setattr(sys, "stderr", second)
        logging.getLogger("electric.access").info('{"route": "/v1/score"}')
        logging.getLogger("electric.server").info("two")
        assert second.getvalue().splitlines()[0] == '{"route": "/v1/score"}' and '"msg":"two"' in second.getvalue()
    after = {n: (logging.getLogger(n).handlers[:], logging.getLogger(n).level, logging.getLogger(n).propagate)
             for n in SERVER_LOGGERS}
    assert after == before and logging.Formatter.converter is converter
