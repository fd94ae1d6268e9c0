"""Offline scoring's files: the input split into shards, each shard's records, its finished part, the output.

`electric score --ray` (electric.cli.offline.ray_job) runs one Ray Data row per shard. This module holds what
needs no Ray, so it is tested alone:
- `plan_shards`: the input as shards of consecutive records. A text or JSON-lines file is split at line boundaries
  by byte range (Ray's own text reader gives one read task per file and no line numbers); a Parquet file by row
  group; an n-best JSON document is parsed here and its lists are carried by the shards;
- `read_shard`: a shard's records `(line, payload, error)`, a bad record (not UTF-8, not JSON, no text) with the
  error that names its file and line instead of a payload;
- `write_part` / `finished_part`: a shard's output written aside and renamed into place, and the check that a
  part of an earlier, interrupted run is complete (so a rerun does not score it again);
- `assemble`: the parts, in input order, into `--out` (Parquet or JSON lines, by its extension).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from electric.textio import atomic_path

OUT_FORMATS = {".parquet": "parquet", ".jsonl": "jsonl"}
INPUT_KINDS = ("text", "jsonl", "parquet", "nbest", "nbest-jsonl")
PLAN = "plan.json"


def out_format(path: str | os.PathLike) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in OUT_FORMATS:
        raise ValueError(f"--out {path}: the extension says the format: .parquet, or .jsonl for JSON lines")
    return OUT_FORMATS[suffix]


def parts_dir(out: str | os.PathLike) -> Path:
    """Where the finished shards of a job writing `out` wait for the end: `OUT.parts/` beside it."""
    p = Path(out)
    return p.with_name(p.name + ".parts")


def detect_kind(path: str | os.PathLike, kind: str = "auto") -> str:
    """The input kind: parquet by extension; a file starting with '[' or '{' followed by a JSON document is n-best
    JSON; JSON lines whose first object has "input" are n-best JSON lines, else records with a "text"; otherwise
    plain text, one text a line."""
    if kind != "auto":
        if kind not in INPUT_KINDS:
            raise ValueError(f"unknown input kind {kind!r} (auto, {', '.join(INPUT_KINDS)})")
        return kind
    p = Path(path)
    if p.suffix.lower() == ".parquet":
        return "parquet"
    with open(p, "rb") as f:
        head = f.read(1 << 16).removeprefix(b"\xef\xbb\xbf").lstrip()
    if head[:1] == b"[":
        return "nbest"
    if head[:1] == b"{":
        first = head.split(b"\n", 1)[0]
        try:
            obj = json.loads(first)
        except json.JSONDecodeError:
            return "nbest"  # a JSON object over many lines: ESPnet n-best
        return "nbest-jsonl" if isinstance(obj, dict) and "input" in obj else "jsonl"
    return "text"


def fingerprint(path: str | os.PathLike) -> dict:
    st = os.stat(path)
    return {"path": str(Path(path).resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def texts_fingerprint(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


# ---- shards ----------------------------------------------------------------------------------------------


def _line_shards(path: Path, kind: str, size: int) -> list[dict]:
    """Shards of `size` lines: byte ranges [start, end) of the file, with the number of their first line."""
    shards, start, pos, lines, first = [], 0, 0, 0, 1
    with open(path, "rb") as f:
        head = f.read(3)
        pos = start = 3 if head == b"\xef\xbb\xbf" else 0
        f.seek(pos)
        while chunk := f.read(1 << 20):
            at = 0
            while (nl := chunk.find(b"\n", at)) >= 0:
                lines, at = lines + 1, nl + 1
                if lines == size:
                    end = pos + at
                    shards.append({"kind": kind, "path": str(path), "first": first, "count": lines, "start": start,
                                   "end": end})
                    first, start, lines = first + lines, end, 0
            pos += len(chunk)
    if pos > start:  # the last lines (the last without a line end)
        n = lines + (1 if not _ends_with_newline(path) else 0)
        shards.append({"kind": kind, "path": str(path), "first": first, "count": n, "start": start, "end": pos})
    return shards


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def plan_shards(path: str | os.PathLike, kind: str, size: int, text_field: str = "text", nbest_format: str = "auto",
                ) -> list[dict]:
    """The input as shards of about `size` records, each a JSON-able dict with "kind", "first" (the line number,
    or the 1-based row or utterance number, of its first record) and "count"."""
    if size < 1:
        raise ValueError(f"--shard-size must be at least 1, got {size}")
    p = Path(path)
    if kind in ("text", "jsonl", "nbest-jsonl"):
        shards = _line_shards(p, kind, size)
    elif kind == "parquet":
        import pyarrow.parquet as pq

        meta, first, shards = pq.ParquetFile(p).metadata, 1, []
        columns = pq.ParquetFile(p).schema_arrow.names
        if text_field not in columns:
            raise ValueError(f"{p}: no column {text_field!r} (columns: {', '.join(columns)}); name the text column "
                             "with --text-field")
        for g in range(meta.num_row_groups):
            n = meta.row_group(g).num_rows
            shards.append({"kind": kind, "path": str(p), "first": first, "count": n, "row_group": g})
            first += n
    elif kind == "nbest":
        from electric.evaluation.nbest import read_nbest

        lists, _ = read_nbest(p, nbest_format)
        shards = [{"kind": kind, "path": str(p), "first": lo + 1, "count": len(lists[lo: lo + size]),
                   "lists": [asdict(nb) for nb in lists[lo: lo + size]]} for lo in range(0, len(lists), size)]
    else:
        raise ValueError(f"unknown input kind {kind!r}")
    for i, s in enumerate(shards):
        s.update(shard=i, text_field=text_field)
    return shards


def text_shards(texts: list[str], size: int) -> list[dict]:
    """Shards of a list of texts held in memory (the distinct hypotheses of `electric rerank --ray`)."""
    return [{"kind": "texts", "path": "hypotheses", "first": lo + 1, "count": len(texts[lo: lo + size]),
             "texts": texts[lo: lo + size], "shard": k} for k, lo in enumerate(range(0, len(texts), size))]


def _decode(raw: bytes, where: str) -> tuple[str | None, str | None]:
    if b"\0" in raw:
        return None, f"{where}: a NUL byte: binary data, not text"
    try:
        return raw.decode("utf-8").rstrip("\r\n"), None
    except UnicodeDecodeError as e:
        return None, f"{where}: byte 0x{raw[e.start]:02x} at byte {e.start} of the line is not UTF-8"


def read_shard(shard: dict) -> list[tuple[int, Any, str | None]]:
    """(line or record number, payload, error) per record: a text, or an `NBestList` for n-best kinds; a bad
    record has payload None and an error naming the file and line."""
    kind, path, first = shard["kind"], shard["path"], shard["first"]
    if kind == "texts":
        return [(first + i, t, None) for i, t in enumerate(shard["texts"])]
    if kind == "nbest":
        from electric.evaluation.nbest import NBestList

        return [(first + i, NBestList(**d), None) for i, d in enumerate(shard["lists"])]
    if kind == "parquet":
        import pyarrow.parquet as pq

        table = pq.ParquetFile(path).read_row_group(shard["row_group"])
        field = shard["text_field"]
        if field not in table.column_names:
            raise ValueError(f"{path}: no column {field!r} (columns: {', '.join(table.column_names)}); "
                             "name the text column with --text-field")
        out: list[tuple[int, Any, str | None]] = []
        for i, t in enumerate(table.column(field).to_pylist()):
            where = f"{path}: row {first + i}"
            out.append((first + i, t, None) if isinstance(t, str) else
                       (first + i, None, f"{where}: {field!r} is {type(t).__name__}, not a string"))
        return out
    with open(path, "rb") as f:
        f.seek(shard["start"])
        data = f.read(shard["end"] - shard["start"])
    raws = data.split(b"\n")
    if raws and raws[-1] == b"":
        raws.pop()
    out = []
    for i, raw in enumerate(raws):
        line = first + i
        text, err = _decode(raw, f"{path}: line {line}")
        if text is not None and kind != "text":
            text, err = _parse_json_line(text, kind, shard["text_field"], f"{path}: line {line}", line)
        out.append((line, text, err))
    return out


def _parse_json_line(text: str, kind: str, field: str, where: str, line: int):
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"{where}: not JSON ({e.msg} at column {e.colno})"
    if kind == "nbest-jsonl":
        from electric.evaluation.nbest.lists import NBestError
        from electric.evaluation.nbest.readers import parse_hyporadise

        if isinstance(obj, dict) and "id" not in obj:
            obj = {"id": str(line), **obj}
        try:
            return parse_hyporadise([obj])[0], None
        except NBestError as e:
            return None, f"{where}: {str(e).removeprefix('n-best input: ')}"
    if not isinstance(obj, dict) or not isinstance(obj.get(field), str):
        return None, f"{where}: expected a JSON object with a string {field!r} (name the field with --text-field)"
    return obj[field], None


# ---- parts and the output ------------------------------------------------------------------------------


def part_path(parts: Path, shard: int, fmt: str) -> Path:
    return parts / f"part-{shard:06d}.{fmt}"


def write_part(parts: Path, shard: int, records: list[dict], fmt: str, schema=None) -> Path:
    """The records of one shard, written aside and renamed into place: a part on disk is a finished part."""
    final = part_path(parts, shard, fmt)
    with atomic_path(final) as tmp:
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(records, schema=schema), tmp)
        else:
            tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return final


def part_rows(path: Path, fmt: str) -> int | None:
    """Rows of a part file, or None when it cannot be read (then it is scored again)."""
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_metadata(path).num_rows
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except (OSError, ValueError):
        return None


def finished_part(parts: Path, shard: dict, fmt: str) -> bool:
    p = part_path(parts, shard["shard"], fmt)
    return p.is_file() and part_rows(p, fmt) == shard["count"]


def open_parts(parts: Path, plan: dict) -> None:
    """Create `parts` for this job, or keep it when an interrupted run of the same job left it (its plan.json
    equal to `plan`); a directory of another job (other input, model or options) is an error."""
    f = parts / PLAN
    if f.is_file():
        old = json.loads(f.read_text(encoding="utf-8"))
        if old != plan:
            changed = sorted(k for k in {*old, *plan} if old.get(k) != plan.get(k))
            raise ValueError(f"{parts} holds the parts of another job (it differs in {', '.join(changed)}); remove "
                             "it, or choose another --out")
        return
    parts.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(plan, indent=1) + "\n", encoding="utf-8")


def read_parts(parts: Path, shards: list[dict], fmt: str) -> list[dict]:
    """The records of every part, in shard order."""
    out = []
    for s in shards:
        p = part_path(parts, s["shard"], fmt)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            out += pq.read_table(p).to_pylist()
        else:
            out += [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines()]
    return out


def assemble(parts: Path, shards: list[dict], out: Path, fmt: str, keep_parts: bool = False) -> None:
    """The parts, in input order, into `out` (whole or not at all: `atomic_path`); then the parts go, unless
    kept."""
    with atomic_path(out) as tmp:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            writer = None
            try:
                for s in shards:
                    table = pq.read_table(part_path(parts, s["shard"], fmt))
                    if writer is None:
                        writer = pq.ParquetWriter(tmp, table.schema)
                    writer.write_table(table)
            finally:
                if writer is not None:
                    writer.close()
        else:
            with open(tmp, "wb") as fout:
                for s in shards:
                    with open(part_path(parts, s["shard"], fmt), "rb") as fin:
                        shutil.copyfileobj(fin, fout)
    if not keep_parts:
        shutil.rmtree(parts)
