"""Task readers (on the first lines of the real files), dev splits, label checks and metrics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from electric.evaluation import metrics as M
from electric.finetuning.tasks import (
    CONLL2000_TAGS,
    TASKS,
    Example,
    TaskDataError,
    generic_task,
    load_task_data,
    subsample,
    task_metrics,
    train_dev_split,
)
from electric.words import IGNORE_INDEX, align_word_labels, pieces_to_words
from tests.conftest import require_shared


def head(src: Path, dst: Path, n: int) -> Path:
    """The first n lines of a real file (ending on a sentence boundary for column files)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, encoding="utf-8", newline="") as f:
        lines = [line for _, line in zip(range(n), f, strict=False)]
    dst.write_text("".join(lines), encoding="utf-8")
    return dst


def blank_line_head(src: Path, dst: Path, sentences: int) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    out, seen = [], 0
    with open(src, encoding="utf-8") as f:
        for line in f:
            out.append(line)
            if not line.strip():
                seen += 1
                if seen == sentences:
                    break
    dst.write_text("".join(out), encoding="utf-8")
    return dst


# ---- readers on real files -----------------------------------------------------------------------

def test_sst2_reader(tmp_path):
    ex = TASKS["sst2"].read(head(require_shared("glue/sst2/train.tsv"), tmp_path / "train.tsv", 4))
    assert [e.label for e in ex] == ["negative", "negative", "positive"]
    assert ex[0].text == "hide new secretions from the parental units"
    assert ex[0].text_pair is None and ex[0].source.endswith("train.tsv:2")


def test_cola_reader_has_no_header(tmp_path):
    ex = TASKS["cola"].read(head(require_shared("glue/cola/in_domain_dev.tsv"), tmp_path / "dev.tsv", 3))
    assert len(ex) == 3
    assert ex[0].text == "The sailors rode the breeze clear of the rocks."
    assert ex[0].label == "acceptable" and ex[0].source.endswith("dev.tsv:1")


def test_mrpc_reader_pairs_quotes_and_bom(tmp_path):
    ex = TASKS["mrpc"].read(head(require_shared("glue/mrpc/train.tsv"), tmp_path / "train.tsv", 3))
    assert ex[0].label == "equivalent" and ex[1].label == "not_equivalent"
    assert ex[0].text.startswith('Amrozi accused his brother, whom he called "the witness"')  # quotes kept
    assert ex[0].text_pair.startswith('Referring to him as only "the witness"')


def test_rte_reader(tmp_path):
    ex = TASKS["rte"].read(head(require_shared("glue/rte/dev.tsv"), tmp_path / "dev.tsv", 3))
    assert ex[0].label == "not_entailment" and ex[0].text_pair == "Christopher Reeve had an accident."


def test_stsb_reader_scores_and_extra_columns(tmp_path):
    src = require_shared("glue/stsb/sts-train.csv")
    ex = TASKS["stsb"].read(head(src, tmp_path / "sts-train.csv", 3))
    assert [e.label for e in ex] == [5.0, 3.8, 3.8]
    assert (ex[0].text, ex[0].text_pair) == ("A plane is taking off.", "An air plane is taking off.")
    # some rows carry two extra source columns: still read from columns 5-7
    with open(src, encoding="utf-8") as f:
        nine = next(line for line in f if line.count("\t") == 8)
    (tmp_path / "nine.csv").write_text(nine, encoding="utf-8")
    (e,) = TASKS["stsb"].read(tmp_path / "nine.csv")
    assert isinstance(e.label, float) and "http" not in e.text_pair


def test_conll2000_reader(tmp_path):
    ex = TASKS["conll2000"].read(blank_line_head(require_shared("tagging/conll2000/train.txt"),
                                                 tmp_path / "train.txt", 2))
    assert len(ex) == 2
    assert ex[0].text[:4] == ["Confidence", "in", "the", "pound"]
    assert ex[0].label[:4] == ["B-NP", "B-PP", "B-NP", "I-NP"]
    assert len(ex[0].text) == len(ex[0].label)
    assert all(t in CONLL2000_TAGS for e in ex for t in e.label)


def test_fce_reader(tmp_path):
    ex = TASKS["fce"].read(blank_line_head(require_shared("tagging/fce/fce-public.train.original.tsv"),
                                           tmp_path / "fce.tsv", 5))
    assert ex[0].text == ["Dear", "Sir", "or", "Madam", ","]
    assert set(t for e in ex for t in e.label) <= {"correct", "incorrect"}
    assert any("incorrect" in e.label for e in ex)


