"""Evaluation output a user can trust (issue 16, item 4): BLiMP per field, `--quiet` silences every
progress bar, and an error about a malformed line quotes at most ~200 characters of it."""

from __future__ import annotations

import json

import pytest
from conftest import require_shared

from electric.cli import main as cli

pytestmark = pytest.mark.usefixtures("one_thread")

LONG = 5000  # characters of a malformed line
MAX_MESSAGE = 350  # an error about it stays this short, its file path aside (line number, ~200 quoted characters)


def short(message: str, path) -> int:
    """The length of `message` without the file path it names (tmp_path's length varies from run to run)."""
    return len(message.replace(str(path), ""))


def blimp_line(good: str, bad: str, field: str | None) -> str:
    return json.dumps({"sentence_good": good, "sentence_bad": bad, **({"field": field} if field else {})}) + "\n"


@pytest.fixture
def blimp_dir(tmp_path):
    """Five tiny sets; BLiMP spells syntax-semantics three ways (its files: syntax_semantics, one set of the full
    release syntax/semantics, its README: with a hyphen). In each pair the good sentence is the shorter one."""
    d = tmp_path / "blimp"
    d.mkdir()
    pairs = [("the cat sleeps .", "the cat sleep quickly ."), ("they left .", "them left here now .")]
    for name, field in (("binding_a", "syntax_semantics"), ("binding_b", "syntax-semantics"),
                        ("binding_c", "syntax/semantics"), ("agreement", "morphology"), ("unlabelled", None)):
        (d / f"{name}.jsonl").write_text("".join(blimp_line(g, b, field) for g, b in pairs))
    return d


# ---- BLiMP per field ---------------------------------------------------------------------------------

def test_blimp_accuracy_per_field_merges_the_two_spellings(blimp_dir):
    from electric.evaluation.blimp import blimp_accuracy, blimp_field, read_blimp

    assert blimp_field("syntax-semantics") == blimp_field("syntax_semantics") == blimp_field(" Syntax_Semantics ") \
        == blimp_field("syntax/semantics") == "syntax_semantics"
    sets = read_blimp(blimp_dir)
    assert sets["binding_b"].field == "syntax_semantics" and sets["unlabelled"].field is None
    res = blimp_accuracy(sets, lambda texts: [-len(t) for t in texts])  # shorter = better: every pair right
    assert list(res["fields"]) == ["morphology", "syntax_semantics"]  # BLiMP's order; unlabelled sets in none
    assert res["fields"]["syntax_semantics"] == {"accuracy": 100.0, "pairs": 6, "ties": 0, "sets": 3}
    assert res["sets"]["binding_a"]["field"] == "syntax_semantics" and "field" not in res["sets"]["unlabelled"]
    res = blimp_accuracy(sets, lambda texts: [len(t) for t in texts])  # longer = better: every pair wrong
    assert res["fields"]["morphology"]["accuracy"] == 0.0 and res["overall"]["pairs"] == 10
    assert "correct" not in res
    res = blimp_accuracy(sets, lambda texts: [-len(t) + 100 * ("them" in t) for t in texts], per_pair=True)
    assert res["correct"] == {k: [True, False] for k in sets}  # per pair, in order: "them left ..." wins


@pytest.mark.integration
def test_eval_blimp_prints_and_reports_fields_on_the_real_sets(trained_run, tmp_path, capsys):
    data = require_shared("blimp")
    fields = {json.loads(f.open().readline())["field"] for f in data.glob("*.jsonl")}
    assert cli(["eval", "blimp", "--model", str(trained_run), "--data", str(data), "--limit", "3", "--quiet",
                "--report", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "r.json").read_text())
    assert set(report["fields"]) == {f.replace("-", "_").replace("/", "_") for f in fields}
    assert sum(f["pairs"] for f in report["fields"].values()) == report["overall"]["pairs"]
    assert "by field" in out and "\nsyntax_semantics " in out


# ---- --quiet -------------------------------------------------------------------------------------------

