"""Fast tests of research/adaptation/adapt_recipe.py: the splits and the CoNLL -> WSJ-style text conversion."""

import json

import pytest
from script_loader import load_script

recipe = load_script("research/adaptation/adapt_recipe.py")


def test_split_ids_disjoint_covering_reproducible():
    ids = [f"u{i}" for i in range(300)]
    a, b = recipe.split_ids(ids, 0.6667, seed=0)
    assert not set(a) & set(b)
    assert set(a) | set(b) == set(ids)
    assert len(a) == 200 and len(b) == 100
    assert recipe.split_ids(ids, 0.6667, seed=0) == (a, b)
    assert recipe.split_ids(ids, 0.6667, seed=1) != (a, b)
    assert a == sorted(a, key=ids.index)  # file order kept


def test_split_ids_rejects_bad_input():
    with pytest.raises(ValueError):
        recipe.split_ids(["a", "a", "b"], 0.5, 0)
    with pytest.raises(ValueError):
        recipe.split_ids(["a", "b"], 1.0, 0)


def _lists(n):
    return [{"id": f"utt{i}", "input": [f"hyp {i} a", f"hyp {i} b"], "output": f"ref {i}",
             "am_score": [-0.1, -0.2]} for i in range(n)]


def test_split_command_writes_disjoint_files(tmp_path):
    src = tmp_path / "train.json"
    src.write_text(json.dumps(_lists(30)))
    out = tmp_path / "atis"
    assert recipe.main(["split", "--nbest", str(src), "--out", str(out), "--seed", "3", "--exclude"]) == 0
    split = json.loads((out / "split.json").read_text())
    assert len(split["adapt"]) == 20 and len(split["tune"]) == 10
    assert not set(split["adapt"]) & set(split["tune"])
    tune = json.loads((out / "tune.json").read_text())
    assert [x["id"] for x in tune] == split["tune"]
    assert all("am_score" in x for x in tune)
    adapt_refs = [x for x in (out / "adapt.txt").read_text().split("\n\n") if x.strip()]
    assert adapt_refs == [f"ref {int(u[3:])}" for u in split["adapt"]]
    # same seed, same split
    out2 = tmp_path / "again"
    recipe.main(["split", "--nbest", str(src), "--out", str(out2), "--seed", "3", "--exclude"])
    assert json.loads((out2 / "split.json").read_text())["adapt"] == split["adapt"]


def test_split_excludes_utterances_of_the_test_file(tmp_path):
    src, test = tmp_path / "train.json", tmp_path / "test.json"
    src.write_text(json.dumps(_lists(30)))
    other = _lists(3)
    other[1]["id"] = "elsewhere"  # same reference text, another id: left out too
    test.write_text(json.dumps(other))
    out = tmp_path / "atis"
    assert recipe.main(["split", "--nbest", str(src), "--out", str(out), "--exclude", str(test)]) == 0
    split = json.loads((out / "split.json").read_text())
    assert split["excluded"] == ["utt0", "utt1", "utt2"]
    assert not {"utt0", "utt1", "utt2"} & set(split["adapt"] + split["tune"])
    assert len(split["adapt"]) + len(split["tune"]) == 27


def test_split_lists_command(tmp_path):
    src = tmp_path / "wsj.json"
    src.write_text(json.dumps(_lists(11)))
    assert recipe.main(["split-lists", "--nbest", str(src), "--out", str(tmp_path / "w")]) == 0
    split = json.loads((tmp_path / "w" / "split.json").read_text())
    assert sorted(split["dev"] + split["test"]) == sorted(f"utt{i}" for i in range(11))
    assert not set(split["dev"]) & set(split["test"])


def test_split_lists_names_lists_without_ids(tmp_path):
    src = tmp_path / "wsj.json"
    src.write_text(json.dumps([{k: v for k, v in x.items() if k != "id"} for x in _lists(10)]))
    assert recipe.main(["split-lists", "--nbest", str(src), "--out", str(tmp_path / "w")]) == 0
    split = json.loads((tmp_path / "w" / "split.json").read_text())
    dev = json.loads((tmp_path / "w" / "dev.json").read_text())
    test = json.loads((tmp_path / "w" / "test.json").read_text())
    assert [x["id"] for x in dev] == split["dev"] and [x["id"] for x in test] == split["test"]
    assert sorted(split["dev"] + split["test"]) == sorted(f"item{i}" for i in range(10))
    assert all(x["output"] == f"ref {int(x['id'][4:])}" for x in dev + test)


