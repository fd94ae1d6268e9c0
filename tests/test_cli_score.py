"""`electric score`, `electric rerank`, `electric eval blimp|nbest` end to end on tiny models."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from conftest import require_shared

from electric.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def atis30(tmp_path) -> dict[str, Path]:
    """The first 30 lists of ATIS train and of ATIS test (HyPoradise, with am_score), as files."""
    paths = {}
    for name in ("atis_train", "atis_test"):
        with open(require_shared(f"nbest/{name}.whisper5best.json"), encoding="utf-8") as f:
            paths[name] = tmp_path / f"{name}.json"
            paths[name].write_text(json.dumps(json.load(f)[:30]))
    return paths


@pytest.fixture(scope="module")
def libri40(tmp_path_factory):
    with open(require_shared("nbest/librispeech_test_clean.whisper5best.json"), encoding="utf-8") as f:
        items = json.load(f)[:40]
    p = tmp_path_factory.mktemp("nb") / "libri40.json"
    p.write_text(json.dumps(items))
    return p, items


def test_score_writes_one_json_object_per_line(capsys, disc_dir, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("Aaron breaks the glass.\n\nhe hoped there would be stew for dinner\n")
    rc, out, err = run(capsys, "score", "--model", disc_dir, "--per-token", "--quiet", src)
    assert rc == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["text"] for r in rows] == ["Aaron breaks the glass.", "", "he hoped there would be stew for dinner"]
    assert rows[1]["num_tokens"] == 0 and rows[1]["score"] is None and rows[1]["tokens"] == []
    for r in rows[::2]:
        assert r["score"] == pytest.approx(sum(t["score"] for t in r["tokens"]), abs=1e-6)
        assert all(r["text"][t["start"]:t["end"]].lower() == t["token"].removeprefix("##") for t in r["tokens"])
    # electra --per-token: replaced probabilities per token and per word; --out writes the same lines
    rc, out, err = run(capsys, "score", "--model", disc_dir, "--method", "electra", "--per-token", "--quiet",
                       "--out", tmp_path / "o.jsonl", "--chunk-size", "2", src)
    assert rc == 0, err
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and [w["word"] for w in rows[0]["words"]] == ["Aaron", "breaks", "the", "glass", "."]
    assert all(0 < t["prob"] < 1 for t in rows[0]["tokens"])


def test_blank_lines_get_no_score_and_a_note(capsys, disc_dir, tmp_path):
    """A blank line is not a sentence: no score (0.0 would outrank every real sentence), as the server rejects it."""
    src = tmp_path / "in.txt"
    src.write_text("the cat sat\n\n   \n\t\na dog ran\n")
    for extra in ([], ["--method", "electra", "--per-token"]):
        rc, out, err = run(capsys, "score", "--model", disc_dir, "--quiet", *extra, src)
        assert rc == 0, err
        rows = [json.loads(line) for line in out.splitlines()]
        assert [r["score"] is None for r in rows] == [False, True, True, True, False]
        assert all(r["error"] == "blank line: nothing to score" and r["num_tokens"] == 0 for r in rows[1:4])
        assert rows[0]["score"] < 0 and "error" not in rows[0]
        assert f"3 blank lines of {src} got no score" in err and "lines 2, 3, 4" in err


@pytest.mark.parametrize("content, words", [
    (b"fine\ncaf\xe9 au lait\n", "line 2: byte 0xe9 at byte offset 8 is not UTF-8"),  # Latin-1
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", "line 1: a NUL byte at byte offset 7: this is a binary file"),
    (b"\xef\xbb\xbfok\n\xff", "line 2: byte 0xff at byte offset 6 is not UTF-8"),  # offsets count the BOM
])
def test_binary_or_non_utf8_input_is_named_with_the_byte_offset_before_any_model_loads(capsys, tmp_path, content,
                                                                                       words):
    src = tmp_path / "in.bin"
    src.write_bytes(content)
    rc, out, err = run(capsys, "score", "--model", tmp_path / "no-model", src)  # the file is checked first
    assert rc == 2 and f"{src}: {words}" in err and "Traceback" not in err and out == ""
    text_nbest = tmp_path / "lists.txt"  # the same for plain text n-best lists and reference files
    text_nbest.write_bytes(content)
    rc, _, err = run(capsys, "eval", "nbest", "--model", tmp_path / "no-model", "--nbest", text_nbest)
    assert rc == 2 and f"{text_nbest}: {words}" in err


def test_stdin_with_a_bad_byte_names_stdin(capsys, disc_dir, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ok\nnot \xff ok\n")))
    rc, out, err = run(capsys, "score", "--model", disc_dir, "--quiet", "-")
    assert rc == 2 and "stdin: line 2: byte 0xff at byte offset 7 is not UTF-8" in err
    assert [json.loads(line)["text"] for line in out.splitlines()] == []  # the chunk holding the bad line is not written


def test_arguments_and_files_are_checked_before_a_model_is_loaded(capsys, disc_dir, tmp_path, monkeypatch):
    import electric.inference.scoring

    def no_loading(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(electric.inference.scoring, "load_scorer", no_loading)
    src = tmp_path / "in.txt"
    src.write_text("a\n")
    for argv, words in ((["score", "--model", disc_dir, tmp_path / "nope.txt"], "nope.txt: no such file"),
                        (["score", "--model", disc_dir, tmp_path], "is a directory"),
                        (["score", "--model", disc_dir, "--out", tmp_path, src], f"--out {tmp_path}: is a directory"),
                        (["score", "--model", disc_dir, "--batch-size", "0", src], "--batch-size must be at least 1"),
                        (["score", "--model", tmp_path / "typo", src], "typo' does not exist"),
                        (["score", "--model", disc_dir, "--method", "mlm-pll", src], "not a masked LM")):
        rc, _, err = run(capsys, *argv)
        assert rc == 2 and words in err, (argv, err)
    # and torch is not even imported for a typo in --model (a fresh process, as a user runs it)
    code = ("import sys; from electric.cli import main; rc = main(['score', '--model', sys.argv[1], sys.argv[2]]); "
            "print(rc, 'torch' in sys.modules)")
    import subprocess

    from conftest import REPO

    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "typo"), str(src)], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert p.stdout.split() == ["2", "False"], p.stderr


def test_score_reads_stdin(capsys, disc_dir, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("a b c\nd e\n"))
    rc, out, _ = run(capsys, "score", "--model", disc_dir, "--quiet", "-")
    assert rc == 0 and [json.loads(line)["text"] for line in out.splitlines()] == ["a b c", "d e"]


def test_a_failed_score_leaves_no_partial_out(capsys, disc_dir, tmp_path):
    import os
    import threading

    src = tmp_path / "in.txt"
    src.write_text("the cat sat\n" + " ".join(["word"] * 600) + "\n")  # line 2: more than the model's maximum
    out = tmp_path / "o.jsonl"
    argv = ["score", "--model", disc_dir, "--quiet", "--chunk-size", "1", "--out", out, src]
    rc, _, err = run(capsys, *argv)  # line 1 is scored and written before line 2 fails
    assert rc == 2 and "line 2 has" in err and list(tmp_path.iterdir()) == [src]
    out.write_text("an earlier run\n")
    rc, _, err = run(capsys, *argv)
    assert rc == 2 and out.read_text() == "an earlier run\n" and sorted(tmp_path.iterdir()) == [src, out]
    # a FIFO (or a device such as /dev/stdout) is written in place, not replaced by a file
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    rc, _, err = run(capsys, "score", "--model", disc_dir, "--quiet", "--truncate", "--out", fifo, src)
    reader.join(60)
    assert rc == 0 and fifo.is_fifo() and len(got) == 1 and len(got[0].splitlines()) == 2, err


def test_too_long_line_is_a_clear_error_unless_windowed(capsys, disc_dir, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("short\nalso short\n" + "word " * 300 + "\n")
    rc, out, err = run(capsys, "score", "--model", disc_dir, "--quiet", src)
    assert rc == 2 and "line 3 has" in err and "--sliding-window" in err and "Traceback" not in err
    rc, out, err = run(capsys, "score", "--model", disc_dir, "--quiet", "--sliding-window", src)
    assert rc == 0 and json.loads(out.splitlines()[2])["num_tokens"] == 300


def test_mlm_pll_from_the_cli(capsys, mlm_dir, disc_dir, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("Aaron breaks the glass.\n")
    rc, out, err = run(capsys, "score", "--model", mlm_dir, "--method", "mlm-pll", "--quiet", src)
    assert rc == 0, err
    assert json.loads(out)["method"] == "mlm-pll" and json.loads(out)["score"] < 0
    rc, out, err = run(capsys, "score", "--model", disc_dir, "--method", "mlm-pll", "--quiet", src)
    assert rc == 2 and "not a masked LM" in err and "Traceback" not in err


def test_onnx_backend_without_runtime_is_a_clear_error(capsys, disc_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "electric.inference.runtime", None)  # as if electric/inference/runtime.py were missing
    src = tmp_path / "in.txt"
    src.write_text("a\n")
    rc, _, err = run(capsys, "score", "--model", disc_dir, "--backend", "onnx", "--quiet", src)
    assert rc == 2 and "electric.inference.runtime" in err and "--backend torch" in err


def test_rerank_writes_lists_in_input_format_and_a_report(capsys, disc_dir, libri40, tmp_path):
    path, items = libri40
    rc, out, err = run(capsys, "rerank", "--model", disc_dir, "--nbest", path, "--out", tmp_path / "r.json",
                       "--report", tmp_path / "rep.json", "--dev-fraction", "0.5", "--seed", "1", "--quiet")
    assert rc == 0, err
    assert "WER" in out and "first" in out and "oracle" in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert len(data) == 40
    for item, orig in zip(data, items, strict=True):
        assert sorted(item["input"]) == sorted(orig["input"]) and item["output"] == orig["output"]
        assert item["instruction"] == orig["instruction"] and len(item["lm_score"]) == 5
        assert item["total_score"] == sorted(item["total_score"], reverse=True)
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["dev"]["num_utterances"] == rep["test"]["num_utterances"] == 20
    assert sorted(rep["dev"]["ids"] + rep["test"]["ids"], key=int) == [str(i) for i in range(40)]
    assert set(rep["weights"]) == {"lm", "length", "beta", "prior", "piece", "lm_score", "ngram"} and rep["method"] == "electric"
    # fixed weights with LM weight 0: the input order comes back and reranked WER = first-hypothesis WER
    rc, out, err = run(capsys, "rerank", "--model", disc_dir, "--nbest", path, "--out", tmp_path / "r0.json",
                       "--lm-weight", "0", "--json", "--quiet")
    assert rc == 0, err
    rep = json.loads(out)
    assert rep["test"]["reranked"] == rep["test"]["first"]
    assert [d["input"] for d in json.loads((tmp_path / "r0.json").read_text())] == [it["input"] for it in items]


def test_rerank_says_what_the_prior_assumed_and_keeps_the_first_pass_without_a_significant_gain(
        capsys, disc_dir, libri40, tmp_path):
    """Lists without first-pass scores get no rank prior unless --prior rank says their order is a first-pass
    order; a random-weight model's scores are noise, so tuning keeps the first pass and says so."""
    path, items = libri40
    rc, out, err = run(capsys, "eval", "nbest", "--model", disc_dir, "--nbest", path, "--quiet", "--report",
                       tmp_path / "rep.json")
    assert rc == 0, err
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["weights"]["prior"] == "none" and "note: prior none: all lists have no first-pass scores" in out
    assert "--prior rank" in out and "no rank prior" in out
    g = rep["guard"]
    assert g["kept"] == "no_lm" and not g["significant"] and rep["weights"]["lm"] == 0
    assert f"CI [{g['ci'][0]:+.2f}, {g['ci'][1]:+.2f}]" in out and "the LM is NOT used" in out
    # the no-LM baseline has the pieces the model scored (a per-piece bonus) and its own guard over the first pass
    assert rep["no_lm_features"] == ["words", "pieces"] and rep["applied"] in ("no_lm", "first_pass")
    assert rep["bonuses"]["no_lm"]["per_piece"] == rep["weights_no_lm"]["piece"] and "/piece" in out
    assert rep["guard_no_lm"]["kept"] == rep["applied"] and "dev gain of no_lm over the first pass" in out
    assert {"first", "oracle", "lm_only", "no_lm", "with_lm", "reranked", "ties"} <= set(rep["test"])
    assert "reranked" in rep["all"]
    rc, out, err = run(capsys, "eval", "nbest", "--model", disc_dir, "--nbest", path, "--prior", "rank", "--beta", "2",
                       "--quiet", "--json")
    assert rc == 0, err
    rep = json.loads(out)
    assert rep["weights"]["prior"] == "rank" and rep["weights"]["beta"] == 2 and "taken as a first-pass order" in \
        rep["prior_note"]
    rc, _, err = run(capsys, "eval", "nbest", "--model", disc_dir, "--nbest", path, "--beta", "2", "--quiet")
    assert rc == 2 and "--prior rank" in err
    # fixed weights without an LM or a prior: every list ties, the first position wins, and the count is shown
    rc, out, err = run(capsys, "rerank", "--model", disc_dir, "--nbest", path, "--out", tmp_path / "r.json",
                       "--lm-weight", "0", "--quiet")
    assert rc == 0, err
    assert "40 tied choices (the earlier position won)" in out
    assert [it["input"] for it in json.loads((tmp_path / "r.json").read_text())] == [it["input"] for it in items]