def test_default_file_names_and_carved_dev(tmp_path):
    src = require_shared("tagging/fce")
    blank_line_head(src / "fce-public.train.original.tsv", tmp_path / "fce" / "fce-public.train.original.tsv", 40)
    blank_line_head(src / "fce-public.test.original.tsv", tmp_path / "fce" / "fce-public.test.original.tsv", 5)
    data = load_task_data(TASKS["fce"], tmp_path / "fce")
    assert (len(data.train), len(data.dev), len(data.test)) == (36, 4, 5)
    assert data.labels == ["correct", "incorrect"] and data.task.metrics[0] == "f0.5"
    again = load_task_data(TASKS["fce"], tmp_path / "fce", max_train_examples=10)
    assert [e.source for e in again.dev] == [e.source for e in data.dev]  # fixed dev, independent of subsampling
    assert len(again.train) == 10 and not {e.source for e in again.train} & {e.source for e in data.dev}


def test_glue_task_folder(tmp_path):
    src = require_shared("glue/rte")
    head(src / "train.tsv", tmp_path / "rte" / "train.tsv", 30)
    head(src / "dev.tsv", tmp_path / "rte" / "dev.tsv", 10)
    data = load_task_data(TASKS["rte"], tmp_path / "rte", max_eval_examples=5)
    assert (len(data.train), len(data.dev), data.test) == (29, 5, None)
    assert data.files["dev"].endswith("dev.tsv")


# ---- generic files and errors --------------------------------------------------------------------

def write(p: Path, text: str) -> Path:
    p.write_text(text, encoding="utf-8")
    return p


def test_generic_csv_jsonl_and_tagging_forms(tmp_path):
    csv_task = generic_task("classification", text_column="text", label_column="y", train_file="a.csv")
    ex = csv_task.read(write(tmp_path / "a.csv", 'text,y\n"hello, world",pos\nbye,neg\n'))
    assert [(e.text, e.label) for e in ex] == [("hello, world", "pos"), ("bye", "neg")]
    pair = generic_task("pair-classification", text_column="a", text_pair_column="b", label_column="l",
                        train_file="p.jsonl")
    (e,) = pair.read(write(tmp_path / "p.jsonl", '{"a": "x y", "b": "z", "l": 1}\n'))
    assert (e.text, e.text_pair, e.label) == ("x y", "z", "1")
    tag = generic_task("tagging", text_column="w", label_column="t", train_file="t.jsonl")
    (e,) = tag.read(write(tmp_path / "t.jsonl", '{"w": ["New", "York"], "t": ["B-LOC", "I-LOC"]}\n'))
    assert e.text == ["New", "York"] and e.label == ["B-LOC", "I-LOC"]
    tsv = generic_task("tagging", text_column="0", label_column="1", train_file="t.tsv", header=False)
    (e,) = tsv.read(write(tmp_path / "t.tsv", "a b c\tO B-X I-X\n"))
    assert e.label == ["O", "B-X", "I-X"]
    conll = generic_task("tagging", text_column=None, label_column=None, train_file="t.conll")
    assert len(conll.read(write(tmp_path / "t.conll", "-DOCSTART- O\n\na X O\nb Y B-NP\n\nc Z O\n"))) == 2
    data = load_task_data(tag, train=tmp_path / "t.jsonl", dev=tmp_path / "t.jsonl")
    assert data.task.metrics[0] == "chunk_f1"  # BIO tags: chunk F1 first


@pytest.mark.parametrize("content, task_type, message", [
    ("text,y\n", "classification", "a.csv: no examples"),
    ("", "classification", "a.csv: empty file"),
    ("text,y\nok,1\nonly-one-column\n", "classification", "a.csv:3: expected at least 2"),
    ("text,y\nok,1.5\nbad,high\n", "regression", "a.csv:3: label 'high' is not a number"),
    ("text,y\n,1\n", "classification", "a.csv:2: empty text"),
    ("txt,y\nok,1\n", "classification", "a.csv:1: no column named 'text'"),
])
def test_generic_errors_name_file_and_line(tmp_path, content, task_type, message):
    task = generic_task(task_type, text_column="text", label_column="y", train_file="a.csv")
    with pytest.raises(TaskDataError, match=message.replace(".", r"\.")):
        task.read(write(tmp_path / "a.csv", content))


