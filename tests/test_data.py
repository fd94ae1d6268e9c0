"""Reading, splitting and packing pretraining text."""

import pytest

from electric.pretraining.data import (
    DataError,
    build_datasets,
    pack_documents,
    resolve_files,
    split_documents,
)


def test_wikiextractor_blocks_are_documents_and_blank_lines_inside_them_are_not():
    lines = ['<doc id="1" url="u" title="A">', "A", "", "first para.", "second para.", "</doc>",
             '<doc id="2" url="u" title="B">', "B", "", "text b.", "</doc>"]
    assert split_documents(lines) == ["A first para. second para.", "B text b."]


def test_plain_text_blank_line_ends_a_document():
    assert split_documents(["one.", "two.", "", "", "three."]) == ["one. two.", "three."]


def test_packing_wraps_windows_in_cls_sep_and_joins_short_documents():
    CLS, SEP = 2, 3
    docs = [list(range(10, 17)), list(range(20, 23)), [], list(range(30, 40))]
    out = pack_documents(docs, max_seq_length=8, cls_id=CLS, sep_id=SEP, min_tokens=2)
    assert all(len(s) <= 8 and s[0] == CLS and s[-1] == SEP for s in out)
    body = [t for s in out for t in s[1:-1]]
    # every token appears once, in order; document boundaries inside a sequence are marked by [SEP]
    assert [t for t in body if t != SEP] == docs[0] + docs[1] + docs[3]
    assert out[0] == [CLS, 10, 11, 12, 13, 14, 15, SEP]


def test_resolve_files_expands_dirs_and_globs_and_rejects_bad_paths(tmp_path):
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("world\n")
    (tmp_path / ".hidden").write_text("skip\n")
    assert resolve_files([tmp_path]) == [str(tmp_path / "a.txt"), str(tmp_path / "sub" / "b.txt")]
    assert resolve_files([str(tmp_path / "**" / "*.txt")]) == [str(tmp_path / "a.txt"), str(tmp_path / "sub" / "b.txt")]
    with pytest.raises(DataError, match="does not exist"):
        resolve_files([tmp_path / "missing"])
    with pytest.raises(DataError, match="matches no files"):
        resolve_files([str(tmp_path / "*.csv")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no files"):
        resolve_files([tmp_path / "empty"])
    (tmp_path / "z.txt").write_text("")
    with pytest.raises(DataError, match="empty"):
        resolve_files([tmp_path / "z.txt"])
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00abc")
    with pytest.raises(DataError, match="not UTF-8"):
        resolve_files([tmp_path / "bin.txt"])


def test_build_datasets_on_real_wiki_text(wiki_sample, tokenizer_dir, tmp_path):
    from electric.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    kw = dict(max_seq_length=64, val_sequences=20, num_proc=1, cache_dir=str(tmp_path))
    train, val = build_datasets([wiki_sample], tok, **kw)
    assert len(val) == 20 and len(train) > 100
    for row in train.select(range(50))["input_ids"]:
        assert len(row) <= 64 and row[0] == tok.cls_token_id and row[-1] == tok.sep_token_id
    assert "<doc" not in tok.decode(train[0]["input_ids"])
    # the validation slice is fixed: the same sequences on every call
    _, val2 = build_datasets([wiki_sample], tok, **kw)
    assert val["input_ids"] == val2["input_ids"]
