"""electric.inference.runtime: OnnxBackend equals the torch backend, picks providers/precision/threads, pads by bucket."""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from electric.batching import round_up_to_bucket  # noqa: E402
from electric.checkpoint import CheckpointError  # noqa: E402
from electric.evaluation.metrics import spearman  # noqa: E402
from electric.export.exporter import ExportOptions, export_model  # noqa: E402
from electric.inference import runtime as rt  # noqa: E402
from electric.inference.backend import Backend, TorchBackend, load_backend  # noqa: E402
from electric.inference.scoring import Scorer  # noqa: E402
from electric.tokenization import WordPieceTokenizer, load_tokenizer  # noqa: E402

HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.fixture(scope="module")
def onnx_dirs(disc_dir, tmp_path_factory) -> dict[str, Path]:
    """The discriminator exported twice: fp32 only, and fp32 + int8 + fp16. Its weights are random, so its int8
    ranks sentences at the parity gate's edge (Spearman 0.988-0.99x against 0.99): kept anyway (force); what these
    tests check is the runtime, and the ranking below."""
    root = tmp_path_factory.mktemp("rt")
    export_model(disc_dir, root / "fp32", log=lambda _: None)
    export_model(disc_dir, root / "int8", ExportOptions(quantize="int8", fp16=True, force=True), log=lambda _: None)
    return {"fp32": root / "fp32", "int8": root / "int8"}


@pytest.fixture(scope="module")
def sentences(wiki_sample) -> list[str]:
    """Real sentences of mixed length from the wiki sample."""
    out = []
    for line in wiki_sample.read_text(encoding="utf-8").splitlines():
        if line.startswith("<") or len(line) < 40:
            continue
        out.extend(s.strip() + "." for s in line.split(". ") if len(s.split()) >= 3)
        if len(out) >= 48:
            break
    return out[:48]


@functools.cache
def hf_tokenizer(model_dir: Path):
    return load_tokenizer(model_dir)


def encode(be, texts, max_length=128):
    """Padded batches made by the transformers tokenizer of `be`'s directory (an OnnxBackend's own tokenizer is
    the Rust one alone, for electric.inference.encoding.encode)."""
    enc = hf_tokenizer(be.model_dir)(texts, padding=True, truncation=True, max_length=max_length,
                                     return_tensors="np", return_special_tokens_mask=True)
    cand = enc["attention_mask"].astype(bool) & ~enc["special_tokens_mask"].astype(bool)
    return enc["input_ids"], enc["attention_mask"], cand


def pll(logits, cand):
    return -(logits * cand).sum(axis=1)  # (B,) Electric PLL from the backend's s_t


# ---- same results as torch ----------------------------------------------------------------------

def test_load_backend_picks_onnx_for_export_dirs(onnx_dirs, disc_dir):
    be = load_backend(onnx_dirs["fp32"])
    assert isinstance(be, rt.OnnxBackend)
    assert be.kind == "discriminator" and be.max_length == 128 and be.precision == "fp32"
    assert be.config["architectures"] == ["ElectraForPreTraining"]
    assert be.tokenizer.pad_token_id is not None and be.providers[-1] == "CPUExecutionProvider"
    assert isinstance(be.tokenizer, WordPieceTokenizer)  # from tokenizer.json, without transformers
    assert isinstance(load_backend(disc_dir), TorchBackend)
    assert isinstance(load_backend(onnx_dirs["fp32"], backend="onnx", device="cpu"), rt.OnnxBackend)


def test_fp32_logits_and_pll_match_torch(onnx_dirs, disc_dir, sentences):
    ref, be = TorchBackend(disc_dir, device="cpu"), load_backend(onnx_dirs["fp32"])
    for chunk in (sentences[:1], sentences[1:8], sentences[8:48]):  # different (B, T) each time
        ids, mask, cand = encode(be, chunk)
        got, want = be.run(ids, mask), ref.run(ids, mask)
        assert got.shape == want.shape == ids.shape and got.dtype == np.float32
        assert np.abs(got - want)[mask == 1].max() <= 1e-4
        np.testing.assert_allclose(pll(got, cand), pll(want, cand), rtol=1e-5, atol=1e-3)