def test_eval_nbest_with_a_dev_file_and_first_pass_scores(capsys, disc_dir, atis30):
    paths = atis30
    rc, out, err = run(capsys, "eval", "nbest", "--model", disc_dir, "--nbest", paths["atis_test"],
                       "--dev", paths["atis_train"], "--json", "--quiet")
    assert rc == 0, err
    rep = json.loads(out)
    assert rep["dev_source"] == {"file": str(paths["atis_train"])} and "all" not in rep
    assert rep["dev"]["num_utterances"] == rep["test"]["num_utterances"] == 30
    assert rep["test"]["ids"][0] == json.loads(paths["atis_test"].read_text())[0]["id"]
    assert rep["test"]["oracle"] <= rep["test"]["first"]


def test_lm_score_auto_keeps_the_variant_better_on_dev_and_mean_is_length_normalised(capsys, disc_dir, atis30,
                                                                                       tmp_path):
    from electric.inference.scoring import load_scorer

    paths = atis30
    reports = {}
    for kind in ("sum", "mean", "auto"):
        rc, out, err = run(capsys, "eval", "nbest", "--model", disc_dir, "--nbest", paths["atis_test"],
                           "--dev", paths["atis_train"], "--lm-score", kind, "--json", "--quiet")
        assert rc == 0, err
        reports[kind] = json.loads(out)
    assert reports["sum"]["lm_score"] == "sum" and reports["mean"]["lm_score"] == "mean"
    auto = reports["auto"]
    assert auto["lm_score_dev"] == {k: reports[k]["dev"]["reranked"] for k in ("sum", "mean")}
    other = "mean" if auto["lm_score"] == "sum" else "sum"
    assert auto["lm_score_dev"][auto["lm_score"]] <= auto["lm_score_dev"][other]
    assert auto["test"] == reports[auto["lm_score"]]["test"]
    # the mean written next to each hypothesis is the sentence score over its number of tokens
    rc, _, err = run(capsys, "rerank", "--model", disc_dir, "--nbest", paths["atis_test"], "--out",
                     tmp_path / "r.json", "--lm-score", "mean", "--lm-weight", "1", "--quiet")
    assert rc == 0, err
    item = json.loads((tmp_path / "r.json").read_text())[0]
    scored = load_scorer(disc_dir, "electric").score(item["input"])
    assert item["lm_score"] == pytest.approx([r.score / r.num_tokens for r in scored], rel=1e-5)


