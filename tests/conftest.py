"""Shared fixtures: real text from ../shared/data and tiny models built here (never downloaded)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from electric.shared_data import shared_data_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = shared_data_dir()
# CI sets this (.ci/run): a missing ../shared/data fails the run instead of skipping most of the suite
REQUIRE_SHARED_DATA = os.environ.get("ELECTRIC_REQUIRE_SHARED_DATA", "") not in ("", "0")


def pytest_configure(config):
    if REQUIRE_SHARED_DATA and not SHARED_DATA.is_dir():
        raise pytest.UsageError(f"ELECTRIC_REQUIRE_SHARED_DATA is set but the shared data directory {SHARED_DATA} "
                                "does not exist: put the project's data there or set ELECTRIC_SHARED_DATA")


# Fixtures that train a model, export ONNX or start a server (in-process or not). A test that uses one, directly or
# through another fixture, is an integration test: `pytest -m "not integration"` (the fast tier) leaves it out.
# A test that does one of these things in its own body carries `@pytest.mark.integration` itself.
INTEGRATION_FIXTURES = {
    "trained_run",  # a debug-preset pretraining run
    "server",  # a running server (`http` and `channel` below reach it)
    "models", "onnx_dir", "onnx_dirs", "exported", "cloze_export", "electric_export", "electra_export",  # ONNX exports
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if INTEGRATION_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.integration)


def manifest_values(**changes) -> dict:
    """The keys of an electric.json as `electric export` writes them for a discriminator (format_version 1), with
    `changes`: for tests of what reads a manifest, without exporting a model."""
    values = {
        "format": "electric-onnx", "format_version": 1, "kind": "discriminator", "architecture": "ElectraForPreTraining",
        "labels": None, "problem_type": None, "max_length": 128, "trained_length": 64,
        "trained_length_from": "max_seq_length of run/config.json", "opset": 17,
        "precision": {"cpu": "fp32", "cuda": "fp32"}, "int8_method": None, "files": {"fp32": "model.onnx"},
        "inputs": ["input_ids", "attention_mask", "token_type_ids"], "output": "logits",
        "output_meaning": "(B, T) discriminator logits s_t", "scoring_methods": ["electric", "electra"],
        "source": {"path": "/runs/x/discriminator", "sha256": "0" * 64},
        "exporter": {"name": "torch.onnx TorchScript (dynamo=False)", "attn_implementation": "eager"},
        "versions": {"electric": "0.1.0", "onnxruntime": "1.20.0"}, "onnxruntime": "1.20.0",
        "parity": {"sentences": 4, "fp32": {"max_abs_diff": 1e-6, "tolerance": 1e-4}},
        "training_health": None, "calibration": {"scale": 0.5, "bias": -1.0}, "created": "2026-11-28T17:17:19+0000",
    }
    return {**values, **changes}


def require_shared(rel: str) -> Path:
    p = SHARED_DATA / rel
    if not p.exists():
        if REQUIRE_SHARED_DATA:
            pytest.fail(f"{p} is missing and ELECTRIC_REQUIRE_SHARED_DATA is set", pytrace=False)
        pytest.skip(f"{p} is not available (set ELECTRIC_SHARED_DATA)")
    return p


@pytest.fixture(scope="module")
def one_thread():
    """Many tiny forward passes: one torch thread is faster and steadier than two on a shared 2-core machine.
    Use with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return require_shared("")


@pytest.fixture(scope="session")
def wiki_sample(tmp_path_factory) -> Path:
    """The first ~1,500 lines of one enwiki WikiExtractor file (a few dozen articles)."""
    src = require_shared("corpus/enwiki/wiki_00")
    dst = tmp_path_factory.mktemp("wiki") / "wiki_sample"
    with open(src, encoding="utf-8") as f:
        lines = list(itertools.islice(f, 1500))
    # end on a closed document
    while not lines[-1].startswith("</doc>"):
        lines.pop()
    dst.write_text("".join(lines), encoding="utf-8")
    return dst


