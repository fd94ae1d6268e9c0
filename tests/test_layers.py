"""The library's shared helpers, each the one home of its idea: padding and length buckets (electric.batching),
word pieces <-> words (electric.words), run dir -> model dir (electric.checkpoint.resolve_model_dir) and
classifier/tagger post-processing (electric.inference.classify), on hand-made inputs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from electric.batching import length_bucket, pad_columns, pad_rows, pad_values, plan_batches
from electric.checkpoint import CheckpointError, resolve_model_dir, run_parts
from electric.inference.classify import classify_row, label_names, softmax, tag_row
from electric.inference.encoding import Encoded
from electric.words import IGNORE_INDEX, align_word_labels, pieces_to_words, word_groups


def test_pad_rows_pads_after_each_row_and_masks_the_padding():
    ids, mask = pad_rows([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and ids.dtype == np.int64
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert pad_values([[1], [2, 3]], IGNORE_INDEX, length=4).tolist() == [[1, -100, -100, -100], [2, 3, -100, -100]]
    assert pad_values([(), [4]], 0).tolist() == [[0], [4]]


def test_pad_columns_widens_a_batch_and_leaves_a_full_one_alone():
    a = np.array([[1, 2], [3, 0]])
    assert pad_columns(a, 4, 9).tolist() == [[1, 2, 9, 9], [3, 0, 9, 9]]
    same = np.ascontiguousarray(a, dtype=np.int64)
    assert pad_columns(same, 2, 9) is same


def test_offline_batches_sort_by_length_and_the_online_bucket_is_a_power_of_two():
    assert plan_batches([5, 1, 3, 2], batch_size=2, max_batch_tokens=10**9) == [[1, 3], [2, 0]]
    assert [length_bucket(n) for n in (1, 16, 17, 32, 33, 500)] == [4, 4, 5, 5, 6, math.ceil(math.log2(500))]


def test_word_groups_keep_word_order_and_give_each_special_its_own_group():
    word_ids = [None, 0, 0, 1, None]  # [CLS] he ##llo world [SEP]
    assert word_groups(word_ids, range(5)) == {-1: [0], 0: [1, 2], 1: [3], -5: [4]}
    assert word_groups(word_ids, [1, 2, 3]) == {0: [1, 2], 1: [3]}
    assert align_word_labels(word_ids, [7, 8]) == [IGNORE_INDEX, 7, IGNORE_INDEX, 8, IGNORE_INDEX]
    assert pieces_to_words(word_ids, [0, 3, 9, 4, 0], 2, reduce="max") == [9, 4]


def test_a_run_directory_resolves_to_its_part_and_a_model_directory_to_itself(tmp_path):
    run = tmp_path / "run"
    (run / "generator").mkdir(parents=True)
    assert run_parts(run) == {"generator": run / "generator"}
    assert resolve_model_dir(run, ("discriminator", "generator")) == run / "generator"
    with pytest.raises(CheckpointError, match="has no discriminator/"):
        resolve_model_dir(run, ("discriminator",))
    (run / ".discriminator.old").mkdir()  # a save killed between atomic_dir's renames left its complete copy
    assert resolve_model_dir(run, ("discriminator",)) == run / ".discriminator.old"
    assert resolve_model_dir(run / "generator") == run / "generator"


def test_classification_is_a_softmax_over_the_labels_in_id_order():
    assert label_names({"id2label": {"1": "pos", "0": "neg"}}) == ["neg", "pos"]
    assert label_names({"num_labels": 2}) == ["LABEL_0", "LABEL_1"]
    assert softmax(np.array([1000.0, 1000.0])).tolist() == [0.5, 0.5]  # no overflow
    c = classify_row(["neg", "pos"], False, np.array([0.0, math.log(3.0)]))
    assert c.label == "pos" and c.probabilities == pytest.approx({"neg": 0.25, "pos": 0.75})
    assert classify_row([], True, np.array([2.5])).to_dict() == {"label": None, "probabilities": {}, "value": 2.5,
                                                                  "truncated": False}


def test_a_tagged_word_takes_its_first_piece_label_and_spans_all_its_pieces():
    text = "hello world"
    enc = Encoded(index=0, text=text, input_ids=np.array([1, 10, 11, 12, 2]),
                  offsets=np.array([[0, 0], [0, 3], [3, 5], [6, 11], [0, 0]]),
                  candidates=np.array([False, True, True, True, False]), word_ids=[None, 0, 0, 1, None],
                  tokens=["[CLS]", "hel", "##lo", "world", "[SEP]"], num_input_tokens=5)
    logits = np.log(np.array([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.5, 0.5]]))  # (T, C)
    c = tag_row(["O", "X"], enc, logits)
    assert [(t.token, t.label) for t in c.tokens] == [("hel", "O"), ("##lo", "X"), ("world", "X")]
    assert [(w.token, w.start, w.end, w.label) for w in c.words] == [("hello", 0, 5, "O"), ("world", 6, 11, "X")]
    assert c.words[0].probability == pytest.approx(0.9)


def test_one_rule_for_the_shared_data_folder(monkeypatch, tmp_path):
    """$ELECTRIC_SHARED_DATA, else ../shared/data beside this checkout: the export's default sentences, the quick
    start, the benchmarks and these tests all ask electric.shared_data."""
    from electric.cli.export import default_sentences
    from electric.shared_data import shared_data_dir

    monkeypatch.delenv("ELECTRIC_SHARED_DATA", raising=False)
    repo = Path(__file__).resolve().parents[1]
    assert shared_data_dir() == repo.parent / "shared" / "data"
    monkeypatch.setenv("ELECTRIC_SHARED_DATA", str(tmp_path))
    assert shared_data_dir() == tmp_path and default_sentences() == tmp_path / "glue" / "sst2" / "dev.tsv"
