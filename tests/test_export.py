"""`electric export`: the ONNX directory, its manifest, parity gates, Triton layout and bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from electric.checkpoint import MANIFEST, ExportManifest  # noqa: E402
from electric.cli import main as cli  # noqa: E402
from electric.export import exporter as ex  # noqa: E402
from electric.export import graph, parity  # noqa: E402
from electric.export.manifest import checkpoint_hash  # noqa: E402
from electric.inference.backend import TorchBackend, load_backend  # noqa: E402
from electric.tokenization import load_tokenizer  # noqa: E402


def no_leftovers(parent: Path) -> bool:
    """atomic_dir's temporary directories are gone."""
    return not [p for p in parent.iterdir() if ".tmp-" in p.name or p.name.endswith(".old")]


@pytest.fixture(scope="module")
def sentences_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("parity") / "sentences.txt"
    p.write_text("the cat sat on the mat .\nshow me flights from boston to denver\n"
                 "a short one\nthe committee will meet again next week to discuss the new budget proposal\n")
    return p


@pytest.fixture(scope="module")
def exported(disc_dir, tmp_path_factory) -> tuple[Path, Path, dict]:
    """The discriminator exported with int8 + fp16 and a Triton model, through the CLI."""
    root = tmp_path_factory.mktemp("exp")
    out, triton = root / "onnx", root / "triton"
    rc = cli(["export", "--model", str(disc_dir), "--out", str(out), "--quantize", "int8", "--fp16",
              "--triton-repo", str(triton), "--triton-name", "scorer"])
    assert rc == 0
    return out, triton, json.loads((out / MANIFEST).read_text())