def ragged_items(seed: int, sizes, scored: bool) -> list[dict]:
    """HyPoradise items of the given list sizes (real ATIS hypotheses and references; am_score or none)."""
    import random

    with open(require_shared("nbest/atis_test.whisper5best.json"), encoding="utf-8") as f:
        pool = json.load(f)
    rng = random.Random(seed)
    hyps = [h for it in pool[:60] for h in it["input"]]
    out = []
    for n in sizes:
        item = {"input": rng.sample(hyps, n), "output": rng.choice(pool[:60])["output"]}
        if scored:
            item["am_score"] = sorted((rng.uniform(-1, 0) for _ in range(n)), reverse=True)
        out.append(item)
    return out


@pytest.mark.parametrize("scored", [False, True])
def test_ragged_nbest_lists_through_the_cli(capsys, disc_dir, tmp_path, scored):
    """Lists of 1 to 19 hypotheses: a split whose dev part's longest list differs from the test part's, a dev
    file whose longest list differs from the test file's, WER and BLEU, eval and rerank; no_lm in each report."""
    sizes = [1, 19, 2, 13, 1, 7, 3, 1, 5, 13, 2, 1, 4, 9, 6, 1, 11, 2, 8, 3]
    lists = tmp_path / "ragged.json"
    lists.write_text(json.dumps(ragged_items(0, sizes, scored)))
    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps(ragged_items(1, [1, 1, 2, 17, 1, 3], scored)))
    for metric in ("wer", "bleu"):
        for split in (["--dev-fraction", "0.5", "--seed", "2"], ["--dev", dev]):
            rc, out, err = run(capsys, "eval", "nbest", "--model", disc_dir, "--nbest", lists, "--metric", metric,
                               *split, "--quiet", "--report", tmp_path / "rep.json")
            assert rc == 0, err
            assert "no_lm" in out and "the LM's own gain on test" in out
            rep = json.loads((tmp_path / "rep.json").read_text())
            assert rep["weights_no_lm"]["lm"] == 0 and {"first", "no_lm", "reranked"} <= set(rep["test"])
    rc, out, err = run(capsys, "rerank", "--model", disc_dir, "--nbest", lists, "--dev-fraction", "0.5", "--seed",
                       "2", "--out", tmp_path / "r.json", "--json", "--quiet")
    assert rc == 0, err
    rep = json.loads(out)
    longest = {p: max(sizes[int(i)] for i in rep[p]["ids"]) for p in ("dev", "test")}
    assert longest["dev"] != longest["test"]  # the shape that crashed
    assert [len(it["input"]) for it in json.loads((tmp_path / "r.json").read_text())] == sizes


