"""Fine-tuning tasks: a registry of the benchmark tasks, readers for their files and for a user's own
CSV / TSV / JSONL / CoNLL files, label vocabularies, dev splits and the metrics each task reports.

Every reader returns a list of `Example`s and raises `TaskDataError` naming the file and line of the first
bad row (too few columns, an unknown label, a non-numeric regression target, an empty file ...).

    task = TASKS["sst2"]
    data = load_task_data(task, data_dir="../shared/data/glue/sst2")
    data.train[0].text, data.train[0].label   # ('hide new secretions from the parental units', 'negative')
"""

from __future__ import annotations

import csv
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Literal

from electric.evaluation import metrics as M
from electric.textio import quote

TaskType = Literal["classification", "pair-classification", "regression", "tagging"]
TASK_TYPES: tuple[str, ...] = ("classification", "pair-classification", "regression", "tagging")
FORMATS: tuple[str, ...] = ("csv", "tsv", "jsonl", "conll")
DEV_FRACTION = 0.1  # share of train held out as dev where a task has no dev split (FCE, CoNLL-2000)
DEV_SEED = 0  # fixed: every fine-tuning seed sees the same dev split

csv.field_size_limit(1 << 24)


class TaskDataError(ValueError):
    """A task's data file is missing, empty or malformed; the message names the file and line."""


@dataclass
class Example:
    text: str | list[str]  # a sentence, or its words for tagging
    label: str | float | list[str]  # class name, regression target, or one tag per word
    text_pair: str | None = None  # second sentence of a pair task
    source: str = ""  # "file:line" where the example starts, for error messages


@dataclass(frozen=True)
class Task:
    name: str
    task_type: TaskType
    read: Callable[[Path], list[Example]]  # file -> examples
    train: str  # file name inside the task's data directory
    dev: str | None  # None: carve DEV_FRACTION of train, seeded with DEV_SEED
    test: str | None = None  # a labelled held-out file, scored once with the selected model
    labels: tuple[str, ...] | None = None  # fixed label names in id order; None: learned from train
    metrics: tuple[str, ...] | None = None  # reported on dev; the first one selects the best epoch
    positive: str | None = None  # the class that f1 / f0.5 are computed on

    @property
    def is_pair(self) -> bool:
        return self.task_type == "pair-classification"


# ---- readers -------------------------------------------------------------------------------------

def _open_lines(path: Path):
    if not path.is_file():
        raise TaskDataError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    return open(path, encoding="utf-8-sig", newline="")  # -sig: MRPC's header starts with a BOM


def _nonempty(path: Path, examples: list[Example]) -> list[Example]:
    if not examples:
        raise TaskDataError(f"{path}: no examples (the file is empty or holds only a header)")
    return examples


def _parse_label(raw: str, task_type: str, label_map: dict[str, str] | None, where: str) -> str | float:
    raw = raw.strip()
    if task_type == "regression":
        try:
            value = float(raw)
        except ValueError:
            raise TaskDataError(f"{where}: label {quote(raw)} is not a number (regression task)") from None
        if not math.isfinite(value):
            raise TaskDataError(f"{where}: label {quote(raw)} is not a finite number (regression task)")
        return value
    if raw == "":
        raise TaskDataError(f"{where}: empty label")
    if label_map is not None:
        if raw not in label_map:
            raise TaskDataError(f"{where}: unknown label {quote(raw)}; expected one of {sorted(label_map)}")
        return label_map[raw]
    return raw


def _parse_tag(raw: str, label_map: dict[str, str] | None, where: str) -> str:
    """One word's tag: a class name (`_parse_label` of a tagging task)."""
    return str(_parse_label(raw, "tagging", label_map, where))


def _column_index(col: str | int, header: list[str] | None, path: Path) -> int:
    if isinstance(col, int):
        return col
    if header is not None and col in header:
        return header.index(col)
    if col.lstrip("-").isdigit():
        return int(col)
    if header is None:
        raise TaskDataError(f"{path}: column {col!r} must be a 0-based index when the file has no header")
    raise TaskDataError(f"{path}:1: no column named {col!r}; the header has {header}")


