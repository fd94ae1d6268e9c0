"""`electric adapt`'s inputs, checked before anything is written: the checkpoint, the text, the dev, test and train
lists and the options, each bad one named in one line (`AdaptError`); training/adapt.py runs the stages on them."""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIN_DEV_LISTS = 50  # fewer: the paired bootstrap of the guard can call almost no gain significant
MIN_TRAIN_LISTS = 100  # fewer: discriminative training learns this recogniser's errors from too few examples


class AdaptError(Exception):
    """What stops `electric adapt`, in one line; nothing is written to --out."""


@dataclass(frozen=True)
class Inputs:
    """Everything the command was given, checked."""

    checkpoint: Path
    checkpoint_sha256: str
    texts: tuple[Path, ...]
    sentences: tuple[str, ...]  # the text's non-blank lines, stripped, in file order
    text_sha256: tuple[str, ...]
    dev: Any  # list[NBestList]
    test: Any  # list[NBestList] or None
    dev_path: Path
    test_path: Path | None
    train: Any  # list[NBestList] or None: --train-lists, for discriminative training
    train_paths: tuple[Path, ...]
    train_minutes: float
    train_epochs: int
    out: Path
    minutes: float
    metric: str
    scorer: str
    precision: str
    seed: int
    overwrite: bool

    def fingerprint(self, recipe: dict) -> dict:
        """What decides every stage's result: the same fingerprint lets an interrupted run resume."""
        return {"checkpoint_sha256": self.checkpoint_sha256, "text_sha256": list(self.text_sha256),
                "dev_sha256": sha256_file(self.dev_path),
                "test_sha256": None if self.test_path is None else sha256_file(self.test_path),
                "train_sha256": [sha256_file(p) for p in self.train_paths], "train_minutes": self.train_minutes,
                "train_epochs": self.train_epochs,
                "minutes": self.minutes, "metric": self.metric, "scorer": self.scorer, "precision": self.precision,
                "seed": self.seed, "recipe": recipe}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_sentences(path: Path) -> list[str]:
    """The non-blank lines of a text file, stripped; AdaptError naming the file when it is missing, not text or
    holds none."""
    from electric.textio import decode_text

    if not path.is_file():
        raise AdaptError(f"--text {path}: {'no such file' if not path.exists() else 'not a file'}")
    try:
        text = decode_text(path.read_bytes(), str(path))
    except (OSError, ValueError) as e:
        raise AdaptError(f"--text {path}: cannot read it as text ({e})") from None
    lines = [s.strip() for s in text.splitlines() if s.strip()]
    if not lines:
        raise AdaptError(f"--text {path}: the file is empty (give one sentence of your domain a line)")
    return lines


def read_lists(path: Path, flag: str, need: int) -> list:
    """n-best lists with a reference each, at least `need` of them; AdaptError naming the file otherwise."""
    from electric.evaluation.nbest import NBestError, read_nbest, require_refs

    try:
        lists, fmt = read_nbest(path)
        require_refs(lists, path, fmt)
    except NBestError as e:
        raise AdaptError(f"{flag} {e}") from None
    if len(lists) < need:
        raise AdaptError(f"{flag} {path}: {len(lists)} n-best lists, too few to tune on; give at least {need} (a "
                         "few hundred make the guard's decision sure)")
    return lists


def named(lists: list) -> bool:
    """Whether the lists carry their own utterance ids (not only their positions)."""
    return any(nb.utt_id != str(k) for k, nb in enumerate(lists))


def read_train_lists(paths: list[Path], dev: list, test: list | None, metric: str) -> list | None:
    """The --train-lists, all of them, checked: references, more than one hypothesis somewhere, at least
    MIN_TRAIN_LISTS lists, none of them a dev or test utterance (by id or by reference). None without any."""
    if not paths:
        return None
    if metric not in ("wer", "cer"):
        raise AdaptError(f"--train-lists: discriminative training minimises word or character errors; --metric "
                         f"{metric} cannot be trained for (use --metric wer or cer, or leave --train-lists out)")
    lists: list = []
    for path in paths:
        got = read_lists(path, "--train-lists", 1)
        if all(len(set(nb.hyps)) < 2 for nb in got):
            raise AdaptError(f"--train-lists {path}: every list has one hypothesis; training learns from the "
                             "differences between a list's hypotheses (give n-best lists, n > 1)")
        lists += got
    if len(lists) < MIN_TRAIN_LISTS:
        raise AdaptError(f"--train-lists {', '.join(map(str, paths))}: {len(lists)} n-best lists, too few to train on; "
                         f"give at least {MIN_TRAIN_LISTS} (a few thousand learn more)")
    for flag, held in (("--dev", dev), ("--test", test or [])):
        # ids only where both files give them (a list without an id is named by its position)
        ids = {nb.utt_id for nb in held} if named(held) and named(lists) else set()
        refs = {nb.ref for nb in held}
        shared = sum(nb.utt_id in ids or nb.ref in refs for nb in lists)
        if shared:
            raise AdaptError(f"--train-lists: {shared} of its {len(lists)} lists repeat a {flag} utterance (the same id "
                             f"or the same reference); the lists trained on must be apart from those the weights are "
                             f"{'tuned' if flag == '--dev' else 'tested'} on: leave those out")
    return lists


def check_inputs(args: argparse.Namespace) -> Inputs:
    """Every input checked, in the order given, before anything is written."""
    from electric.checkpoint import CheckpointError
    from electric.evaluation.nbest import require_metric
    from electric.export.manifest import checkpoint_hash
    from electric.pretraining.init_from import resolve_init

    try:
        source = resolve_init(str(args.checkpoint))
    except CheckpointError as e:
        raise AdaptError(f"--checkpoint: {e}") from None
    sentences: list[str] = []
    for t in args.text:
        sentences += read_sentences(Path(t))
    try:
        require_metric(args.metric, "electric adapt")
    except (ImportError, ValueError) as e:
        raise AdaptError(f"--metric {args.metric}: {e}") from None
    dev = read_lists(Path(args.dev), "--dev", MIN_DEV_LISTS)
    test = read_lists(Path(args.test), "--test", 1) if args.test else None
    train = read_train_lists([Path(t) for t in args.train_lists or ()], dev, test, args.metric)
    scorer = args.scorer or ("electric" if train else "cloze")
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise AdaptError(f"--out {out} exists; give a new directory, or --overwrite to replace it")
    if args.minutes <= 0:
        raise AdaptError(f"--minutes {args.minutes:g}: give a positive number of minutes")
    if args.train_minutes <= 0 or args.train_epochs < 1:
        raise AdaptError(f"--train-minutes {args.train_minutes:g} / --train-epochs {args.train_epochs}: give a positive "
                         "number of minutes and at least one epoch")
    return Inputs(checkpoint=Path(args.checkpoint), checkpoint_sha256=checkpoint_hash(source.encoder.root),
                  texts=tuple(Path(t) for t in args.text), sentences=tuple(sentences),
                  text_sha256=tuple(sha256_file(Path(t)) for t in args.text), dev=dev, test=test,
                  dev_path=Path(args.dev), test_path=Path(args.test) if args.test else None, train=train,
                  train_paths=tuple(Path(t) for t in args.train_lists or ()), train_minutes=args.train_minutes,
                  train_epochs=args.train_epochs, out=out,
                  minutes=args.minutes, metric=args.metric, scorer=scorer, precision=args.precision,
                  seed=args.seed, overwrite=args.overwrite)