@pytest.fixture(scope="session")
def tokenizer_dir(wiki_sample, tmp_path_factory) -> Path:
    """A 2,000-piece lower-cased WordPiece tokenizer trained on wiki_sample."""
    from training.tokenizer import train_tokenizer

    out = tmp_path_factory.mktemp("tok") / "tok"
    train_tokenizer([str(wiki_sample)], vocab_size=2000, out=out)
    return out


def save_random_electra(model_class: str, tokenizer_dir: Path, out: Path, hidden: int = 64,
                        positions: int = 128) -> Path:
    """A random-weight transformers ELECTRA model (2 layers, `positions` positions) of `model_class`, saved with the
    tokenizer."""
    import torch
    import transformers
    from transformers import AutoTokenizer, ElectraConfig

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    cfg = ElectraConfig(vocab_size=len(tok), embedding_size=32, hidden_size=hidden, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=positions,
                        pad_token_id=tok.pad_token_id)
    getattr(transformers, model_class)(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def disc_dir(tokenizer_dir, tmp_path_factory) -> Path:
    """A random-weight ElectraForPreTraining (hidden 64, 2 layers) saved with the tokenizer."""
    return save_random_electra("ElectraForPreTraining", tokenizer_dir, tmp_path_factory.mktemp("disc") / "discriminator")


@pytest.fixture(scope="session")
def mlm_dir(tokenizer_dir, tmp_path_factory) -> Path:
    """A random-weight ElectraForMaskedLM (hidden 64, 2 layers) saved with the tokenizer."""
    return save_random_electra("ElectraForMaskedLM", tokenizer_dir, tmp_path_factory.mktemp("mlm") / "generator")


def save_random_cloze(tokenizer_dir: Path, out: Path, hidden: int = 32) -> Path:
    """A random-weight Electric two-tower cloze model (ElectricForClozeLM, 2 layers a tower), saved with the
    tokenizer, as an Electric run saves RUN/generator."""
    import torch
    from transformers import AutoTokenizer

    from electric.modeling.cloze import ElectricClozeConfig, ElectricForClozeLM

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    cfg = ElectricClozeConfig(vocab_size=len(tok), embedding_size=32, hidden_size=hidden, num_hidden_layers=2,
                              num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=128,
                              pad_token_id=tok.pad_token_id)
    ElectricForClozeLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def cloze_run(disc_dir, tokenizer_dir, tmp_path_factory) -> Path:
    """A pretraining run directory as an Electric run leaves it: RUN/discriminator (random ElectraForPreTraining)
    and RUN/generator (random two-tower cloze model), both with the tokenizer."""
    import shutil

    run = tmp_path_factory.mktemp("cloze-run") / "electric-random"
    shutil.copytree(disc_dir, run / "discriminator")
    save_random_cloze(tokenizer_dir, run / "generator")
    return run


@pytest.fixture(scope="session")
def trained_run(wiki_sample, tokenizer_dir, tmp_path_factory) -> Path:
    """A real (debug-preset, 30-step) Electric pretraining run: OUT/discriminator, OUT/generator, ..."""
    from training.pretrain import main

    out = tmp_path_factory.mktemp("run") / "electric-debug"
    rc = main(["--objective", "electric", "--preset", "debug", "--data", str(wiki_sample), "--tokenizer",
               str(tokenizer_dir), "--out", str(out), "--max-steps", "30", "--num-proc", "1"])
    assert rc == 0
    return out


# ---- servers: a test module defines a `server` fixture (a running BackgroundServer); these reach it ------------
# (what server tests share besides: tests/server/helpers.py)

@pytest.fixture(scope="module")
def http(server):
    import httpx

    from tests.server.helpers import AUTH

    with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def channel(server):
    import grpc

    with grpc.insecure_channel(server.grpc_target) as ch:
        yield ch