def read_delimited(path: str | Path, *, task_type: str, text: str | int, label: str | int,
                   pair: str | int | None = None, delimiter: str = "\t", header: bool = True,
                   label_map: dict[str, str] | None = None, quoting: Literal[0, 1, 2, 3] = csv.QUOTE_NONE) -> list[Example]:
    """Rows of a CSV/TSV file. Columns are header names or 0-based indices. Tagging rows hold the words
    and the tags as whitespace-separated strings of equal length."""
    path = Path(path)
    kind = "tab" if delimiter == "\t" else repr(delimiter)
    examples: list[Example] = []
    with _open_lines(path) as f:
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        names = None
        if header:
            names = next(reader, None)
            if names is None:
                raise TaskDataError(f"{path}: empty file")
            names = [n.strip() for n in names]
        cols = [_column_index(c, names, path) for c in (text, label, pair) if c is not None]
        need = max(c if c >= 0 else -c - 1 for c in cols) + 1
        t_i, l_i = cols[0], cols[1]
        p_i = cols[2] if pair is not None else None
        start = reader.line_num + 1
        for row in reader:
            line, start = start, reader.line_num + 1
            where = f"{path}:{line}"
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < need:
                raise TaskDataError(f"{where}: expected at least {need} {kind}-separated columns, found {len(row)}"
                                    + (f" (header: {names})" if names else ""))
            sentence = row[t_i].strip()
            if not sentence:
                raise TaskDataError(f"{where}: empty text in column {text!r}")
            if task_type == "tagging":
                words, tags = sentence.split(), row[l_i].split()
                if len(words) != len(tags):
                    raise TaskDataError(f"{where}: {len(words)} words but {len(tags)} tags")
                examples.append(Example(words, [_parse_tag(t, label_map, where) for t in tags],
                                        source=where))
                continue
            second = None
            if p_i is not None:
                second = row[p_i].strip()
                if not second:
                    raise TaskDataError(f"{where}: empty text in column {pair!r}")
            examples.append(Example(sentence, _parse_label(row[l_i], task_type, label_map, where), second, where))
    return _nonempty(path, examples)


