"""Pretraining data: local text files -> tokenised, packed sequences, through `datasets`.

Accepted inputs: plain text (one paragraph or sentence a line; a blank line ends a document) and
WikiExtractor output (`<doc ...>` ... `</doc>` blocks), as files, directories (recursively) or globs.
Documents are tokenised in parallel (`num_proc`), cached by `datasets`, and packed into
`[CLS] tokens [SEP]` sequences of at most `max_seq_length` tokens; no next-sentence prediction.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

DOC_OPEN = "<doc "
DOC_CLOSE = "</doc>"


class DataError(ValueError):
    """Training data is missing, unreadable or empty."""


def resolve_files(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Expand files, directories (recursively, hidden files skipped) and globs into a sorted file list."""
    if not paths:
        raise DataError("no data given: pass --data FILE|DIR|GLOB ...")
    files: list[str] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if p.is_dir():
            found = sorted(
                str(f) for f in p.rglob("*")
                if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)
            )
            if not found:
                raise DataError(f"data directory {str(raw)!r} holds no files")
            files += found
        elif p.is_file():
            files.append(str(p))
        elif any(ch in str(raw) for ch in "*?["):
            found = sorted(f for f in glob.glob(str(p), recursive=True) if Path(f).is_file())
            if not found:
                raise DataError(f"data glob {str(raw)!r} matches no files")
            files += found
        else:
            raise DataError(f"data path {str(raw)!r} does not exist")
    for f in files:
        if not os.access(f, os.R_OK):
            raise DataError(f"data file {f!r} is not readable")
        try:
            with open(f, encoding="utf-8") as fh:
                fh.read(4096)
        except UnicodeDecodeError as e:
            raise DataError(f"data file {f!r} is not UTF-8 text ({e.reason} at byte {e.start})") from e
    if all(os.path.getsize(f) == 0 for f in files):
        raise DataError(f"all {len(files)} data file(s) are empty: {files[:3]}")
    return sorted(dict.fromkeys(files))


def split_documents(lines: Sequence[str]) -> list[str]:
    """Group lines into documents. `<doc ...>`/`</doc>` bound WikiExtractor documents (blank lines
    inside them are ignored); outside such blocks a blank line ends a document."""
    docs: list[str] = []
    current: list[str] = []
    in_doc = False

    def flush() -> None:
        if current:
            docs.append(" ".join(current))
            current.clear()

    for line in lines:
        line = line.strip()
        if line.startswith(DOC_OPEN):
            flush()
            in_doc = True
        elif line == DOC_CLOSE:
            flush()
            in_doc = False
        elif line:
            current.append(line)
        elif not in_doc:
            flush()
    flush()
    return docs


def iter_documents(files: Sequence[str]) -> Iterator[str]:
    """Stream documents from files with bounded memory (used to train tokenizers)."""
    for f in files:
        with open(f, encoding="utf-8") as fh:
            chunk: list[str] = []
            for line in fh:
                chunk.append(line)
                if len(chunk) >= 10_000 and not line.strip():
                    yield from split_documents(chunk)
                    chunk = []
            yield from split_documents(chunk)


def pack_documents(doc_ids: Sequence[Sequence[int]], max_seq_length: int, cls_id: int, sep_id: int,
                   min_tokens: int = 8) -> list[list[int]]:
    """Each document's tokens are cut into windows of max_seq_length - 2 and wrapped in [CLS] ... [SEP].

    The short tail of a document starts a sequence that the next document's tokens continue (so
    little is padded); a document boundary inside a sequence is marked by [SEP]. Tails shorter than
    `min_tokens` at the very end are dropped.
    """
    body = max_seq_length - 2
    out: list[list[int]] = []
    buf: list[int] = []
    for ids in doc_ids:
        if not ids:
            continue
        if buf:
            buf.append(sep_id)
        buf.extend(ids)
        while len(buf) >= body:
            out.append([cls_id, *buf[:body], sep_id])
            buf = buf[body:]
            if buf and buf[0] == sep_id:
                buf = buf[1:]
    if len(buf) >= min_tokens:
        out.append([cls_id, *buf, sep_id])
    return out


def _tokenize_and_pack(batch: dict, tokenizer, max_seq_length: int) -> dict:
    docs = split_documents(batch["text"])
    # whole documents, cut into max_seq_length pieces by pack_documents: transformers' warning that a text
    # is longer than the model's maximum does not apply here (verbose=False silences it). A "[MASK]" in the corpus
    # is text, not the mask id (split_special_tokens), as inference tokenises it (electric.inference.encoding).
    ids = tokenizer(docs, add_special_tokens=False, split_special_tokens=True, return_attention_mask=False,
                    verbose=False)["input_ids"] if docs else []
    return {"input_ids": pack_documents(ids, max_seq_length, tokenizer.cls_token_id, tokenizer.sep_token_id)}


def build_datasets(
    paths: Sequence[str | os.PathLike],
    tokenizer,
    max_seq_length: int,
    val_sequences: int,
    num_proc: int = 0,
    cache_dir: str | None = None,
    seed: int = 1234,
    rank0: bool = True,
):
    """Return (train, validation) `datasets.Dataset`s whose rows are {"input_ids": [int, ...]}.

    Lines are read in batches of 2,000 (bounded memory; a document running across a batch boundary
    is split there). The validation slice is a fixed, seeded sample of `val_sequences` sequences.
    """
    import datasets

    files = resolve_files(paths)
    if not rank0 or not sys.stderr.isatty():  # other ranks, and log files, get no bar redraws
        datasets.disable_progress_bars()
    raw = datasets.load_dataset("text", data_files={"train": files}, split="train", cache_dir=cache_dir,
                                keep_linebreaks=False)
    nproc = num_proc or min(os.cpu_count() or 1, 8)
    nproc = max(1, min(nproc, len(raw) // 2_000 or 1))
    packed = raw.map(
        _tokenize_and_pack,
        batched=True,
        batch_size=2_000,
        remove_columns=raw.column_names,
        fn_kwargs={"tokenizer": tokenizer, "max_seq_length": max_seq_length},
        num_proc=nproc if nproc > 1 else None,
        desc="tokenising and packing",
    )
    if len(packed) == 0:
        raise DataError(f"no text found in {len(files)} data file(s) (first: {files[0]!r})")
    n_val = min(val_sequences, len(packed) // 10)
    if n_val < 1:
        return packed, packed.select([])
    split = packed.train_test_split(test_size=n_val, seed=seed, shuffle=True)
    return split["train"], split["test"]


__all__ = ["DataError", "build_datasets", "iter_documents", "pack_documents",
           "resolve_files", "split_documents"]