def test_eval_nbest_needs_references(capsys, disc_dir, tmp_path):
    src = tmp_path / "lists.txt"
    src.write_text("the cat sat\nthe cat sad\n\na dog ran\na dog\n")
    rc, _, err = run(capsys, "eval", "nbest", "--model", disc_dir, "--nbest", src, "--quiet")
    assert rc == 2 and "lists.txt: utterance '0': no reference" in err and "--refs" in err
    (tmp_path / "refs.txt").write_text("the cat sat\na dog ran\n")
    rc, out, err = run(capsys, "eval", "nbest", "--model", disc_dir, "--nbest", src, "--refs", tmp_path / "refs.txt",
                       "--dev-fraction", "0.5", "--quiet", "--json")
    assert rc == 0, err
    assert json.loads(out)["test"]["first"] == 0.0


@pytest.mark.parametrize(("command", "metric", "module"), [(("eval", "nbest"), "wer", "jiwer"),
                                                         (("rerank", "--out", "r.json"), "bleu", "sacrebleu")])
def test_a_missing_metric_extra_is_named_before_any_work(capsys, tmp_path, monkeypatch, command, metric, module):
    """A serving-only install has no jiwer/sacrebleu: the n-best commands say which extra to install in one line,
    before reading the lists or loading the model (neither exists here, and neither is named)."""
    from electric import checkpoint

    real = checkpoint.importlib.util.find_spec
    monkeypatch.setattr(checkpoint.importlib.util, "find_spec",
                        lambda name, *a: None if name == module else real(name, *a))
    rc, out, err = run(capsys, *command, "--model", tmp_path / "no-model", "--nbest", tmp_path / "no-lists.json",
                       "--metric", metric, "--quiet")
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"needs {module}, which this installation lacks: pip install -e '.[score]' (from a checkout) or pip " \
           "install 'electric-scoring[score]'" in err
    assert "no-lists.json" not in err and "no-model" not in err