def test_both_backends_have_everything_the_backend_protocol_declares(onnx_dirs, disc_dir):
    """What the server and scoring call on a backend is declared on Backend, and both backends have it."""
    declared = set(Backend.__annotations__) | {n for n, v in vars(Backend).items() if callable(v) and n[0] != "_"}
    assert {"runtime", "padded_length", "release_memory", "calibration", "max_length_from"} <= declared
    torch_be, onnx_be = TorchBackend(disc_dir, device="cpu"), load_backend(onnx_dirs["fp32"])
    for be in (torch_be, onnx_be):
        assert sorted(m for m in declared if not hasattr(be, m)) == [], type(be).__name__
    assert (torch_be.runtime, onnx_be.runtime) == ("torch", "onnx")
    assert [torch_be.padded_length(n) for n in (1, 13, 128)] == [1, 13, 128]  # torch runs a batch at its longest row
    assert [onnx_be.padded_length(n) for n in (1, 13, 128)] == [round_up_to_bucket(n, 128, on_cuda=onnx_be.runner.on_cuda)
                                                               for n in (1, 13, 128)]


def test_scorer_gives_the_same_scores_on_onnx(onnx_dirs, disc_dir, sentences):
    on_torch = Scorer.from_dir(disc_dir, backend="torch").score(sentences[:16])
    on_onnx = Scorer.from_dir(onnx_dirs["fp32"], backend="onnx").score(sentences[:16])
    np.testing.assert_allclose([s.score for s in on_onnx], [s.score for s in on_torch], rtol=1e-5, atol=1e-3)


def test_int8_is_the_cpu_default_and_ranks_like_fp32(onnx_dirs, sentences, monkeypatch):
    if HAS_CUDA:
        pytest.skip("the CPU default is tested on CPU-only machines")
    q = load_backend(onnx_dirs["int8"])
    f = load_backend(onnx_dirs["int8"], precision="fp32")
    assert q.precision == "int8" and f.precision == "fp32"
    monkeypatch.setenv(rt.PRECISION_ENV, "fp32")  # what `electric score --backend onnx` users can set
    assert load_backend(onnx_dirs["int8"]).precision == "fp32"
    assert q.runner.path.name == "model.int8.onnx"
    ids, mask, cand = encode(q, sentences)
    a, b = q.run(ids, mask), f.run(ids, mask)
    assert not np.array_equal(a, b)  # really the quantised graph
    assert spearman(pll(b, cand), pll(a, cand)) >= 0.98  # random weights; a trained model's: BENCHMARKS.md


# ---- providers, threads, buckets, IOBinding -----------------------------------------------------

