"""electric.evaluation.metrics: the values it gave before scikit-learn, SciPy and seqeval took over the counting
(computed by the NumPy implementation it replaced, on the inputs below) and its conventions for undefined
cases."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from electric.evaluation import metrics as M

Y3 = [2, 2, 2, 2, 0, 1, 0, 0, 1, 1, 2, 0, 2, 2, 1, 1, 2, 1, 0, 2, 0, 2, 0, 2, 0, 1, 1, 2, 2, 0, 2, 2, 0, 1, 1,
      0, 0, 1, 1, 2]
P3 = [2, 0, 1, 2, 0, 1, 0, 2, 1, 2, 2, 0, 2, 2, 1, 1, 2, 1, 0, 0, 0, 1, 0, 1, 0, 2, 2, 2, 2, 0, 1, 2, 1, 0, 1,
      0, 0, 1, 1, 2]
X = [-0.829, 0.901, 1.626, 0.306, -1.506, -0.645, -0.18, -1.623, -0.138, -1.273, 0.793, 0.684, -0.076, -1.255,
     0.289, -0.637, -0.688, 1.11, -0.757, -1.377, 0.79, 1.778, 1.609, 0.781, 2.092, -0.356, 2.175, 2.098,
     -0.342, 0.413]
Y = [-1.858, 0.08, 2.079, -0.625, -1.334, -0.275, -0.068, -0.84, 1.428, -1.117, 1.611, 1.895, -0.426, -1.774,
     -1.642, -0.275, 0.173, 1.479, 0.945, -0.131, 1.466, 1.771, 0.928, 0.892, 2.517, -0.385, 1.955, 1.814,
     0.243, -0.931]
S = [0.3, 0.8, 0.5, 0.6, 0.0, 0.8, 0.4, 0.9, 1.0, 0.9, 0.7, 0.2, 0.2, 0.4, 0.2, 0.9, 0.4, 0.7, 0.2, 0.6, 0.1,
     0.3, 0.8, 0.4, 0.8, 0.5, 0.5, 0.5, 0.4, 0.5]  # many ties
L = [0, 0, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1]
LP = [int(s >= 0.5) for s in S]

# (id, function, args, kwargs, the value the NumPy implementation gave)
PINNED = [
    ("accuracy-binary", "accuracy", ([0, 1, 1, 0, 1], [0, 1, 0, 0, 0]), {}, 0.6),
    ("accuracy-3class", "accuracy", (Y3, P3), {}, 0.7),
    ("accuracy-strings", "accuracy", (["a", "b", "c"], ["a", "c", "c"]), {}, 0.6666666666666666),
    ("mcc-binary", "matthews_corrcoef", ([1, 1, 0, 0, 1], [1, 0, 0, 1, 1]), {}, 0.16666666666666666),
    ("mcc-thresholded", "matthews_corrcoef", (L, LP), {}, 0.049773755656108594),
    ("mcc-3class", "matthews_corrcoef", (Y3, P3), {}, 0.5504302401893566),
    ("mcc-strings", "matthews_corrcoef", (["c", "i", "i", "c", "c"], ["c", "i", "c", "c", "i"]), {},
        0.16666666666666666),
    ("mcc-inverse", "matthews_corrcoef", ([0, 1, 0, 1], [1, 0, 1, 0]), {}, -1.0),
    ("mcc-constant-prediction", "matthews_corrcoef", ([0, 1, 0, 1], [1, 1, 1, 1]), {}, 0.0),
    ("mcc-constant-gold", "matthews_corrcoef", ([2, 2, 2], [0, 2, 1]), {}, 0.0),
    ("mcc-one-label", "matthews_corrcoef", ([1, 1, 1], [1, 1, 1]), {}, 0.0),
    ("prf-beta-half-strings", "precision_recall_fbeta", (["i", "c", "i", "c"], ["i", "i", "i", "i"], "i"),
        {"beta": 0.5}, {"precision": 0.5, "recall": 1.0, "f": 0.5555555555555556}),
    ("prf-3class", "precision_recall_fbeta", (Y3, P3, 2), {}, {"precision": 0.7142857142857143, "recall":
        0.625, "f": 0.6666666666666666}),
    ("prf-3class-beta-half", "precision_recall_fbeta", (Y3, P3, 0), {"beta": 0.5}, {"precision":
        0.7692307692307693, "recall": 0.8333333333333334, "f": 0.7812499999999999}),
    ("prf-beta-2", "precision_recall_fbeta", (L, LP, 1), {"beta": 2.0}, {"precision": 0.5882352941176471,
        "recall": 0.5882352941176471, "f": 0.5882352941176471}),
    ("prf-never-predicted", "precision_recall_fbeta", ([1, 0, 1], [0, 0, 0], 1), {}, {"precision": 0.0,
        "recall": 0.0, "f": 0.0}),
    ("prf-absent-from-gold", "precision_recall_fbeta", ([0, 0, 0], [1, 0, 1], 1), {}, {"precision": 0.0,
        "recall": 0.0, "f": 0.0}),
    ("prf-absent-from-both", "precision_recall_fbeta", ([0, 0], [0, 0], 1), {"beta": 0.5}, {"precision": 0.0,
        "recall": 0.0, "f": 0.0}),
    ("f1-binary", "f1", ([0, 1, 1, 0, 1], [0, 1, 0, 0, 0]), {}, 0.5),
    ("f1-thresholded", "f1", (L, LP), {}, 0.5882352941176471),
    ("f1-positive-label", "f1", (["x", "y", "x"], ["x", "x", "y"]), {"positive": "x"}, 0.5),
    ("macro-f1-3class", "macro_f1", (Y3, P3), {}, 0.7022222222222222),
    ("macro-f1-label-only-predicted", "macro_f1", (["a", "a", "b"], ["a", "b", "c"]), {}, 0.3333333333333333),
    ("macro-f1-constant-prediction", "macro_f1", ([0, 1, 2, 2], [2, 2, 2, 2]), {}, 0.2222222222222222),
    ("rankdata-ties", "rankdata", ([10, 20, 20, 5],), {}, [2.0, 3.5, 3.5, 1.0]),
    ("rankdata-many-ties", "rankdata", (S,), {}, [7.5, 24.5, 16.0, 19.5, 1.0, 24.5, 11.0, 28.0, 30.0, 28.0,
        21.5, 4.5, 4.5, 11.0, 4.5, 28.0, 11.0, 21.5, 4.5, 19.5, 2.0, 7.5, 24.5, 11.0, 24.5, 16.0, 16.0, 16.0,
        11.0, 16.0]),
    ("pearson", "pearson", (X, Y), {}, 0.7645994246620703),
    ("pearson-ints", "pearson", ([1, 2, 3], [2, 4, 7]), {}, 0.9933992677987828),
    ("pearson-constant", "pearson", ([1, 1, 1], [1, 2, 3]), {}, 0.0),
    ("pearson-both-constant", "pearson", ([4.0, 4.0], [2.0, 2.0]), {}, 0.0),
    ("pearson-one-example", "pearson", ([1.0], [2.0]), {}, 0.0),
    ("spearman", "spearman", (X, Y), {}, 0.7493603339283652),
    ("spearman-ties", "spearman", (S, X), {}, 0.04662240587359719),
    ("spearman-monotone", "spearman", ([1, 2, 3, 4], [10, 20, 30, 1000]), {}, 1.0),
    ("spearman-constant", "spearman", ([5, 5, 5, 5], [1, 2, 3, 4]), {}, 0.0),
    ("spearman-one-example", "spearman", ([1], [3]), {}, 0.0),
    ("roc-auc", "roc_auc", ([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]), {}, 0.75),
    ("roc-auc-tie", "roc_auc", ([0, 1], [0.5, 0.5]), {}, 0.5),
    ("roc-auc-many-ties", "roc_auc", (L, S), {}, 0.4638009049773756),
    ("roc-auc-bool-labels", "roc_auc", ([True, False, True, False], [0.2, 0.1, 0.2, 0.3]), {}, 0.5),
    ("roc-auc-continuous", "roc_auc", (L, X), {}, 0.38009049773755654),
    ("threshold", "best_threshold_fbeta", ([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.1]), {"beta": 0.5}, {"threshold":
        0.9, "f": 0.8333333333333334, "precision": 1.0, "recall": 0.5}),
    ("threshold-tie", "best_threshold_fbeta", ([1, 0], [0.5, 0.5]), {"beta": 0.5}, {"threshold": 0.5, "f":
        0.5555555555555556, "precision": 0.5, "recall": 1.0}),
    ("threshold-many-ties", "best_threshold_fbeta", (L, S), {"beta": 0.5}, {"threshold": 0.0, "f":
        0.6204379562043796, "precision": 0.5666666666666667, "recall": 1.0}),
    ("threshold-many-ties-f1", "best_threshold_fbeta", (L, S), {"beta": 1.0}, {"threshold": 0.0, "f":
        0.7234042553191489, "precision": 0.5666666666666667, "recall": 1.0}),
    ("threshold-continuous", "best_threshold_fbeta", (L, X), {}, {"threshold": -1.623, "f":
        0.6204379562043796, "precision": 0.5666666666666667, "recall": 1.0}),
    ("threshold-equal-f-keeps-highest", "best_threshold_fbeta", ([1, 0, 0, 1], [0.9, 0.8, 0.7, 0.1]), {"beta":
        1.0}, {"threshold": 0.9, "f": 0.6666666666666666, "precision": 1.0, "recall": 0.5}),
    ("threshold-no-positive", "best_threshold_fbeta", ([0, 0, 0], [0.1, 0.5, 0.3]), {}, {"threshold": 0.5,
        "f": 0.0, "precision": 0.0, "recall": 0.0}),
    ("threshold-all-positive", "best_threshold_fbeta", ([1, 1, 1], [0.1, 0.5, 0.3]), {}, {"threshold": 0.1,
        "f": 1.0, "precision": 1.0, "recall": 1.0}),
    ("spans-bio", "chunk_spans", (["B-NP", "I-NP", "O", "B-VP", "I-NP"],), {}, {(0, 2, "NP"), (3, 4, "VP"),
        (4, 5, "NP")}),
    ("spans-i-after-o", "chunk_spans", (["O", "I-NP", "I-NP"],), {}, {(1, 3, "NP")}),
    ("spans-b-after-b", "chunk_spans", (["B-NP", "B-NP"],), {}, {(0, 1, "NP"), (1, 2, "NP")}),
    ("spans-iob1", "chunk_spans", (["I-NP", "I-NP", "B-NP", "I-VP", "I-VP", "O"],), {}, {(0, 2, "NP"), (2, 3,
        "NP"), (3, 5, "VP")}),
    ("spans-iobes", "chunk_spans", (["S-PER", "B-LOC", "E-LOC", "I-LOC", "O", "E-LOC"],), {}, {(0, 1, "PER"),
        (1, 3, "LOC"), (3, 4, "LOC"), (5, 6, "LOC")}),
    ("spans-untyped-tags-are-o", "chunk_spans", (["B", "I", "B-NP", "I", "I-NP"],), {}, {(2, 3, "NP"), (4, 5,
        "NP")}),
    ("spans-none", "chunk_spans", (["O", "O"],), {}, set()),
    ("chunk-f1", "chunk_f1", ([["B-NP", "I-NP", "B-VP"]], [["B-NP", "B-NP", "B-VP"]]), {}, {"precision":
        0.3333333333333333, "recall": 0.5, "f1": 0.4}),
    ("chunk-f1-sentences", "chunk_f1", ([["B-NP", "I-NP"], ["I-NP", "O", "B-PP", "B-NP"], []], [["B-NP",
        "I-NP"], ["B-NP", "O", "B-PP", "I-PP"], []]), {}, {"precision": 0.6666666666666666, "recall": 0.5,
        "f1": 0.5714285714285715}),
    ("chunk-f1-no-prediction", "chunk_f1", ([["B-NP", "I-NP", "O"]], [["O", "O", "O"]]), {}, {"precision":
        0.0, "recall": 0.0, "f1": 0.0}),
    ("chunk-f1-no-gold", "chunk_f1", ([["O", "O"]], [["B-NP", "O"]]), {}, {"precision": 0.0, "recall": 0.0,
        "f1": 0.0}),
    ("chunk-f1-no-chunks", "chunk_f1", ([["O"]], [["O"]]), {}, {"precision": 0.0, "recall": 0.0, "f1": 0.0}),
    ("chunk-f1-no-sentences", "chunk_f1", ([], []), {}, {"precision": 0.0, "recall": 0.0, "f1": 0.0}),
]


def _approx(v):
    if isinstance(v, dict):
        return {k: _approx(x) for k, x in v.items()}
    if isinstance(v, set):
        return v
    return pytest.approx(v, rel=1e-12, abs=1e-15)


@pytest.mark.filterwarnings("error")  # undefined cases are 0.0 without a library warning
@pytest.mark.parametrize("fn, args, kwargs, expected", [c[1:] for c in PINNED], ids=[c[0] for c in PINNED])
def test_values_pinned_before_the_libraries_took_over(fn, args, kwargs, expected):
    got = getattr(M, fn)(*args, **kwargs)
    if isinstance(got, np.ndarray):
        got = got.tolist()
    assert got == _approx(expected)
    assert type(got) is type(expected)  # plain floats, dicts and sets: JSON reports need no NumPy scalars


@pytest.mark.parametrize("call, message", [
    (lambda: M.accuracy([0, 1], [0]), r"differ in shape: \(2,\) vs \(1,\)"),
    (lambda: M.matthews_corrcoef([], []), "no examples to score"),
    (lambda: M.pearson([1.0, 2.0, 3.0], [1.0, 2.0]), "differ in shape"),
    (lambda: M.best_threshold_fbeta([], []), "no examples to score"),
    (lambda: M.chunk_f1([["O"]], []), "1 gold sentences but 0 predicted"),
    (lambda: M.chunk_f1([["O"], ["B-NP", "O"]], [["O"], ["O"]]), "sentence 1: 2 gold tags but 1 predicted"),
])
def test_bad_inputs_raise_value_error_naming_sizes(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_importing_the_task_registry_loads_no_metric_library():
    """scikit-learn alone takes about a second to import: the metrics load their libraries on first use."""
    code = ("import sys, electric.finetuning.tasks, electric.evaluation.metrics; "
            "print(sorted(m for m in ('sklearn', 'scipy', 'seqeval') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_undefined_rank_metrics_have_one_rule():
    """One Spearman and one ROC-AUC in the project, each with one rule for degenerate input: Spearman 0.0,
    ROC-AUC NaN (one class absent)."""
    import math

    from electric.export import parity

    assert parity.spearman is M.spearman and M.spearman([1, 2, 3], [7, 7, 7]) == 0.0
    assert math.isnan(M.roc_auc([1, 1], [0.2, 0.3])) and math.isnan(M.roc_auc([False, False], [0.2, 0.3]))