def test_eval_detect_without_the_metrics_extra_says_so_first(capsys, tmp_path, monkeypatch):
    from electric import checkpoint

    real = checkpoint.importlib.util.find_spec
    monkeypatch.setattr(checkpoint.importlib.util, "find_spec",
                        lambda name, *a: None if name == "sklearn" else real(name, *a))
    rc, _, err = run(capsys, "eval", "detect", "--model", tmp_path / "no-model", "--data", tmp_path / "no-data")
    assert rc == 2 and "pip install 'electric-scoring[metrics]'" in err and "no-data" not in err


def test_eval_nbest_bad_json_shape(capsys, disc_dir, tmp_path):
    src = tmp_path / "bad.json"
    src.write_text(json.dumps([{"input": ["a"], "output": "a"}, {"id": "utt-9", "input": [], "output": "b"}]))
    rc, _, err = run(capsys, "eval", "nbest", "--model", disc_dir, "--nbest", src, "--quiet")
    assert rc == 2 and "bad.json: utterance 'utt-9' (item 1)" in err and "Traceback" not in err


def test_eval_blimp_reports_every_set(capsys, disc_dir, tmp_path):
    data = require_shared("blimp")
    rc, out, err = run(capsys, "eval", "blimp", "--model", disc_dir, "--data", data, "--limit", "3", "--json",
                       "--quiet", "--report", tmp_path / "b.json")
    assert rc == 0, err
    rep = json.loads(out)
    assert len(rep["sets"]) == 12 and rep["overall"]["pairs"] == 36
    assert 0 <= rep["overall"]["accuracy"] <= 100
    assert json.loads((tmp_path / "b.json").read_text()) == rep
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"sentence_good": "a"}\n')
    rc, _, err = run(capsys, "eval", "blimp", "--model", disc_dir, "--data", bad, "--quiet")
    assert rc == 2 and "bad.jsonl: line 1" in err


