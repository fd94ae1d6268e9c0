"""Loading local checkpoints and tokenizers, with clear errors (there is no network here)."""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Nothing in this project may reach a model hub; set before transformers reads the environment.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")


class CheckpointError(ValueError):
    """A checkpoint or tokenizer directory is missing, malformed or of the wrong kind."""


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


def load_tokenizer(path: str | os.PathLike):
    """A BERT/ELECTRA WordPiece tokenizer from a local directory (ours, or a user's ELECTRA vocab)."""
    from transformers import AutoTokenizer, BertTokenizerFast

    d = require_local_dir(path, "tokenizer")
    if not any((d / f).is_file() for f in TOKENIZER_FILES):
        raise CheckpointError(f"tokenizer directory {str(d)!r} has neither tokenizer.json nor vocab.txt")
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


def _old_copy(final: Path) -> Path:
    return final.with_name(f".{final.name}.old")


def existing_dir(final: str | os.PathLike) -> Path:
    """`final`; or, when it is missing and its `.old` copy is on disk (a save killed between `atomic_dir`'s two
    renames), that complete copy. For readers: nothing is renamed (a writer may be mid-save)."""
    final = Path(final)
    old = _old_copy(final)
    return old if not final.exists() and old.is_dir() else final


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
