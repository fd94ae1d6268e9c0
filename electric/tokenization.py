"""Tokenizers of local model directories: `load_tokenizer` (transformers, for training, fine-tuning, export and the
torch backend) and `load_inference_tokenizer` (a `WordPieceTokenizer` on the Rust `tokenizers` library alone, no
transformers or torch, for inference on an export)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from electric.checkpoint import CheckpointError, require_extra, require_local_dir

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")


def _tokenizer_dir(path: str | os.PathLike) -> Path:
    d = require_local_dir(path, "tokenizer")
    if not any((d / f).is_file() for f in TOKENIZER_FILES):
        raise CheckpointError(f"tokenizer directory {str(d)!r} has neither tokenizer.json nor vocab.txt")
    return d


def load_tokenizer(path: str | os.PathLike):
    """A BERT/ELECTRA WordPiece tokenizer from a local directory (ours, or a user's ELECTRA vocab), as a
    transformers tokenizer (training, fine-tuning, export, the torch backend). Inference on an export uses
    `load_inference_tokenizer`, which needs no transformers."""
    require_extra("loading a tokenizer with transformers", ("transformers",))
    from transformers import AutoTokenizer, BertTokenizerFast  # type: ignore[attr-defined]  # an alias in transformers 5

    d = _tokenizer_dir(path)
    try:
        if (d / "tokenizer_config.json").is_file() or (d / "tokenizer.json").is_file():
            tok = AutoTokenizer.from_pretrained(d)
        else:  # a bare vocab.txt, as in the original ELECTRA release
            tok = BertTokenizerFast.from_pretrained(d, do_lower_case=True)
    except Exception as e:  # noqa: BLE001 - turn library errors into one clear message
        raise CheckpointError(f"could not load the tokenizer in {str(d)!r}: {e}") from e
    missing = [t for t in ("cls_token", "sep_token", "mask_token", "pad_token") if getattr(tok, t) is None]
    if missing:
        raise CheckpointError(f"tokenizer in {str(d)!r} lacks BERT special tokens: {missing}")
    return tok


SPECIAL_TOKENS = {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]", "mask": "[MASK]", "unk": "[UNK]"}  # BERT's defaults
# tokenizer classes that transformers builds as BERT's (normalizer from tokenizer_config.json, BERT pre-tokenizer)
BERT_TOKENIZER_CLASSES = ("BertTokenizer", "BertTokenizerFast", "ElectraTokenizer", "ElectraTokenizerFast")


class WordPieceTokenizer:
    """A BERT/ELECTRA tokenizer from tokenizer.json on the Rust `tokenizers` library alone - no transformers, so
    no torch: what inference reads of a tokenizer (the Rust `backend_tokenizer`, the special tokens and their
    ids), under transformers' attribute names. It tokenises as `load_tokenizer`'s tokenizer does
    (tests/server/test_server_tokenize.py compares them); encode with `electric.inference.encoding.encode`."""

    is_fast = True  # electric.inference.encoding.encode asks

    def __init__(self, backend_tokenizer, special_tokens: dict[str, str], where: str = "tokenizer"):
        self.backend_tokenizer = backend_tokenizer  # a tokenizers.Tokenizer
        missing = []
        for name, token in special_tokens.items():
            token_id = backend_tokenizer.token_to_id(token)
            if token_id is None and name != "unk":
                missing.append(f"{name}_token {token!r}")
            setattr(self, f"{name}_token", token)
            setattr(self, f"{name}_token_id", token_id)
        if missing:
            raise CheckpointError(f"{where} lacks BERT special tokens: {missing}")

    @property
    def all_special_ids(self) -> list[int]:
        return sorted({self.backend_tokenizer.token_to_id(t) for t in self.special_tokens()} - {None})

    def special_tokens(self) -> list[str]:
        return [getattr(self, f"{name}_token") for name in SPECIAL_TOKENS]

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def __repr__(self) -> str:
        return f"WordPieceTokenizer(vocab_size={len(self)}, special_tokens={self.special_tokens()})"


def _json_file(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{str(path)!r} is not valid JSON: {e}") from e


def load_inference_tokenizer(path: str | os.PathLike):
    """The tokenizer of a model directory for inference: a `WordPieceTokenizer` read from tokenizer.json (0.02 s,
    no transformers or torch imported), set up as transformers sets up a BERT tokenizer from the same files (the
    normalizer follows tokenizer_config.json's do_lower_case, strip_accents and tokenize_chinese_chars). A
    directory with only a vocab.txt (the original ELECTRA release) loads through transformers (`load_tokenizer`)."""
    d = _tokenizer_dir(path)
    if not (d / "tokenizer.json").is_file():
        require_extra(f"{str(d)!r} has a vocab.txt and no tokenizer.json; loading it", ("transformers",))
        return load_tokenizer(d)
    from tokenizers import Tokenizer, normalizers, pre_tokenizers

    config = _json_file(d / "tokenizer_config.json")
    names = _json_file(d / "special_tokens_map.json")
    try:
        tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    except Exception as e:  # noqa: BLE001 - the Rust library's errors -> one clear message
        raise CheckpointError(f"could not load the tokenizer in {str(d)!r}: {e}") from e
    if config.get("tokenizer_class", "BertTokenizer") in BERT_TOKENIZER_CLASSES and \
            isinstance(tok.normalizer, normalizers.BertNormalizer):
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=config.get("tokenize_chinese_chars", True),
            strip_accents=config.get("strip_accents"), lowercase=config.get("do_lower_case", True))
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = {}
    for name, default in SPECIAL_TOKENS.items():
        value = config.get(f"{name}_token") or names.get(f"{name}_token") or default
        special[name] = value["content"] if isinstance(value, dict) else str(value)
    return WordPieceTokenizer(tok, special, where=f"tokenizer in {str(d)!r}")