@pytest.mark.integration
def test_quality_script_on_a_trained_run(trained_run, mlm_dir, tmp_path):
    """research/first_tiny_runs/quality_scoring.py end to end on the 30-step Electric run (+ a masked LM), a few
    items."""
    from script_loader import load_script

    mod = load_script("research/first_tiny_runs/quality_scoring.py")
    out, js = tmp_path / "q.md", tmp_path / "q.json"
    rc = mod.main(["--runs", str(trained_run), str(mlm_dir), str(tmp_path / "missing"), "--limit", "6",
                   "--out", str(out), "--json", str(js)])
    assert rc == 0
    data = json.loads(js.read_text())
    got = {(Path(r["run"]).name, r["method"]) for r in data["results"]}
    # the Electric run's cloze generator is not a masked LM: its discriminator gives electric and electra
    assert got == {(trained_run.name, "electric"), (trained_run.name, "electra"), (mlm_dir.name, "mlm-pll")}
    assert data["skipped"] == [str(tmp_path / "missing")]
    assert data["runs"][str(trained_run)]["objective"] == "electric" and data["runs"][str(trained_run)]["tokens"] > 0
    for r in data["results"]:
        assert r["blimp"]["overall"]["pairs"] == 72
        n = r["nbest"]
        assert n["dev"]["num_utterances"] == n["test"]["num_utterances"] == 3
        assert n["test"]["oracle"] <= n["test"]["reranked"]
        assert n["no_lm_features"] == ["words", "pieces"]  # the no-LM baseline has the per-piece bonus too
    text = out.read_text()
    assert "Partial run" in text and "| **overall** |" in text and "not found: skipped" in text


@pytest.mark.parametrize("command", [["score"], ["rerank"], ["eval", "blimp"], ["eval", "nbest"], ["eval", "detect"],
                                     ["export"], ["serve"]])
def test_every_subcommand_prints_its_help(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([*command, "--help"])
    assert e.value.code == 0 and "usage: electric " + " ".join(command) in capsys.readouterr().out