def read_jsonl(path: str | Path, *, task_type: str, text: str, label: str, pair: str | None = None,
               label_map: dict[str, str] | None = None) -> list[Example]:
    """One JSON object a line. Tagging: `text` holds a list of words (or a string split on whitespace) and
    `label` a list of tags of the same length."""
    path = Path(path)
    examples: list[Example] = []
    with _open_lines(path) as f:
        for line_no, line in enumerate(f, 1):
            where = f"{path}:{line_no}"
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskDataError(f"{where}: not valid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise TaskDataError(f"{where}: expected a JSON object, found {type(obj).__name__}")
            missing = [k for k in (text, label, pair) if k is not None and k not in obj]
            if missing:
                raise TaskDataError(f"{where}: missing key(s) {missing}; the object has {sorted(obj)}")
            if task_type == "tagging":
                words = obj[text].split() if isinstance(obj[text], str) else obj[text]
                tags = obj[label].split() if isinstance(obj[label], str) else obj[label]
                if not isinstance(words, list) or not isinstance(tags, list):
                    raise TaskDataError(f"{where}: {text!r} and {label!r} must be lists (or strings) for tagging")
                if not words:
                    raise TaskDataError(f"{where}: empty word list in {text!r}")
                if len(words) != len(tags):
                    raise TaskDataError(f"{where}: {len(words)} words but {len(tags)} tags")
                examples.append(Example([str(w) for w in words],
                                        [_parse_tag(str(t), label_map, where) for t in tags],
                                        source=where))
                continue
            sentence = str(obj[text]).strip()
            if not sentence:
                raise TaskDataError(f"{where}: empty text in {text!r}")
            second = None
            if pair is not None:
                second = str(obj[pair]).strip()
                if not second:
                    raise TaskDataError(f"{where}: empty text in {pair!r}")
            examples.append(Example(sentence, _parse_label(str(obj[label]), task_type, label_map, where),
                                    second, where))
    return _nonempty(path, examples)


def read_conll(path: str | Path, *, token_col: int = 0, label_col: int = -1, delimiter: str | None = None,
               label_map: dict[str, str] | None = None) -> list[Example]:
    """Column files (CoNLL-2000, FCE): one token a line, columns split on `delimiter` (None: whitespace),
    a blank line between sentences; `-DOCSTART-` lines are skipped."""
    path = Path(path)
    need = max(token_col if token_col >= 0 else -token_col - 1, label_col if label_col >= 0 else -label_col - 1) + 1
    examples: list[Example] = []
    words: list[str] = []
    tags: list[str] = []
    start = 0

    def flush() -> None:
        if words:
            examples.append(Example(list(words), list(tags), source=f"{path}:{start}"))
            words.clear()
            tags.clear()

    with _open_lines(path) as f:
        for line_no, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                flush()
                continue
            if line.startswith("-DOCSTART-"):
                continue
            cols = line.split(delimiter)
            if len(cols) < need:
                raise TaskDataError(f"{path}:{line_no}: expected at least {need} columns (token and tag), "
                                    f"found {len(cols)}: {quote(line)}")
            if not words:
                start = line_no
            words.append(cols[token_col].strip())
            tags.append(_parse_tag(cols[label_col], label_map, f"{path}:{line_no}"))
    flush()
    return _nonempty(path, examples)


# ---- the registry --------------------------------------------------------------------------------

CONLL2000_TAGS = ("O",) + tuple(f"{p}-{t}" for t in ("ADJP", "ADVP", "CONJP", "INTJ", "LST", "NP", "PP", "PRT",
                                                    "SBAR", "UCP", "VP") for p in ("B", "I"))

TASKS: dict[str, Task] = {t.name: t for t in (
    Task("sst2", "classification",
         partial(read_delimited, task_type="classification", text="sentence", label="label",
                 label_map={"0": "negative", "1": "positive"}),
         "train.tsv", "dev.tsv", labels=("negative", "positive"), metrics=("accuracy",)),
    Task("cola", "classification",  # no header: source, label, original label, sentence
         partial(read_delimited, task_type="classification", text=3, label=1, header=False,
                 label_map={"0": "unacceptable", "1": "acceptable"}),
         "in_domain_train.tsv", "in_domain_dev.tsv", labels=("unacceptable", "acceptable"), metrics=("mcc",),
         positive="acceptable"),
    Task("mrpc", "pair-classification",  # Quality, #1 ID, #2 ID, #1 String, #2 String
         partial(read_delimited, task_type="pair-classification", text=3, pair=4, label=0,
                 label_map={"0": "not_equivalent", "1": "equivalent"}),
         "train.tsv", "dev.tsv", labels=("not_equivalent", "equivalent"), metrics=("f1", "accuracy"),
         positive="equivalent"),
    Task("rte", "pair-classification",
         partial(read_delimited, task_type="pair-classification", text="sentence1", pair="sentence2",
                 label="label", label_map={"entailment": "entailment", "not_entailment": "not_entailment"}),
         "train.tsv", "dev.tsv", labels=("entailment", "not_entailment"), metrics=("accuracy",)),
    Task("stsb", "regression",  # no header: genre, file, year, id, score, sentence1, sentence2[, sources]
         partial(read_delimited, task_type="regression", text=5, pair=6, label=4, header=False),
         "sts-train.csv", "sts-dev.csv", metrics=("spearman", "pearson")),
    Task("conll2000", "tagging", partial(read_conll, token_col=0, label_col=2),
         "train.txt", None, test="test.txt", labels=CONLL2000_TAGS, metrics=("chunk_f1", "token_accuracy")),
    Task("fce", "tagging",
         partial(read_conll, token_col=0, label_col=1, delimiter="\t",
                 label_map={"c": "correct", "i": "incorrect"}),
         "fce-public.train.original.tsv", None, test="fce-public.test.original.tsv",
         labels=("correct", "incorrect"), metrics=("f0.5", "precision", "recall", "token_accuracy"),
         positive="incorrect"),
)}


def guess_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    fmt = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
           ".txt": "conll", ".conll": "conll", ".bio": "conll", ".iob": "conll"}.get(suffix)
    if fmt is None:
        raise TaskDataError(f"{path}: cannot tell the format from the extension {suffix!r}; pass --format "
                            f"({', '.join(FORMATS)})")
    return fmt


