"""Reading a user's text file, with errors that name the file, the line and the byte; and writing a file whole or
not at all (`atomic_path`, `atomic_file`, `atomic_write_text`; electric.checkpoint gives the same names).

Python's own text mode reports a bad byte by its position in an internal buffer and never names the
file; these functions read bytes and decode them themselves, so the message can say where the problem is.
"""

from __future__ import annotations

import codecs
import glob
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

QUOTE_LIMIT = 200  # characters of a malformed line that an error message quotes


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """repr() of `value` for an error message, cut to `limit` characters of the text (saying how long it
    was): a malformed line may be a whole file without line breaks."""
    if not isinstance(value, str):
        r = repr(value)
        return r if len(r) <= limit else f"{r[:limit]}... ({len(r):,} characters)"
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value):,} characters)"


class TextFileError(ValueError):
    """A file that is not UTF-8 text (binary, or another encoding); the message names the file, line and byte."""


def _check(data: bytes, name: str, first_line: int, first_byte: int) -> str:
    """`data` decoded; a NUL byte or invalid UTF-8 raises TextFileError with the line and the byte offset
    (counted from `first_line` and `first_byte`, where `data` starts in the file)."""
    nul = data.find(b"\0")
    try:
        if nul < 0:
            return data.decode("utf-8")
    except UnicodeDecodeError as e:
        at = e.start
        what = f"byte 0x{data[at]:02x} at byte offset {first_byte + at} is not UTF-8 (the file must be UTF-8 text; " \
               "convert it first, e.g. `iconv -f latin1 -t utf-8`)"
    else:
        at = nul
        what = f"a NUL byte at byte offset {first_byte + at}: this is a binary file, not text (expected UTF-8 text)"
    line = first_line + data.count(b"\n", 0, at)
    raise TextFileError(f"{name}: line {line}: {what}")


def decode_text(data: bytes, name: str) -> str:
    """A whole file's bytes as text (a leading byte-order mark dropped), or a TextFileError saying where not."""
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    return _check(data[bom:], name, 1, bom)


def iter_lines(source: str | os.PathLike | IO, name: str | None = None) -> Iterator[str]:
    """The lines of a UTF-8 text file (a path, or a binary or text stream), without their line ends; a
    leading byte-order mark is dropped. A NUL byte (a binary file) or bytes that are not UTF-8 raise
    `TextFileError` naming `name` (default: the path or the stream's name), the line and the byte offset."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            yield from iter_lines(f, str(source) if name is None else name)
        return
    name = name if name is not None else str(getattr(source, "name", "input"))
    offset = 0
    for lineno, raw in enumerate(source, 1):
        if isinstance(raw, str):  # a text stream, decoded by its owner
            yield raw.rstrip("\r\n")
            continue
        start = offset
        offset += len(raw)
        if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
            raw, start = raw[len(codecs.BOM_UTF8):], start + len(codecs.BOM_UTF8)
        yield _check(raw, name, lineno, start).rstrip("\r\n")


def check_text_file(path: str | os.PathLike) -> int:
    """Read all of `path` as `iter_lines` does (raising its errors) and return its number of lines."""
    p = os.fspath(path)
    if not os.path.exists(p):
        raise TextFileError(f"{p}: no such file")
    if os.path.isdir(p):
        raise TextFileError(f"{p}: is a directory, expected a text file")
    return sum(1 for _ in iter_lines(p))


# ---- writing a file whole or not at all (light: `electric score` imports it at every start) ----

@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path` for any writer (a text file, Parquet, a copy) to fill; on success it is
    renamed over `path` (os.replace), so a reader - or a run resumed after a kill - finds the old content or the
    new, never a cut. An error removes the temporary file; a kill can leave a `.name.tmp-*`, removed by the next
    write (one writer per file). The one atomic file write: `atomic_file` and `atomic_write_text` use it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    with suppress(OSError):  # the rename itself on disk; not every file system syncs a directory
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for stale in path.parent.glob(f".{glob.escape(path.name)}.tmp-*"):
        stale.unlink(missing_ok=True)


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[IO[str]]:
    """Yield a text file to write `path` whole or not at all (`atomic_path`), flushed to disk before the rename."""
    with atomic_path(path) as tmp, open(tmp, "x", encoding="utf-8") as f:  # mode 0o666 less the umask
        yield f
        f.flush()
        os.fsync(f.fileno())


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` whole or not at all (`atomic_file`)."""
    with atomic_file(path) as f:
        f.write(text)