def test_tagging_length_mismatch_and_bad_json(tmp_path):
    tag = generic_task("tagging", text_column="w", label_column="t", train_file="t.jsonl")
    with pytest.raises(TaskDataError, match=r"t\.jsonl:2: 2 words but 1 tags"):
        tag.read(write(tmp_path / "t.jsonl", '{"w": ["a"], "t": ["O"]}\n{"w": ["a", "b"], "t": ["O"]}\n'))
    with pytest.raises(TaskDataError, match=r"t\.jsonl:1: not valid JSON"):
        tag.read(write(tmp_path / "t.jsonl", "{oops\n"))
    with pytest.raises(TaskDataError, match=r"c\.txt:1: expected at least 3 columns"):
        TASKS["conll2000"].read(write(tmp_path / "c.txt", "word NN\n"))
    with pytest.raises(TaskDataError, match=r"f\.tsv:2: unknown label 'x'"):
        TASKS["fce"].read(write(tmp_path / "f.tsv", "a\tc\nb\tx\n"))


def test_unknown_dev_label_names_dev_file_and_line(tmp_path):
    task = generic_task("classification", text_column="text", label_column="y", train_file="tr.csv")
    write(tmp_path / "tr.csv", "text,y\na,pos\nb,neg\n")
    write(tmp_path / "dev.csv", "text,y\nc,pos\nd,neutral\n")
    with pytest.raises(TaskDataError, match=r"dev\.csv:3: unknown label 'neutral'"):
        load_task_data(task, train=tmp_path / "tr.csv", dev=tmp_path / "dev.csv")
    write(tmp_path / "one.csv", "text,y\na,pos\nb,pos\n")
    with pytest.raises(TaskDataError, match="single label"):
        load_task_data(task, train=tmp_path / "one.csv", dev=tmp_path / "one.csv")
    with pytest.raises(TaskDataError, match="no such file"):
        load_task_data(task, train=tmp_path / "missing.csv", dev=tmp_path / "dev.csv")


def test_labels_learned_in_natural_order(tmp_path):
    task = generic_task("classification", text_column="t", label_column="y", train_file="tr.jsonl")
    write(tmp_path / "tr.jsonl", "".join(json.dumps({"t": f"s{i}", "y": y}) + "\n" for i, y in enumerate([10, 2, 1])))
    data = load_task_data(task, train=tmp_path / "tr.jsonl", dev=tmp_path / "tr.jsonl")
    assert data.labels == ["1", "2", "10"]


def test_split_dev_and_subsample_are_fixed():
    ex = [Example(str(i), "a", source=str(i)) for i in range(50)]
    tr, dev = train_dev_split(ex)
    assert len(dev) == 5 and len(tr) == 45 and not {e.text for e in tr} & {e.text for e in dev}
    assert [e.text for e in train_dev_split(ex)[1]] == [e.text for e in dev]
    sub = subsample(ex, 7)
    assert len(sub) == 7 and [e.text for e in sub] == [e.text for e in subsample(ex, 7)]
    assert [int(e.text) for e in sub] == sorted(int(e.text) for e in sub)  # file order kept


def test_word_piece_alignment():
    # [CLS] new york ##er [SEP]: word 1 has two pieces
    word_ids = [None, 0, 1, 1, None]
    assert align_word_labels(word_ids, [3, 4]) == [IGNORE_INDEX, 3, 4, IGNORE_INDEX, IGNORE_INDEX]
    assert pieces_to_words(word_ids, [9, 1, 2, 5, 9], 3) == [1, 2, None]  # word 2 was truncated away
    assert pieces_to_words(word_ids, [9, 1, 2, 5, 9], 2, reduce="max") == [1, 5]


# ---- metrics, checked by hand --------------------------------------------------------------------

