"""No output that looks like a failure when nothing failed (issue 12, item 10): transformers' "sequence
length is longer than the specified maximum" while tokenising a corpus, onnxruntime's advice to pre-process
before quantising, and pretraining progress bars in a log file or with a time budget."""

from __future__ import annotations

import io
import logging

import pytest

from training.progress import TrainProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def transformers_log():
    """Records of transformers' loggers (they do not propagate to the root logger, so caplog misses them)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def test_tokenising_whole_documents_does_not_warn_about_the_model_maximum(tokenizer_dir, transformers_log):
    from transformers import AutoTokenizer

    from electric.pretraining.data import _tokenize_and_pack

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)  # a fresh one: transformers warns once per tokenizer
    doc = "the committee will meet again next week to discuss the new budget proposal . " * 100  # > 512 pieces
    packed = _tokenize_and_pack({"text": [doc]}, tokenizer, 128)["input_ids"]
    assert len(packed) > 4 and all(len(row) <= 128 for row in packed)  # packing cut it, as it should
    assert not [r for r in transformers_log if "longer than the specified maximum" in r.getMessage()]


@pytest.mark.integration
def test_int8_export_does_not_print_the_preprocessing_advice(disc_dir, tmp_path, caplog):
    from electric.export.exporter import ExportOptions, export_model

    with caplog.at_level(logging.WARNING):
        # random weights rank at the int8 parity gate's edge: kept anyway, the advice is what is checked
        export_model(disc_dir, tmp_path / "onnx", ExportOptions(quantize="int8", force=True), log=lambda m: None)
    assert (tmp_path / "onnx" / "model.int8.onnx").is_file()
    assert not [r for r in caplog.records if "pre-processing before quantization" in r.getMessage()]
    assert not logging.getLogger().filters  # the filter is gone afterwards


def test_time_budget_bar_shows_time_not_a_changing_step_total():
    out = Terminal()
    p = TrainProgress("electric-tiny", 100, 0, 0.0, 180.0, file=out)
    for step, total, elapsed in ((1, 100, 2.0), (5, 250, 9.5), (10, 90, 20.0), (11, 90, 500.0)):  # refitted totals
        p.update(step, total, elapsed)
        assert p.bar.total == 180
    p.set_postfix({"loss": "3.2"})
    p.close()
    text = out.getvalue()
    assert "180/180 s of the time budget" in text and "electric-tiny step 11" in text and "loss=3.2" in text
    assert "/250" not in text and "/90" not in text


def test_step_bar_without_a_budget():
    out = Terminal()
    p = TrainProgress("electra-small", 1000, 10, 0.0, 0.0, file=out)
    p.update(11, 1000, 1.0)
    assert p.bar.total == 1000 and p.bar.n == 11
    p.close()
    assert "11/1000" in out.getvalue()


@pytest.mark.parametrize("budget_s, words", [(180.0, "step 2 (0.1 of 3.0 min), loss 3.2"), (0.0, "step 2/40 (5%)")])
def test_a_log_file_gets_plain_lines_and_no_bar(budget_s, words):
    log = io.StringIO()  # not a terminal
    p = TrainProgress("electric-tiny", 40, 0, 0.0, budget_s, file=log, every_s=0)
    p.set_postfix({"loss": "3.2"})
    p.update(1, 40, 3.0)
    p.update(2, 40, 6.0)
    p.write("WARNING at step 2: collapsed")
    p.close()
    assert p.bar is None and "\r" not in log.getvalue() and "|" not in log.getvalue()
    lines = log.getvalue().splitlines()
    assert len(lines) == 3 and words in lines[1] and lines[2] == "WARNING at step 2: collapsed"
    rare = io.StringIO()
    p = TrainProgress("electric-tiny", 40, 0, 0.0, budget_s, file=rare)  # one line a minute: the first one now
    for step in range(1, 6):
        p.update(step, 40, step * 0.1)
    assert rare.getvalue().count("\n") == 1 and "step 1" in rare.getvalue()


@pytest.mark.integration
def test_pretraining_into_a_log_file_writes_no_bar(wiki_sample, tokenizer_dir, tmp_path, capsys):
    from training.pretrain import main

    rc = main(["--objective", "electric", "--preset", "debug", "--data", str(wiki_sample), "--tokenizer",
               str(tokenizer_dir), "--out", str(tmp_path / "run"), "--max-steps", "100000", "--time-budget", "0.05",
               "--num-proc", "1"])
    assert rc == 0
    err = capsys.readouterr().err  # pytest's capture is not a terminal, like a log file
    assert "\r" not in err and "electric-debug: step 1 (" in err and "min)" in err
    assert "longer than the specified maximum" not in err


def test_loading_a_checkpoint_draws_no_bar_and_leaves_the_setting_as_it_was(disc_dir, mlm_dir, capsys, monkeypatch):
    from transformers import ElectraForPreTraining
    from transformers.utils import logging as hf_logging

    from electric.inference.masked_lm import load_masked_lm
    from electric.modeling.loading import load_model

    for var in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS"):  # bars as a fresh process has them
        monkeypatch.delenv(var, raising=False)
    was = hf_logging.is_progress_bar_enabled()
    try:
        for enabled in (True, False):
            (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
            load_model(disc_dir, ElectraForPreTraining)  # the one loader: scoring, the server, export, --init-from
            load_masked_lm(mlm_dir)
            assert hf_logging.is_progress_bar_enabled() == enabled
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()
    err = capsys.readouterr().err  # pytest's capture is not a terminal, like a log file
    assert "Loading weights" not in err and "%|" not in err, err
