"""Issue 30, item 4: serve only what the model learned. A model trained on 32-token sequences with a 128-position
table is exported with its training length in the manifest, and the library, `electric score`'s Scorer and the
server take 32 tokens per input by default (longer inputs truncated or refused); max_tokens_per_input serves more
on purpose, up to the table; an export made before the manifest recorded the length keeps the whole table and says
so at start-up.
"""

from __future__ import annotations

import json
import logging
import shutil

import grpc
import httpx
import pytest
from conftest import save_random_electra

from electric.checkpoint import FINETUNE_CONFIG, MANIFEST, CheckpointError, trained_length
from electric.grpc_gen.electric.v1 import electric_pb2 as pb
from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc
from electric.inference.backend import TorchBackend, load_backend
from electric.inference.encoding import InputTooLongError
from electric.inference.scoring import Scorer
from server.app import BackgroundServer
from server.settings import Settings
from tests.server.helpers import AUTH, GRPC_AUTH, KEY

pytestmark = pytest.mark.usefixtures("one_thread")

TRAINED, TABLE = 32, 128
LONG = " ".join(["the committee will meet again next week"] * 8)  # about 60 tokens: over TRAINED, under TABLE


@pytest.fixture(scope="module")
def short_run(tokenizer_dir, tmp_path_factory):
    """A pretraining run directory trained (so its config.json says) on 32-token sequences, whose discriminator
    has a 128-position table."""
    from electric.pretraining.config import PretrainConfig

    run = tmp_path_factory.mktemp("short-run") / "electric"
    save_random_electra("ElectraForPreTraining", tokenizer_dir, run / "discriminator")
    PretrainConfig(max_seq_length=TRAINED).save(run / "config.json")
    return run


def n_tokens(backend, text: str) -> int:
    return len(backend.tokenizer.backend_tokenizer.encode(text).ids)


# ---- the training length of a checkpoint ----------------------------------------------------------------

def test_the_training_length_comes_from_the_run_else_the_position_table(short_run, disc_dir, tmp_path):
    config = json.loads((short_run / "discriminator" / "config.json").read_text())
    assert trained_length(short_run / "discriminator", config) == (
        TRAINED, f"max_seq_length of {(short_run / 'config.json').resolve()}")
    length, source = trained_length(disc_dir, config)  # a checkpoint from elsewhere: no training config beside it
    assert length == TABLE and source.startswith("max_position_embeddings of")
    tuned = shutil.copytree(disc_dir, tmp_path / "tuned")
    (tuned / FINETUNE_CONFIG).write_text(json.dumps({"max_seq_length": 64}))
    assert trained_length(tuned, config)[0] == 64  # a fine-tuned model: its fine-tuning length
    (tuned / FINETUNE_CONFIG).write_text(json.dumps({"max_seq_length": 4096}))
    assert trained_length(tuned, config)[0] == TABLE  # never more than the table
    (tuned / FINETUNE_CONFIG).write_text(json.dumps({"max_seq_length": "long"}))
    with pytest.raises(CheckpointError, match="max_seq_length 'long'"):
        trained_length(tuned, config)


def test_the_library_scores_the_trained_length_by_default_and_more_on_request(short_run):
    backend = TorchBackend(short_run / "discriminator", device="cpu")
    assert (backend.max_length, backend.max_positions) == (TRAINED, TABLE)
    assert TRAINED < n_tokens(backend, LONG) < TABLE
    with pytest.raises(InputTooLongError, match=f"more than the model's maximum of {TRAINED}\\b"):
        Scorer(backend).score([LONG])
    cut = Scorer(backend, truncate=True).score([LONG])[0]
    assert cut.truncated and cut.num_tokens == TRAINED - 2
    whole = Scorer(backend, max_length=TABLE).score([LONG])[0]
    assert not whole.truncated and whole.num_tokens == n_tokens(backend, LONG) - 2
    with pytest.raises(ValueError, match=f"the model's {TABLE} positions"):
        Scorer(backend, max_length=TABLE + 1)