def test_accuracy_f1_mcc_by_hand():
    y, p = [1, 1, 1, 0, 0], [1, 1, 0, 0, 1]  # tp 2, fn 1, tn 1, fp 1
    assert M.accuracy(y, p) == pytest.approx(3 / 5)
    assert M.f1(y, p) == pytest.approx(2 / 3)
    assert M.matthews_corrcoef(y, p) == pytest.approx((2 * 1 - 1 * 1) / math.sqrt(3 * 3 * 2 * 2))
    assert M.matthews_corrcoef([0, 1, 0, 1], [0, 1, 0, 1]) == pytest.approx(1.0)
    assert M.matthews_corrcoef([0, 1, 0, 1], [1, 1, 1, 1]) == 0.0  # undefined -> 0
    r = M.precision_recall_fbeta(["i", "c", "i", "c"], ["i", "i", "i", "i"], "i", beta=0.5)
    assert (r["precision"], r["recall"]) == (0.5, 1.0)
    assert r["f"] == pytest.approx(1.25 * 0.5 / (0.25 * 0.5 + 1.0))
    assert M.macro_f1(["a", "a", "b"], ["a", "b", "b"]) == pytest.approx((2 / 3 + 2 / 3) / 2)


def test_mcc_multiclass_matches_formula():
    y, p = [0, 1, 2, 2, 1, 0], [0, 2, 2, 2, 1, 1]
    c = np.zeros((3, 3))
    for a, b in zip(y, p, strict=True):
        c[a, b] += 1
    n, s = c.sum(), np.trace(c)
    t, q = c.sum(1), c.sum(0)
    expected = (s * n - t @ q) / math.sqrt((n * n - q @ q) * (n * n - t @ t))
    assert M.matthews_corrcoef(y, p) == pytest.approx(expected)


def test_correlations_by_hand_and_against_scipy():
    assert M.pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(15 / math.sqrt(228))
    assert list(M.rankdata([10, 20, 20, 5])) == [2.0, 3.5, 3.5, 1.0]
    assert M.spearman([1, 2, 3, 4], [10, 20, 30, 1000]) == pytest.approx(1.0)
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 5, 50).astype(float), rng.normal(size=50)
    assert M.spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)
    assert M.pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic)


def test_roc_auc_and_best_threshold_by_hand():
    assert M.roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    assert M.roc_auc([0, 1], [0.5, 0.5]) == pytest.approx(0.5)  # a tie counts one half
    assert math.isnan(M.roc_auc([1, 1], [0.2, 0.3]))  # undefined with one class: NaN (one rule, test_metrics)
    best = M.best_threshold_fbeta([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.1], beta=0.5)
    # >= 0.9: P 1, R 1/2 -> F0.5 = 1.25 * 0.5 / (0.25 + 0.5); lower thresholds do worse
    assert best["threshold"] == 0.9 and best["f"] == pytest.approx(1.25 * 0.5 / 0.75)
    tied = M.best_threshold_fbeta([1, 0], [0.5, 0.5], beta=0.5)  # cannot cut between tied scores
    assert tied["precision"] == 0.5 and tied["recall"] == 1.0


def test_chunk_spans_follow_conlleval():
    assert M.chunk_spans(["B-NP", "I-NP", "O", "B-VP", "I-NP"]) == {(0, 2, "NP"), (3, 4, "VP"), (4, 5, "NP")}
    assert M.chunk_spans(["O", "I-NP", "I-NP"]) == {(1, 3, "NP")}  # I- after O opens a chunk
    assert M.chunk_spans(["B-NP", "B-NP"]) == {(0, 1, "NP"), (1, 2, "NP")}
    r = M.chunk_f1([["B-NP", "I-NP", "B-VP"]], [["B-NP", "B-NP", "B-VP"]])
    # gold {NP 0-2, VP 2-3}; predicted {NP 0-1, NP 1-2, VP 2-3}: 1 correct
    assert (r["precision"], r["recall"]) == pytest.approx((1 / 3, 1 / 2))
    assert r["f1"] == pytest.approx(0.4)


def test_task_metrics_per_task():
    mrpc = task_metrics(TASKS["mrpc"], ["equivalent", "not_equivalent"], ["equivalent", "equivalent"])
    assert mrpc == pytest.approx({"f1": 2 / 3, "accuracy": 0.5})
    fce = task_metrics(TASKS["fce"], [["correct", "incorrect"]], [["incorrect", "incorrect"]])
    assert fce["f0.5"] == pytest.approx(1.25 * 0.5 / 1.125) and fce["token_accuracy"] == 0.5
    sts = task_metrics(TASKS["stsb"], [1.0, 2.0, 3.0], [2.0, 4.0, 7.0])
    assert sts["pearson"] == pytest.approx(15 / math.sqrt(228)) and sts["spearman"] == pytest.approx(1.0)