def generic_task(task_type: str, *, text_column: str | None, label_column: str | None,
                 text_pair_column: str | None = None, fmt: str | None = None, header: bool = True,
                 train_file: str = "", name: str = "custom") -> Task:
    """A task over a user's own files (columns by header name or 0-based index)."""
    if task_type not in TASK_TYPES:
        raise ValueError(f"--task-type must be one of {TASK_TYPES}, got {task_type!r}")
    fmt = fmt or guess_format(train_file)
    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {FORMATS}, got {fmt!r}")
    if task_type == "pair-classification" and text_pair_column is None:
        raise ValueError("--task-type pair-classification needs --text-pair-column")
    if text_pair_column is not None and task_type not in ("pair-classification", "regression"):
        raise ValueError(f"--text-pair-column is for pair-classification or regression, not {task_type}")
    if fmt == "conll":
        if task_type != "tagging":
            raise ValueError(f"the CoNLL column format holds tagging data, not {task_type}")
        try:
            token_col = int(text_column) if text_column is not None else 0
            label_col = int(label_column) if label_column is not None else -1
        except ValueError:
            raise ValueError("CoNLL column files have no header: --text-column and --label-column are 0-based "
                             f"indices (default 0 and -1), got {text_column!r} and {label_column!r}") from None
        read = partial(read_conll, token_col=token_col, label_col=label_col)
    else:
        if text_column is None or label_column is None:
            raise ValueError("--text-column and --label-column are required for CSV, TSV and JSONL files")
        if fmt == "jsonl":
            read = partial(read_jsonl, task_type=task_type, text=text_column, label=label_column,
                           pair=text_pair_column)
        else:
            read = partial(read_delimited, task_type=task_type, text=text_column, label=label_column,
                           pair=text_pair_column, header=header, delimiter="," if fmt == "csv" else "\t",
                           quoting=csv.QUOTE_MINIMAL if fmt == "csv" else csv.QUOTE_NONE)
    metrics = {"classification": ("accuracy", "macro_f1"), "pair-classification": ("accuracy", "macro_f1"),
               "regression": ("pearson", "spearman"), "tagging": None}[task_type]
    return Task(name, task_type, read, train_file, None, metrics=metrics)  # type: ignore[arg-type]


# ---- loading the splits --------------------------------------------------------------------------

@dataclass
class TaskData:
    task: Task  # with labels and metrics resolved
    labels: list[str]  # class or tag names in id order ([] for regression)
    train: list[Example]
    dev: list[Example]
    test: list[Example] | None = None
    files: dict[str, str] = field(default_factory=dict)  # split -> where it came from


def train_dev_split(examples: list[Example], fraction: float = DEV_FRACTION, seed: int = DEV_SEED
              ) -> tuple[list[Example], list[Example]]:
    """A fixed, seeded (train, dev) split; both keep the file's order."""
    if len(examples) < 2:
        raise TaskDataError(f"need at least 2 training examples to carve a dev split, found {len(examples)}")
    n_dev = min(len(examples) - 1, max(1, round(fraction * len(examples))))
    dev_idx = set(random.Random(seed).sample(range(len(examples)), n_dev))
    return ([e for i, e in enumerate(examples) if i not in dev_idx],
            [e for i, e in enumerate(examples) if i in dev_idx])


def subsample(examples: list[Example], n: int | None, seed: int = DEV_SEED) -> list[Example]:
    """At most n examples, a fixed seeded sample kept in file order (the files are often sorted)."""
    if n is None or n >= len(examples):
        return examples
    if n < 1:
        raise ValueError(f"--max-train-examples must be positive, got {n}")
    keep = set(random.Random(seed).sample(range(len(examples)), n))
    return [e for i, e in enumerate(examples) if i in keep]


def _label_values(e: Example) -> list:
    return list(e.label) if isinstance(e.label, list) else [e.label]


def _natural_key(label: str):
    try:
        return (0, float(label), "")
    except ValueError:
        return (1, 0.0, label)


def check_labels(examples: Sequence[Example], labels: Sequence[str]) -> None:
    """Every label of `examples` must be one of `labels`; otherwise name the file and line."""
    known = set(labels)
    for e in examples:
        bad = [v for v in _label_values(e) if v not in known]
        if bad:
            raise TaskDataError(f"{e.source}: unknown label {quote(bad[0])} (not seen in the training data); "
                                f"known labels: {list(labels)}")


def resolve_metrics(task: Task, labels: Sequence[str]) -> tuple[str, ...]:
    if task.metrics is not None:
        return task.metrics
    # tagging on a user's file: chunk F1 when the tags are BIO chunks, else token accuracy and macro F1
    if labels and all(t == "O" or t[:2] in ("B-", "I-") for t in labels) and any(t != "O" for t in labels):
        return ("chunk_f1", "token_accuracy")
    return ("token_accuracy", "macro_f1")


