"""The WordPiece tokenizer trainer and loading users' own vocabularies."""

import pytest
from transformers import AutoTokenizer

from electric.checkpoint import CheckpointError
from electric.tokenization import load_tokenizer
from training.tokenizer import main


def test_trained_tokenizer_loads_with_autotokenizer_and_lowercases(tokenizer_dir):
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    assert len(tok) == 2000
    assert tok.convert_ids_to_tokens(tok("The Anarchism").input_ids)[0] == "[CLS]"
    assert tok("The").input_ids == tok("the").input_ids
    assert [tok.pad_token, tok.unk_token, tok.cls_token, tok.sep_token, tok.mask_token] == \
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert (tokenizer_dir / "vocab.txt").read_text().split("\n")[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_a_bare_bert_vocab_txt_is_accepted(tokenizer_dir, tmp_path):
    (tmp_path / "vocab.txt").write_text((tokenizer_dir / "vocab.txt").read_text())
    tok = load_tokenizer(tmp_path)
    ref = load_tokenizer(tokenizer_dir)
    assert tok("a political philosophy").input_ids == ref("a political philosophy").input_ids


def test_bad_tokenizer_dirs_are_explained(tmp_path):
    with pytest.raises(CheckpointError, match="neither tokenizer.json nor vocab.txt"):
        load_tokenizer(tmp_path)
    with pytest.raises(CheckpointError, match="never downloads"):
        load_tokenizer("google/electra-small-discriminator")


def test_cli_refuses_to_overwrite_and_reports_missing_data(tmp_path, capsys, wiki_sample):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    assert main(["--data", str(wiki_sample), "--out", str(tmp_path / "out"), "--vocab-size", "500"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["--data", str(tmp_path / "nope"), "--out", str(tmp_path / "o2")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()