@pytest.mark.parametrize("tokens, expected", [
    ("Mr. Smith said the company 's profit rose 5 % .", "mister smith said the company is profit rose five percent"),
    ("`` It does n't matter , '' he said .", "quote it does not matter unquote he said"),
    ("The U.S. paid $ 175,000 in 1987 .", "the u s paid one hundred and seventy five thousand dollars in "
                                          "nineteen eighty seven"),
    ("a $ 3.2 billion deficit", "a three point two billion dollars deficit"),
    ("IBM Corp. , a long-term buy-out", "i b m corporation a long term buy out"),
    ("up 1\\/2 point -LRB- 3\\/4 -RRB- ;", "up one half point three quarters"),
    ("Co. and Inc. ca n't", "company and incorporated can not"),
])
def test_conll_sentence_to_text(tokens, expected):
    assert recipe.conll_sentence_to_text(tokens.split()) == expected


def test_read_conll_sentences(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("Confidence NN B-NP\nin IN B-PP\n. . O\n\nHe PRP B-NP\nwon VBD B-VP\n")
    assert recipe.read_conll_sentences(f) == [["Confidence", "in", "."], ["He", "won"]]
    out = tmp_path / "out.txt"
    assert recipe.main(["conll", "--conll", str(f), "--out", str(out)]) == 0
    assert out.read_text() == "confidence in\n\nhe won\n\n"


def test_number_words():
    assert recipe.number_words(0) == ["zero"]
    assert " ".join(recipe.number_words(2_500_013)) == "two million five hundred thousand thirteen"
    assert " ".join(recipe.year_words(2005)) == "two thousand five"
    assert " ".join(recipe.year_words(1905)) == "nineteen oh five"
    assert recipe.numeral_words("abc") is None


def test_evaluate_tunes_on_dev_reports_test_and_report_renders(disc_dir, tmp_path, capsys):
    """evaluate on real ATIS lists with a small model: both LM scores tuned on dev, the kept one chosen on
    dev, test never used for tuning (overlapping ids are refused), and report renders the row."""
    from conftest import require_shared

    with open(require_shared("nbest/atis_test.whisper5best.json"), encoding="utf-8") as f:
        items = json.load(f)[:40]
    (tmp_path / "dev.json").write_text(json.dumps(items[:20]))
    (tmp_path / "test.json").write_text(json.dumps(items[20:]))
    out = tmp_path / "results.json"
    args = ["evaluate", "--dev", str(tmp_path / "dev.json"), "--test", str(tmp_path / "test.json"),
            "--model", f"electric adapted={disc_dir}:electric", "--out", str(out), "--threads", "1"]
    assert recipe.main(args) == 0
    res = json.loads(out.read_text())
    assert res["num_dev"] == 20 and res["num_test"] == 20
    assert res["oracle"] <= res["first"] and res["oracle"] <= res["first_pass_plus_words"]
    (row,) = res["rows"]
    assert row["test_texts"] == len({h for it in items[20:] for h in it["input"]})
    better = min(("sum", "mean"), key=lambda k: (row[k]["dev"], k != "sum"))
    assert row["chosen"] == better
    assert recipe.main(["report", f"atis={out}", "--out", str(tmp_path / "t.md")]) == 0
    line = [x for x in (tmp_path / "t.md").read_text().splitlines() if "electric (1 pass)" in x][0]
    assert f"| {row[row['chosen']]['test']:.2f} |" in line and "| – |" in line  # no base row given
    # the same lists as dev and test: refused
    (tmp_path / "test.json").write_text(json.dumps(items[:20]))
    assert recipe.main(args) == 2
    assert "both in dev and test" in capsys.readouterr().err


def test_adaptation_runs_keep_the_plain_ten_percent_warmup():
    cmd = recipe.pretrain_cmd("runs/base", "electric", "adapt.txt", "out", 64, 0, 1e-3, 1)
    assert cmd[cmd.index("--min-warmup-steps") + 1] == "0" and cmd[cmd.index("--epochs") + 1] == "64"