def head_dir(tokenizer_dir, root: Path, arch: str, num_labels: int) -> Path:
    import torch
    import transformers
    from transformers import AutoTokenizer, ElectraConfig

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(1)
    labels = {i: f"L{i}" for i in range(num_labels)}
    cfg = ElectraConfig(vocab_size=len(tok), embedding_size=32, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128, max_position_embeddings=128,
                        pad_token_id=tok.pad_token_id, id2label=labels, label2id={v: k for k, v in labels.items()})
    out = root / arch
    getattr(transformers, arch)(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


# ---- the output directory -----------------------------------------------------------------------

def test_output_directory_and_manifest(exported, disc_dir):
    out, _, m = exported
    for f in ("model.onnx", "model.int8.onnx", "model.fp16.onnx", "config.json", "tokenizer.json", MANIFEST):
        assert (out / f).is_file(), f
    assert no_leftovers(out.parent)
    assert json.loads((out / "config.json").read_text()) == json.loads((disc_dir / "config.json").read_text())
    assert m["kind"] == "discriminator" and m["labels"] is None
    assert m["max_length"] == 128 and m["opset"] == 17
    assert m["files"] == {"fp32": "model.onnx", "int8": "model.int8.onnx", "fp16": "model.fp16.onnx"}
    assert m["precision"] == {"cpu": "int8", "cuda": "fp16"}
    assert m["source"]["path"] == str(disc_dir.resolve())
    assert m["source"]["sha256"] == checkpoint_hash(disc_dir) and len(m["source"]["sha256"]) == 64
    import onnxruntime

    assert m["onnxruntime"] == onnxruntime.__version__
    assert m["exporter"]["attn_implementation"] == "eager"
    assert m["calibration"] is None  # no generator beside this discriminator: detect keeps sigma(s_t)
    assert list(m) == ["format", "format_version", "kind", "architecture", "labels", "problem_type", "max_length",
                       "trained_length", "trained_length_from", "opset", "precision", "int8_method", "files", "inputs",
                       "output", "output_meaning", "scoring_methods", "source", "exporter", "versions", "onnxruntime",
                       "parity", "training_health", "calibration", "created"]
    assert ExportManifest.read(out).to_json() == (out / MANIFEST).read_text()  # read back, written the same


def test_parity_recorded_at_other_shapes(exported):
    p = exported[2]["parity"]
    assert p["sentences"] == sum(parity.PARITY_BATCHES)
    assert "sst2" in p["source"] or p["source"] == "built-in sentences"
    shapes = [tuple(s) for s in p["shapes"]]
    assert len(set(shapes)) == len(shapes) and tuple(p["export_shape"]) not in shapes
    assert len({s[1] for s in shapes}) > 1  # several sequence lengths through one graph
    assert p["fp32"]["max_abs_diff"] <= 1e-4
    for prec in ("int8", "fp16"):
        assert p[prec]["passed"] and p[prec]["spearman"] >= 0.99 and not p[prec]["forced"]
        assert p[prec]["max_abs_diff"] > 0  # a real difference was measured
        assert p[prec]["spearman_per_token"] >= 0.9  # reported (not gated); high with the fp32 head


def test_graph_has_dynamic_batch_and_sequence_axes(exported):
    g = onnx.load(str(exported[0] / "model.onnx")).graph
    assert [i.name for i in g.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in g.output] == ["logits"]
    for v in [*g.input, *g.output]:
        dims = v.type.tensor_type.shape.dim
        assert len(dims) == 2 and all(d.dim_param and not d.HasField("dim_value") for d in dims), v.name
    for i in g.input:
        assert i.type.tensor_type.elem_type == onnx.TensorProto.INT64


def test_exported_runs_at_new_shapes_like_torch(exported, disc_dir):
    ref = TorchBackend(disc_dir, device="cpu")
    be = load_backend(exported[0], precision="fp32")
    rng = np.random.default_rng(0)
    for B, T in ((1, 5), (3, 41), (9, 128)):
        ids = rng.integers(5, len(be.tokenizer), (B, T))
        mask = np.ones_like(ids)
        mask[0, T // 2 :] = 0
        ids[0, T // 2 :] = be.tokenizer.pad_token_id
        got, want = be.run(ids, mask), ref.run(ids, mask)
        assert got.shape == (B, T)
        assert np.abs(got - want)[mask == 1].max() <= 1e-4


def static_int8_matmuls(nodes) -> tuple[list[str], list[str]]:
    """(quantised, fp32) MatMul names of a static int8 graph: a quantised one is a MatMulIntegerToFloat (with its
    bias) or a MatMul taking both inputs from DequantizeLinear."""
    made_by = {o: n.op_type for n in nodes for o in n.output}
    matmuls = [n for n in nodes if n.op_type == "MatMul"]
    quantised = [n.name for n in matmuls if all(made_by.get(i) == "DequantizeLinear" for i in n.input)]
    fp32 = [n.name for n in matmuls if n.name not in quantised]
    return quantised + [n.name for n in nodes if n.op_type == "MatMulIntegerToFloat"], fp32


def test_int8_graph_quantises_the_encoder_only(exported):
    assert exported[2]["int8_method"] == "static"  # the default: ranges fixed at export
    nodes = onnx.load(str(exported[0] / "model.int8.onnx")).graph.node
    quantised, fp32 = static_int8_matmuls(nodes)
    assert len(quantised) == 2 * 6  # Q, K, V, attention output, FFN in and out in each of 2 layers
    assert all("/encoder/" in name for name in quantised)
    assert not any(n.op_type in ("DynamicQuantizeLinear", "MatMulInteger") for n in nodes)  # no run-time scales
    kept = [name for name in fp32 if any(k in name for k in graph.KEEP_FP32)]
    assert len(kept) == 3  # head dense, head prediction, embedding projection stay fp32


def test_static_int8_keeps_what_it_is_told_in_fp32_and_scales_weights_as_asked(exported, tmp_path):
    """The knobs research/int8_detector compares: a layer kept fp32, one weight scale a matrix, histogram ranges."""
    from electric.export.parity import parity_batches
    from electric.tokenization import load_tokenizer

    fp32 = exported[0] / "model.onnx"
    tok = load_tokenizer(exported[0])
    batches = parity_batches(tok, ["a short one"] * 3 + ["the committee will meet again next week to discuss the new "
                                                          "budget proposal"] * 5, 128, False, [3, 5])  # two shapes
    scales = lambda m: [len(i.dims) for i in m.graph.initializer if i.name.endswith("_scale")]  # noqa: E731
    graph.quantize_int8_static(fp32, tmp_path / "kept.onnx", batches, keep_fp32=(*graph.KEEP_FP32, "/layer.1/"))
    quantised, _ = static_int8_matmuls(onnx.load(str(tmp_path / "kept.onnx")).graph.node)
    assert len(quantised) == 6 and not any("/layer.1/" in name for name in quantised)
    per_channel = scales(onnx.load(str(exported[0] / "model.int8.onnx")))
    graph.quantize_int8_static(fp32, tmp_path / "tensor.onnx", batches, per_channel=False, ranges="percentile")
    assert 1 in per_channel and 1 not in scales(onnx.load(str(tmp_path / "tensor.onnx")))  # vectors, then scalars
    with pytest.raises(ValueError, match="ranges must be one of"):
        graph.quantize_int8_static(fp32, tmp_path / "x.onnx", batches, ranges="max")


@pytest.mark.integration
def test_dynamic_int8_graph_quantises_the_encoder_only(disc_dir, tmp_path, sentences_file):
    rc = cli(["export", "--model", str(disc_dir), "--out", str(tmp_path / "d"), "--quantize", "int8",
              "--int8-method", "dynamic", "--parity-data", str(sentences_file), "--no-calibration"])
    assert rc == 0 and json.loads((tmp_path / "d" / MANIFEST).read_text())["int8_method"] == "dynamic"
    nodes = onnx.load(str(tmp_path / "d" / "model.int8.onnx")).graph.node
    quantised = [n.name for n in nodes if n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul")]
    assert len(quantised) == 2 * 6 and all("/encoder/" in name for name in quantised)
    kept = [n.name for n in nodes if n.op_type == "MatMul" and any(k in n.name for k in graph.KEEP_FP32)]
    assert len(kept) == 3


@pytest.mark.integration
def test_fused_int8_graph_quantises_the_fused_attention_and_keeps_parity(disc_dir, tmp_path, sentences_file, capsys):
    import onnxruntime

    out = tmp_path / "fused"
    rc = cli(["export", "--model", str(disc_dir), "--out", str(out), "--quantize", "int8", "--int8-graph", "fused",
              "--parity-data", str(sentences_file), "--no-calibration"])
    if tuple(int(x) for x in onnxruntime.__version__.split(".")[:2]) < (1, 31):  # its optimizer fuses no attention
        assert rc != 0 and "fused no attention" in capsys.readouterr().err
        return
    assert rc == 0
    ops = [n.op_type for n in onnx.load(str(out / "model.int8.onnx")).graph.node]
    assert ops.count("QAttention") == 2  # one per layer: the fused attention's Q/K/V projection in int8
    assert "Attention" not in ops and "SkipLayerNormalization" in ops
    assert not (out / "model.fused.onnx").exists()  # the intermediate graph is not shipped
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["parity"]["int8"]["graph"] == "fused" and manifest["parity"]["int8"]["passed"]
    backend = load_backend(out)  # the runtime runs it on padded batches like the fp32 graph
    enc = [load_tokenizer(out)(t)["input_ids"] for t in ("show me flights to denver", "a short one")]
    ids = np.zeros((2, max(map(len, enc))), dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, e in enumerate(enc):
        ids[i, : len(e)], mask[i, : len(e)] = e, 1
    fp32 = load_backend(out, precision="fp32").run(ids, mask)
    assert np.abs(backend.run(ids, mask) - fp32)[mask == 1].max() < 0.05


@pytest.mark.integration
def test_a_fusion_that_fuses_no_attention_is_refused_not_shipped(disc_dir, tmp_path, sentences_file, monkeypatch,
                                                                 capsys):
    """onnxruntime 1.30 and older fuse no attention in this graph: the export says so instead of shipping a
    "fused" graph whose attention is fp32."""
    def no_attention(src, dst, config):
        dst.write_bytes(src.read_bytes())
        return {"SkipLayerNormalization": 4, "Attention": 0}

    monkeypatch.setattr(graph, "optimize_transformer", no_attention)
    out = tmp_path / "fused"
    rc = cli(["export", "--model", str(disc_dir), "--out", str(out), "--quantize", "int8", "--int8-graph", "fused",
              "--parity-data", str(sentences_file), "--no-calibration"])
    err = capsys.readouterr().err
    assert rc != 0 and "fused no attention in model.onnx (onnxruntime 1.31 and later do)" in err, err
    assert not out.exists() or not any(out.iterdir())  # nothing half-written


def test_an_unknown_int8_graph_is_refused(disc_dir, tmp_path):
    with pytest.raises(ex.ExportError, match="int8-graph"):
        ex.export_model(disc_dir, tmp_path / "x", ex.ExportOptions(quantize="int8", int8_graph="magic"))


# ---- classifier and tagger heads ----------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.parametrize("arch,kind,num_labels", [("ElectraForSequenceClassification", "classifier", 3),
                                                   ("ElectraForTokenClassification", "tagger", 5)])
def test_classifier_and_tagger_heads(tokenizer_dir, tmp_path, arch, kind, num_labels):
    src = head_dir(tokenizer_dir, tmp_path, arch, num_labels)
    out, triton = tmp_path / "onnx", tmp_path / "triton"
    m = ex.export_model(src, out, ex.ExportOptions(triton_repo=triton), log=lambda _: None)
    assert m.kind == kind and m.labels == [f"L{i}" for i in range(num_labels)]
    assert m.parity["fp32"]["max_abs_diff"] <= 1e-4
    be, ref = load_backend(out), TorchBackend(src, device="cpu")
    assert be.kind == kind and be.labels == m.labels
    tok = load_tokenizer(out)
    enc = tok(["the first sentence here", "another"], ["a second segment", "and its pair, a bit longer"],
              padding=True, return_tensors="np")
    assert enc["token_type_ids"].any()
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    got, want = be.run(*args), ref.run(*args)
    B, T = enc["input_ids"].shape
    assert got.shape == ((B, num_labels) if kind == "classifier" else (B, T, num_labels))
    real = enc["attention_mask"].astype(bool)
    assert np.abs(got - want)[slice(None) if kind == "classifier" else real].max() <= 1e-4
    cfg = parse_pbtxt((triton / "onnx" / "config.pbtxt").read_text())
    assert cfg["output"][0]["dims"] == ([num_labels] if kind == "classifier" else [-1, num_labels])


# ---- Triton -------------------------------------------------------------------------------------

_TOKEN = re.compile(r'\s*(?:(#[^\n]*)|("(?:[^"\\]|\\.)*")|([{}\[\]:,])|([^\s{}\[\]:,"#]+))')


def parse_pbtxt(text: str) -> dict:
    """A small protobuf text-format reader: {field: value or [values]} (repeated fields become lists)."""
    tokens = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip():
                raise ValueError(f"cannot parse pbtxt at {text[pos:pos + 20]!r}")
            break
        pos = m.end()
        if m.group(1):
            continue
        tokens.append(m.group(2) or m.group(3) or m.group(4))
    it = iter(tokens + [None])
    tok = [next(it)]

    def take(expected=None):
        t = tok[0]
        if expected is not None and t != expected:
            raise ValueError(f"expected {expected!r}, got {t!r}")
        tok[0] = next(it)
        return t

    def value():
        if tok[0] == "{":
            take("{")
            msg = message("}")
            take("}")
            return msg
        if tok[0] == "[":
            take("[")
            items = []
            while tok[0] != "]":
                items.append(value())
                if tok[0] == ",":
                    take(",")
            take("]")
            return items
        t = take()
        if t.startswith('"'):
            return t[1:-1]
        return int(t) if re.fullmatch(r"-?\d+", t) else t

    def message(end):
        msg: dict = {}
        while tok[0] != end:
            name = take()
            if tok[0] == ":":
                take(":")
            v = value()
            if name in msg:  # repeated field written twice
                prev = msg[name] if isinstance(msg[name], list) else [msg[name]]
                msg[name] = prev + (v if isinstance(v, list) else [v])
            else:
                msg[name] = v
        return msg

    return message(None)


def test_triton_model_repository(exported):
    out, triton, m = exported
    model = triton / "scorer"
    assert sorted(p.name for p in model.iterdir()) == ["1", "config.pbtxt"]
    assert (model / "1" / "model.onnx").read_bytes() == (out / m["files"]["fp16"]).read_bytes()
    cfg = parse_pbtxt((model / "config.pbtxt").read_text())
    assert cfg["name"] == "scorer"
    assert cfg["platform"] == "onnxruntime_onnx"
    assert cfg["max_batch_size"] > 0
    assert "max_queue_delay_microseconds" in cfg["dynamic_batching"]
    assert cfg["instance_group"][0]["kind"] == "KIND_GPU"  # the fp16 graph is for the GPU
    graph = onnx.load(str(model / "1" / "model.onnx")).graph
    dtype = {onnx.TensorProto.INT64: "TYPE_INT64", onnx.TensorProto.FLOAT: "TYPE_FP32"}
    for section, values in (("input", graph.input), ("output", graph.output)):
        assert [t["name"] for t in cfg[section]] == [v.name for v in values]
        for t, v in zip(cfg[section], values, strict=True):
            assert t["data_type"] == dtype[v.type.tensor_type.elem_type]
            # batch axis is implicit (max_batch_size > 0); every other dynamic axis is -1
            assert t["dims"] == [-1] * (len(v.type.tensor_type.shape.dim) - 1)


def test_pbtxt_reader_handles_repeated_and_nested_fields():
    cfg = parse_pbtxt('name: "m"  # c\ninput { name: "a" dims: [ 1, -1 ] }\ninput { name: "b" dims: [ 2 ] }\n'
                      "dynamic_batching { }")
    assert cfg == {"name": "m", "input": [{"name": "a", "dims": [1, -1]}, {"name": "b", "dims": [2]}],
                   "dynamic_batching": {}}


# ---- bad input: clear error, non-zero exit, nothing written -------------------------------------

def run_cli(capsys, *args) -> tuple[int, str]:
    rc = cli(["export", *map(str, args)])
    return rc, capsys.readouterr().err


def test_missing_checkpoint(tmp_path, capsys):
    rc, err = run_cli(capsys, "--model", tmp_path / "nope", "--out", tmp_path / "o")
    assert rc == 1 and "does not exist" in err and not (tmp_path / "o").exists()
    rc, err = run_cli(capsys, "--model", "google/electra-small-discriminator", "--out", tmp_path / "o")
    assert rc == 1 and "never downloads" in err


def test_a_missing_extra_is_one_line_and_exit_2_as_in_every_command(tmp_path, capsys, monkeypatch):
    from electric import checkpoint

    real = checkpoint.importlib.util.find_spec
    monkeypatch.setattr(checkpoint.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("onnx", "onnxscript") else real(name, *a))
    rc, err = run_cli(capsys, "--model", tmp_path / "nope", "--out", tmp_path / "o")
    assert rc == 2 and err == ("electric export: error: electric export needs onnx and onnxscript, which this "
                               "installation lacks: pip install -e '.[export]' (from a checkout) or pip install "
                               "'electric-scoring[export]'\n")


def test_not_electra_and_unsupported_heads(tmp_path, capsys, mlm_dir, tokenizer_dir):
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertForMaskedLM"]}))
    rc, err = run_cli(capsys, "--model", bert, "--out", tmp_path / "o1")
    assert rc == 1 and "not ELECTRA" in err

    rc, err = run_cli(capsys, "--model", mlm_dir, "--out", tmp_path / "o2")
    assert rc == 1 and "ElectraForMaskedLM" in err and "not support" in err

    # (Electric's cloze model exports: tests/test_cloze_export.py)

    run = tmp_path / "run"
    (run / "discriminator").mkdir(parents=True)
    (run / "discriminator" / "config.json").write_text("{}")
    (run / "config.json").write_text(json.dumps({"objective": "electric"}))  # a run's own config
    rc, err = run_cli(capsys, "--model", run, "--out", tmp_path / "o4")
    assert rc == 1 and "pretraining run" in err and str(run / "discriminator") in err
    assert not any((tmp_path / f"o{i}").exists() for i in range(1, 5)) and no_leftovers(tmp_path)


@pytest.mark.integration
def test_existing_output_is_refused_unless_overwrite(disc_dir, tmp_path, capsys, sentences_file):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    rc, err = run_cli(capsys, "--model", disc_dir, "--out", out)
    assert rc == 1 and "already exists" in err and (out / "keep.txt").read_text() == "mine"
    rc, _ = run_cli(capsys, "--model", disc_dir, "--out", out, "--overwrite", "--parity-data", sentences_file)
    assert rc == 0 and not (out / "keep.txt").exists() and (out / MANIFEST).is_file()
    assert json.loads((out / MANIFEST).read_text())["parity"]["source"] == str(sentences_file)
    assert no_leftovers(tmp_path)


@pytest.mark.integration
def test_failed_quantisation_leaves_nothing(disc_dir, tmp_path, capsys, monkeypatch):
    import onnxruntime.quantization as q

    def broken(*a, **k):
        raise RuntimeError("unsupported node")

    monkeypatch.setattr(q, "quantize_static", broken)  # the default int8
    rc, err = run_cli(capsys, "--model", disc_dir, "--out", tmp_path / "o", "--quantize", "int8")
    assert rc == 1 and "int8 quantisation" in err and "unsupported node" in err
    assert not (tmp_path / "o").exists() and no_leftovers(tmp_path)


@pytest.mark.integration
def test_low_quantised_parity_fails_unless_forced(disc_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ex, "MIN_SPEARMAN", 1.01)  # unreachable: any real int8 graph "fails"
    rc, err = run_cli(capsys, "--model", disc_dir, "--out", tmp_path / "o", "--quantize", "int8")
    assert rc == 1 and "Spearman" in err and "--force" in err
    assert not (tmp_path / "o").exists() and no_leftovers(tmp_path)
    rc, err = run_cli(capsys, "--model", disc_dir, "--out", tmp_path / "o", "--quantize", "int8", "--force")
    assert rc == 0 and "warning" in err
    p = json.loads((tmp_path / "o" / MANIFEST).read_text())["parity"]["int8"]
    assert p["passed"] is False and p["forced"] is True


@pytest.mark.integration
def test_a_static_int8_graph_that_misses_its_gate_is_made_again_with_the_ffn_outputs_in_fp32(disc_dir, tmp_path,
                                                                                          capsys, monkeypatch):
    real, calls = ex.variant_parity, []

    def first_misses(*args):
        st, provider = real(*args)
        calls.append(st["spearman"])
        return ({**st, "spearman": 0.5} if len(calls) == 1 else st), provider

    monkeypatch.setattr(ex, "variant_parity", first_misses)
    rc, err = run_cli(capsys, "--model", disc_dir, "--out", tmp_path / "o", "--quantize", "int8")
    assert rc == 0 and len(calls) == 2 and "the FFN outputs fp32" in err, err
    p = json.loads((tmp_path / "o" / MANIFEST).read_text())["parity"]["int8"]
    assert p["passed"] and p["kept_fp32"] == "the FFN output MatMuls" and p["spearman_all_int8"] == 0.5
    quantised, fp32 = static_int8_matmuls(onnx.load(str(tmp_path / "o" / "model.int8.onnx")).graph.node)
    assert len(quantised) == 2 * 5 and sum("/output/dense/" in n and "attention" not in n for n in fp32) == 2
    assert sorted(f.name for f in (tmp_path / "o").glob("*.onnx")) == ["model.int8.onnx", "model.onnx"]


@pytest.mark.integration
def test_fp32_mismatch_always_fails(disc_dir, tmp_path, capsys, monkeypatch):
    import torch

    real = ex.load_for_export

    def perturbed(*a, **k):  # the graph is made from other weights than the checkpoint's
        model = real(*a, **k)
        with torch.no_grad():
            model.discriminator_predictions.dense_prediction.bias += 0.01
        return model

    monkeypatch.setattr(ex, "load_for_export", perturbed)
    rc, err = run_cli(capsys, "--model", disc_dir, "--out", tmp_path / "o", "--force")
    assert rc == 1 and "fp32 ONNX logits differ from torch" in err
    assert not (tmp_path / "o").exists() and no_leftovers(tmp_path)


def test_the_default_sentence_file_is_the_callers_and_the_library_falls_back_to_built_in_ones(tmp_path):
    from electric.cli.export import default_sentences

    assert parity.sentences_or_default(None, 3, "parity data") == (list(parity.BUILTIN_SENTENCES), "built-in sentences")
    f = tmp_path / "dev.tsv"
    f.write_text("sentence\tlabel\na cat .\t1\na dog .\t0\n")
    assert parity.sentences_or_default(None, 3, "parity data", default=f) == (["a cat .", "a dog ."], str(f))
    assert parity.sentences_or_default(None, 3, "parity data", default=tmp_path / "missing.tsv")[1] == "built-in sentences"
    assert default_sentences().parts[-3:] == ("glue", "sst2", "dev.tsv")  # the CLI's: ../shared/data or $ELECTRIC_SHARED_DATA