def test_electric_score_scores_the_trained_length_by_default(short_run, tmp_path, capsys):
    from electric.cli import main

    src = tmp_path / "in.txt"
    src.write_text(f"a short one\n{LONG}\n")
    rc = main(["score", "--model", str(short_run), "--quiet", str(src)])
    assert rc == 2 and f"more than the model's maximum of {TRAINED} " in capsys.readouterr().err
    assert main(["score", "--model", str(short_run), "--quiet", "--truncate", str(src)]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[1])["num_tokens"] == TRAINED - 2


# ---- the export and the server ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def short_export(short_run, tmp_path_factory):
    from electric.export.exporter import export_model

    out = tmp_path_factory.mktemp("short-export") / "onnx"
    export_model(short_run / "discriminator", out, log=lambda *_: None)
    return out


@pytest.fixture(scope="module")
def old_export(short_export, tmp_path_factory):
    """The same export as one made before the manifest recorded the training length."""
    old = shutil.copytree(short_export, tmp_path_factory.mktemp("old-export") / "onnx")
    manifest = json.loads((old / MANIFEST).read_text())
    del manifest["trained_length"], manifest["trained_length_from"]
    (old / MANIFEST).write_text(json.dumps(manifest))
    return old


def test_the_manifest_records_the_training_length(short_export, short_run, old_export):
    m = json.loads((short_export / MANIFEST).read_text())
    assert (m["max_length"], m["trained_length"]) == (TABLE, TRAINED)
    assert m["trained_length_from"] == f"max_seq_length of {(short_run / 'config.json').resolve()}"
    backend = load_backend(short_export)
    assert (backend.max_length, backend.max_positions) == (TRAINED, TABLE)
    with pytest.raises(CheckpointError, match="lacks 'trained_length': re-export"):
        load_backend(old_export)


def serve(model, **settings) -> BackgroundServer:
    return BackgroundServer(Settings(model=model, http_port=0, grpc_port=0, api_key=KEY, threads=1, warmup=False,
                                     access_log=False, **settings))


def limits(srv: BackgroundServer) -> tuple[int, int, int, int]:
    info = httpx.get(f"{srv.url}/info", headers=AUTH).json()
    m = info["models"][0]
    return m["max_length"], m["trained_length"], m["max_positions"], info["limits"]["max_tokens_per_input"]


def test_the_server_serves_the_trained_length_by_default(short_export, caplog):
    caplog.set_level(logging.INFO, logger="electric.server")
    with serve(short_export) as srv:
        assert limits(srv) == (TRAINED, TRAINED, TABLE, TRAINED)
        info = pb_grpc.InfoStub(grpc.insecure_channel(srv.grpc_target)).GetInfo(pb.InfoRequest(), metadata=GRPC_AUTH)
        assert (info.models[0].max_length, info.models[0].trained_length, info.models[0].max_positions) == (
            TRAINED, TRAINED, TABLE)
        r = httpx.post(f"{srv.url}/v1/score", json={"texts": ["a short one", LONG]}, headers=AUTH)
        assert r.status_code == 422 and r.json()["error"].startswith("input 1 has ")
        assert f"more than the limit of {TRAINED}" in r.json()["error"]
        r = httpx.post(f"{srv.url}/v1/score", json={"texts": [LONG], "truncate": True}, headers=AUTH)
        assert r.status_code == 200 and r.json()["results"][0]["truncated"]
        assert r.json()["results"][0]["num_tokens"] == TRAINED - 2
    assert any(f"serving up to {TRAINED} tokens an input (the model's default {TRAINED}: max_seq_length of" in m
               for m in caplog.messages)


def test_max_tokens_per_input_serves_untrained_positions_on_purpose(short_export, caplog):
    caplog.set_level(logging.INFO, logger="electric.server")
    with serve(short_export, max_tokens_per_input=TABLE) as srv:
        assert limits(srv) == (TABLE, TRAINED, TABLE, TABLE)
        r = httpx.post(f"{srv.url}/v1/score", json={"texts": [LONG]}, headers=AUTH)
        assert r.status_code == 200 and not r.json()["results"][0].get("truncated")
        assert r.json()["results"][0]["num_tokens"] > TRAINED
    assert any(f"past the {TRAINED} it was trained on (max_tokens_per_input): positions {TRAINED + 1}-{TABLE} were "
               "never trained" in m for m in caplog.messages)