def test_select_providers():
    assert rt.select_providers(None, ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    both = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert rt.select_providers(None, both) == both
    assert rt.select_providers(["CPUExecutionProvider"], both) == ["CPUExecutionProvider"]
    with pytest.warns(RuntimeWarning, match="not available"):
        assert rt.select_providers(both, ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]


@pytest.mark.skipif(HAS_CUDA, reason="checks the fallback on a machine without CUDA")
def test_asking_for_cuda_falls_back_to_cpu_and_says_so(onnx_dirs, sentences):
    with pytest.warns(RuntimeWarning, match="CUDAExecutionProvider"):
        be = load_backend(onnx_dirs["int8"], providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert be.providers == ["CPUExecutionProvider"]  # what the session really runs on
    assert be.precision == "int8" and not be.runner.on_cuda and not be.runner.io_binding
    with pytest.warns(RuntimeWarning):
        assert load_backend(onnx_dirs["int8"], device="cuda").providers == ["CPUExecutionProvider"]
    ids, mask, _ = encode(be, sentences[:4])
    assert be.run(ids, mask).shape == ids.shape
    assert "CPUExecutionProvider" in repr(be)


@pytest.mark.skipif(HAS_CUDA, reason="simulates onnxruntime-gpu without a usable GPU")
def test_cuda_build_without_a_gpu_falls_back_to_cpu_and_int8(onnx_dirs, monkeypatch):
    # onnxruntime-gpu lists CUDA as available even where the session cannot use it
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert rt.select_providers() == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        be = load_backend(onnx_dirs["int8"])
    assert be.providers == ["CPUExecutionProvider"]
    assert be.precision == "int8"  # not the fp16 graph meant for the GPU
    assert any("CPUExecutionProvider" in str(w.message) for w in caught)  # says where it runs
    assert any("could not load it" in str(w.message) and "CUDA 13" in str(w.message) for w in caught)  # and why


@pytest.mark.skipif(not HAS_CUDA, reason="needs onnxruntime-gpu and a CUDA device")
def test_cuda_runs_fp16_with_io_binding(onnx_dirs, sentences):
    be = load_backend(onnx_dirs["int8"])
    assert be.providers[0] == "CUDAExecutionProvider" and be.precision == "fp16" and be.runner.io_binding
    ref = load_backend(onnx_dirs["int8"], providers=["CPUExecutionProvider"], precision="fp32")
    ids, mask, cand = encode(be, sentences)
    a, b = be.run(ids, mask), ref.run(ids, mask)
    assert np.abs(a - b)[mask == 1].max() < 0.05
    assert spearman(pll(b, cand), pll(a, cand)) >= 0.98  # random weights; a trained model's: BENCHMARKS.md


def test_threads_default_to_physical_cores(onnx_dirs):
    assert 1 <= rt.physical_cores() <= (len(__import__("os").sched_getaffinity(0)))
    be = load_backend(onnx_dirs["fp32"])
    assert be.threads == rt.physical_cores()
    assert be.runner.session.get_session_options().intra_op_num_threads == be.threads
    one = load_backend(onnx_dirs["fp32"], threads=1)
    assert one.threads == 1 and one.runner.session.get_session_options().intra_op_num_threads == 1


def test_the_server_turns_the_runtime_threads_spinning_off_unless_asked(onnx_dirs):
    from server.engine import Engine
    from server.settings import Settings

    def spinning(session) -> str | None:
        """The session's allow_spinning entry; None when unset (the runtime's default: spin)."""
        try:
            return session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")
        except RuntimeError:  # no such entry
            return None

    assert spinning(load_backend(onnx_dirs["fp32"], threads=2, spin=False).runner.session) == "0"
    assert spinning(load_backend(onnx_dirs["fp32"], threads=2).runner.session) is None  # the library: the default
    for spin_wait, expected in ((False, "0"), (True, None)):
        engine = Engine(Settings(model=onnx_dirs["fp32"], threads=2, spin_wait=spin_wait))
        assert spinning(engine._load(onnx_dirs["fp32"], "auto").runner.session) == expected


def test_bucket_lengths():
    assert [round_up_to_bucket(n, 512, on_cuda=False) for n in (1, 8, 9, 24, 510)] == [8, 8, 16, 24, 512]
    assert [round_up_to_bucket(n, 512, on_cuda=True) for n in (3, 16, 17, 100, 400)] == [16, 16, 32, 128, 512]
    assert round_up_to_bucket(100, 100, on_cuda=True) == 100  # never above max_length
    assert round_up_to_bucket(60, 50, on_cuda=False) == 60  # never below the input (run() rejects it first)


def test_padding_to_a_bucket_does_not_change_results(onnx_dirs, sentences, monkeypatch):
    be = load_backend(onnx_dirs["fp32"])
    plain = load_backend(onnx_dirs["fp32"], buckets=False)
    ids, mask, _ = encode(be, sentences[:5])
    ids, mask = ids[:, :13], mask[:, :13]  # T = 13: padded to 16 inside, cut back to 13
    seen = []
    real_run = be.runner.session.run
    monkeypatch.setattr(be.runner.session, "run", lambda out, feeds: seen.append(feeds["input_ids"].shape)
                        or real_run(out, feeds))
    got = be.run(ids, mask)
    assert seen == [(5, 16)] and got.shape == (5, 13)
    np.testing.assert_allclose(got, plain.run(ids, mask), atol=1e-5)


def test_io_binding_path_gives_the_same_output(onnx_dirs, sentences):
    be = load_backend(onnx_dirs["fp32"], io_binding=True)  # on CPU this runs the CUDA path's code
    plain = load_backend(onnx_dirs["fp32"])
    ids, mask, _ = encode(be, sentences[:6])
    tt = np.zeros_like(ids)
    np.testing.assert_allclose(be.run(ids, mask, tt), plain.run(ids, mask), atol=1e-6)


# ---- errors -------------------------------------------------------------------------------------

def test_bad_calls_raise_clear_errors(onnx_dirs, disc_dir, tmp_path):
    be = load_backend(onnx_dirs["fp32"])
    with pytest.raises(ValueError, match="max_length 128"):
        be.run(np.ones((1, 129), dtype=np.int64), np.ones((1, 129), dtype=np.int64))
    with pytest.raises(ValueError, match=r"must both be \(B, T\)"):
        be.run(np.ones((2, 5), dtype=np.int64), np.ones((2, 6), dtype=np.int64))
    with pytest.raises(ValueError, match="empty batch"):
        be.run(np.ones((0, 5), dtype=np.int64), np.ones((0, 5), dtype=np.int64))
    with pytest.raises(CheckpointError, match="no fp16 model"):
        load_backend(onnx_dirs["fp32"], precision="fp16")
    with pytest.raises(CheckpointError, match="not an `electric export` directory"):
        rt.OnnxBackend(disc_dir)
    with pytest.raises(CheckpointError, match="does not exist"):
        rt.OnnxBackend(tmp_path / "missing")
    with pytest.raises(ValueError, match="device"):
        rt.OnnxBackend(onnx_dirs["fp32"], device="tpu")


def test_warmup_runs_a_batch_of_each_length_capped_at_max_length(onnx_dirs, monkeypatch):
    be = load_backend(onnx_dirs["fp32"])
    ran = []  # (input shape, output shape) of each batch the ONNX Runtime session ran
    real = be.runner.run

    def spy(input_ids, attention_mask, token_type_ids=None):
        out = real(input_ids, attention_mask, token_type_ids)
        ran.append((input_ids.shape, out.shape))
        return out

    monkeypatch.setattr(be.runner, "run", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        be.warmup(lengths=(8, 300), batch_size=3)  # 300 is capped at max_length
    assert be.max_length == 128
    assert ran == [((3, 8), (3, 8)), ((3, 128), (3, 128))]


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the resident set from /proc")
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_release_memory_gives_the_arena_back_and_changes_no_output(onnx_dirs, precision):
    be = rt.OnnxBackend(onnx_dirs["int8"], precision=precision, threads=1)
    small = np.full((2, 16), 1000, dtype=np.int64)
    before = be.run(small, np.ones_like(small))
    rest = _rss_mb()
    big = np.full((512, 128), 1000, dtype=np.int64)  # ~130 MB of attention probabilities in the arena
    be.run(big, np.ones_like(big))
    grown = _rss_mb() - rest
    be.release_memory()
    kept = _rss_mb() - rest
    assert grown > 100, f"the big batch grew the process by only {grown:.0f} MB: the test measures nothing"
    assert kept < 0.25 * grown, f"{kept:.0f} of {grown:.0f} MB still held after release_memory"
    np.testing.assert_array_equal(be.run(small, np.ones_like(small)), before)
