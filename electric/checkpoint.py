"""Loading local checkpoints and tokenizers, with clear errors (there is no network here); what a model directory
holds (its kind, an export's manifest) - the names every backend shares, so backends import them from here."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

# Nothing in this project may reach a model hub; set before transformers reads the environment.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")

Kind = Literal["discriminator", "cloze", "classifier", "tagger"]
MANIFEST = "electric.json"  # written by `electric export` beside the ONNX file(s)

ARCHITECTURE_KINDS: dict[str, Kind] = {
    "ElectraForPreTraining": "discriminator",
    "ElectricForClozeLM": "cloze",  # Electric's two-tower cloze model (RUN/generator of an Electric run)
    "ElectraForSequenceClassification": "classifier",
    "ElectraForTokenClassification": "tagger",
}


class CheckpointError(ValueError):
    """A checkpoint or tokenizer directory is missing, malformed or of the wrong kind."""


def model_kind(config: dict, where: str) -> Kind:
    """The head of a transformers config.json (`architectures`) as a backend kind."""
    for arch in config.get("architectures") or []:
        if arch in ARCHITECTURE_KINDS:
            return ARCHITECTURE_KINDS[arch]
    raise CheckpointError(
        f"{where}: architectures {config.get('architectures')} is not a supported head "
        f"(expected one of {sorted(ARCHITECTURE_KINDS)})"
    )


def check_out_dir(out: str | os.PathLike, overwrite: bool, flag: str = "--out",
                  hint: str = "pass --overwrite to replace it") -> None:
    """An output directory a command may write into: absent or empty, or (with `overwrite`) anything but a file;
    otherwise FileExistsError naming `flag` and saying what to do (`hint`)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{flag} {str(out)!r} is a file")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{flag} {str(out)!r} already exists and is not empty; {hint}")


def require_local_dir(path: str | os.PathLike, what: str) -> Path:
    """Return `path` as a Path if it is an existing directory; otherwise say why not."""
    p = Path(path).expanduser()
    if p.is_dir():
        return p
    if existing_dir(p).is_dir():  # a save of `p` was killed between its two renames: read the complete copy
        return existing_dir(p)
    if p.exists():
        raise CheckpointError(f"{what} {str(path)!r} is a file, expected a directory")
    if _HUB_NAME.match(str(path)):
        raise CheckpointError(
            f"{what} {str(path)!r} is not a local directory. It looks like a model-hub name, but this tool "
            "never downloads (no network). Train one with `python -m training.pretrain` or pass the path "
            "of a local copy."
        )
    raise CheckpointError(f"{what} {str(path)!r} does not exist")


class MissingExtra(ImportError):
    """A feature needs an optional dependency this installation lacks; the message names the pip extra."""


def require_extra(feature: str, modules: tuple[str, ...] = ("torch", "transformers"), extra: str = "torch") -> None:
    """Raise `MissingExtra` naming `feature` and `pip install 'electric[extra]'` unless `modules` are installed
    (looked up, not imported). Serving ONNX exports needs neither torch nor transformers."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(f"{feature} needs {' and '.join(missing)}, which this installation lacks: "
                           f"pip install 'electric[{extra}]'")


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
    from transformers import AutoTokenizer, BertTokenizerFast

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
    (tests/test_server_tokenize.py compares them); encode with `electric.inference.encoding.encode`."""

    is_fast = True  # electric.inference.encoding.encode asks

    def __init__(self, backend_tokenizer, special_tokens: dict[str, str], split_special_tokens: bool = False,
                 where: str = "tokenizer"):
        self.backend_tokenizer = backend_tokenizer  # a tokenizers.Tokenizer
        self.split_special_tokens = split_special_tokens
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
    return WordPieceTokenizer(tok, special, bool(config.get("split_special_tokens", False)),
                              where=f"tokenizer in {str(d)!r}")


def _old_copy(final: Path) -> Path:
    return final.with_name(f".{final.name}.old")


def existing_dir(final: str | os.PathLike) -> Path:
    """`final`; or, when it is missing and its `.old` copy is on disk (a save killed between `atomic_dir`'s two
    renames), that complete copy. For readers: nothing is renamed (a writer may be mid-save)."""
    final = Path(final)
    old = _old_copy(final)
    return old if not final.exists() and old.is_dir() else final


RUN_PARTS = ("discriminator", "generator")  # the model directories a pretraining run directory holds


def run_parts(path: str | os.PathLike) -> dict[str, Path]:
    """{part: its directory} of a pretraining run directory (RUN/discriminator, RUN/generator, or the complete
    copy a killed save left: `existing_dir`); {} when `path` is not a run directory."""
    d = Path(path)
    return {p: existing_dir(d / p) for p in RUN_PARTS if existing_dir(d / p).is_dir()}


def resolve_model_dir(path: str | os.PathLike, prefer: Sequence[str] = RUN_PARTS, *, what: str = "model",
                      missing: str | None = None) -> Path:
    """The one rule from "run dir" to "model dir": `path` itself when it is a model directory; for a pretraining
    run directory, the first of its `prefer` parts it has, else CheckpointError (`missing`, or a message naming
    the parts)."""
    d = require_local_dir(path, what)
    parts = run_parts(d)
    if not parts:
        return d
    for p in prefer:
        if p in parts:
            return parts[p]
    raise CheckpointError(missing or f"run directory {str(d)!r} has no {'/ or '.join(prefer)}/")


def recover_dir(final: str | os.PathLike) -> bool:
    """For the owner of `final` (e.g. `--resume`): when a save was killed between `atomic_dir`'s two renames,
    put the complete `.old` copy back as `final`. True when it did."""
    final = Path(final)
    old = _old_copy(final)
    if final.exists() or not old.is_dir():
        return False
    try:
        old.rename(final)
    except FileNotFoundError:  # another process (a DDP rank) recovered it first
        return False
    return True


@contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside `final`; on success it replaces `final`, on error it vanishes.

    Replacing is `final -> .final.old`, `tmp -> final`, then removing `.final.old`. A kill between the two
    renames leaves no `final` but a complete `.final.old` (`existing_dir` reads it, `recover_dir` puts it back);
    a kill while writing leaves a `.final.tmp-*`. Once the new `final` is in place, `.final.old` and every
    `.final.tmp-*` left by earlier kills are removed (one writer per directory)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = _old_copy(final)
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    # else: the last save was killed between the renames; its complete copy stays in .old until the rename below
    tmp.rename(final)
    for stale in [old, *final.parent.glob(f".{glob.escape(final.name)}.tmp-*")]:
        shutil.rmtree(stale, ignore_errors=True)