@pytest.fixture
def progress_bars_on(monkeypatch):
    """Progress bars as a fresh process has them (another test may have switched them off), restored after."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    for var in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(var, raising=False)
    hf_was, hub_was = hf_logging.is_progress_bar_enabled(), not are_progress_bars_disabled()
    hf_logging.enable_progress_bar()
    enable_progress_bars()
    yield
    (hf_logging.enable_progress_bar if hf_was else hf_logging.disable_progress_bar)()
    (enable_progress_bars if hub_was else disable_progress_bars)()


def fce_head(tmp_path, sentences: int = 20):
    lines, n = [], 0
    for line in require_shared("tagging/fce/fce-public.test.original.tsv").read_text().splitlines(keepends=True):
        lines.append(line)
        n += not line.strip()
        if n == sentences:
            break
    path = tmp_path / "fce.tsv"
    path.write_text("".join(lines))
    return path


@pytest.mark.integration
@pytest.mark.parametrize("command", ["eval detect", "eval blimp", "score"])
def test_quiet_prints_no_progress_bar_not_even_weight_loading(command, trained_run, tmp_path, capsys,
                                                              progress_bars_on):
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat on the mat .\nshow me flights from boston to denver\n")
    args = {"eval detect": ["eval", "detect", "--data", str(fce_head(tmp_path))],
            "eval blimp": ["eval", "blimp", "--data", str(require_shared("blimp")), "--limit", "2"],
            "score": ["score", str(texts)]}[command]
    assert cli([*args, "--model", str(trained_run), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "Loading weights" not in err and "it/s" not in err and "%|" not in err, err


# ---- malformed lines are quoted, not dumped -------------------------------------------------------------

def test_quote_cuts_long_text_and_says_how_long_it_was():
    from electric.textio import QUOTE_LIMIT, quote

    assert quote("short line") == "'short line'"
    q = quote("x" * LONG)
    assert q.startswith("'" + "x" * QUOTE_LIMIT + "'") and f"{LONG:,} characters" in q and len(q) < QUOTE_LIMIT + 40
    assert quote(["y" * LONG]).endswith(f"({LONG + 4:,} characters)")  # not a string: its repr, cut


@pytest.mark.integration
def test_eval_detect_error_on_a_malformed_line_quotes_only_its_start(trained_run, tmp_path, capsys):
    bad = tmp_path / "fce.tsv"
    bad.write_text("The\tc\ncat\tc\n" + "word " * (LONG // 5) + "\n")  # a line without its tag column
    assert cli(["eval", "detect", "--model", str(trained_run), "--data", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{bad}:3:" in err and f"{LONG:,} characters" in err and short(err, bad) < MAX_MESSAGE, err


def test_blimp_error_on_a_malformed_line_quotes_only_its_start(tmp_path):
    from electric.evaluation.blimp import BlimpDataError, read_blimp

    for junk in ("{" + "x" * LONG, json.dumps({"sentence_good": "a" * LONG})):
        (tmp_path / "set.jsonl").write_text(blimp_line("good .", "bad bad .", "syntax") + junk + "\n")
        with pytest.raises(BlimpDataError, match="line 2") as e:
            read_blimp(tmp_path / "set.jsonl")
        assert short(str(e.value), tmp_path / "set.jsonl") < MAX_MESSAGE and "characters)" in str(e.value)


def test_task_and_nbest_errors_quote_a_long_value_only_in_part(tmp_path):
    from electric.evaluation.nbest import NBestError
    from electric.evaluation.nbest.readers import parse_espnet
    from electric.finetuning.tasks import TASKS, TaskDataError

    fce = tmp_path / "fce.tsv"
    fce.write_text("The\tc\ncat\t" + "i" * LONG + "\n")  # a tag that is not c or i
    with pytest.raises(TaskDataError, match="unknown label") as e:
        TASKS["fce"].read(fce)
    assert short(str(e.value), fce) < MAX_MESSAGE
    with pytest.raises(NBestError, match="finite number") as e:
        parse_espnet({"utt1": {"hyp_1": {"text": "a b", "score": "9" * LONG}}})
    assert len(str(e.value)) < MAX_MESSAGE