def load_task_data(task: Task, data_dir: str | Path | None = None, *, train: str | Path | None = None,
                   dev: str | Path | None = None, test: str | Path | None = None,
                   max_train_examples: int | None = None, max_eval_examples: int | None = None) -> TaskData:
    """Read train/dev(/test) of `task`: files given explicitly, else the task's default names in data_dir.
    Without a dev file, a fixed seeded DEV_FRACTION of train becomes dev (before any subsampling)."""
    def where(explicit, default):
        if explicit is not None:
            return Path(explicit)
        if default is None:
            return None
        if data_dir is None:
            raise TaskDataError(f"task {task.name}: pass --data DIR (holding {default}) or the files themselves")
        return Path(data_dir) / default

    if data_dir is not None and not Path(data_dir).is_dir():
        raise TaskDataError(f"--data {str(data_dir)!r} is not a directory")
    train_path, dev_path = where(train, task.train), where(dev, task.dev)
    test_path = where(test, task.test)
    train_ex = task.read(train_path)
    files = {"train": str(train_path)}
    if dev_path is None:
        train_ex, dev_ex = train_dev_split(train_ex)
        files["dev"] = f"{DEV_FRACTION:.0%} of {train_path} (seed {DEV_SEED})"
    else:
        dev_ex = task.read(dev_path)
        files["dev"] = str(dev_path)
    test_ex = None
    if test_path is not None:
        test_ex = task.read(test_path)
        files["test"] = str(test_path)

    if task.task_type == "regression":
        labels: list[str] = []
    elif task.labels is not None:
        labels = list(task.labels)
        check_labels(train_ex, labels)
    else:
        labels = sorted({v for e in train_ex for v in _label_values(e)}, key=_natural_key)
        if task.task_type != "tagging" and len(labels) < 2:
            raise TaskDataError(f"{train_path}: the training data has a single label {labels}; a classifier "
                                "needs at least two")
    if labels:
        check_labels(dev_ex, labels)
        if test_ex is not None:
            check_labels(test_ex, labels)
    if task.is_pair and any(e.text_pair is None for e in train_ex):
        raise TaskDataError(f"{train_path}: pair task without a second text column")

    train_ex = subsample(train_ex, max_train_examples)
    if max_eval_examples is not None:
        dev_ex = dev_ex[:max_eval_examples]
        test_ex = test_ex[:max_eval_examples] if test_ex is not None else None
    task = replace(task, labels=tuple(labels) or None, metrics=resolve_metrics(task, labels))
    return TaskData(task, labels, train_ex, dev_ex, test_ex, files)


# ---- metrics -------------------------------------------------------------------------------------

def task_metrics(task: Task, gold: Sequence, pred: Sequence) -> dict[str, float]:
    """The task's metrics on parallel gold/predicted values: label names, floats, or tag lists for tagging."""
    names = task.metrics or resolve_metrics(task, task.labels or ())
    out: dict[str, float] = {}
    if task.task_type == "tagging":
        flat_gold = [t for s in gold for t in s]
        flat_pred = [t for s in pred for t in s]
        for name in names:
            if name == "chunk_f1":
                r = M.chunk_f1(gold, pred)
                out.update(chunk_f1=r["f1"], chunk_precision=r["precision"], chunk_recall=r["recall"])
            elif name == "token_accuracy":
                out[name] = M.accuracy(flat_gold, flat_pred)
            elif name == "macro_f1":
                out[name] = M.macro_f1(flat_gold, flat_pred)
            elif name in ("f0.5", "precision", "recall"):
                r = M.precision_recall_fbeta(flat_gold, flat_pred, task.positive, beta=0.5)
                out[name] = r["f" if name == "f0.5" else name]
            else:
                raise ValueError(f"unknown tagging metric {name!r}")
        return out
    for name in names:
        if name == "accuracy":
            out[name] = M.accuracy(gold, pred)
        elif name == "mcc":
            out[name] = M.matthews_corrcoef(gold, pred)
        elif name == "f1":
            out[name] = M.f1(gold, pred, positive=task.positive)
        elif name == "macro_f1":
            out[name] = M.macro_f1(gold, pred)
        elif name == "pearson":
            out[name] = M.pearson(gold, pred)
        elif name == "spearman":
            out[name] = M.spearman(gold, pred)
        else:
            raise ValueError(f"unknown metric {name!r}")
    return out
