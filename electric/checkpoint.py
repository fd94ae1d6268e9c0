"""Local checkpoint directories, with clear errors (there is no network here): what a model directory holds (its
kind, an export's manifest: `ExportManifest`) - the names every backend shares, so backends import them from here -,
"run dir -> model dir", optional extras, and writing a directory or a file atomically. Tokenizers:
`electric.tokenization`."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

# defined in the package, light for the command line to catch; electric.checkpoint's names all the same
from electric import DISTRIBUTION, CheckpointError, MissingExtra, install_hint  # noqa: F401
from electric.textio import atomic_file, atomic_path, atomic_write_text  # noqa: F401 - their home is textio

# Nothing in this project may reach a model hub; set before transformers reads the environment.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

Kind = Literal["discriminator", "cloze", "classifier", "tagger"]
Runtime = Literal["onnx", "torch"]  # what runs a model: ONNX Runtime (an `electric export` directory) or torch
MANIFEST = "electric.json"  # written by `electric export` beside the ONNX file(s): an ExportManifest
FORMAT_VERSION = 1  # of the MANIFEST `electric export` writes
FORMAT_VERSIONS = (FORMAT_VERSION,)  # of the MANIFESTs this version reads
TRAINING_HEALTH = "training_health.json"  # written by pretraining beside each model it saves (training.report)

ARCHITECTURE_KINDS: dict[str, Kind] = {
    "ElectraForPreTraining": "discriminator",
    "ElectricForClozeLM": "cloze",  # Electric's two-tower cloze model (RUN/generator of an Electric run)
    "ElectraForSequenceClassification": "classifier",
    "ElectraForTokenClassification": "tagger",
}


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
    otherwise FileExistsError naming `flag` and saying what to do (`hint`). An absent one must be creatable
    (`check_creatable`)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{flag} {str(out)!r} is a file")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{flag} {str(out)!r} already exists and is not empty; {hint}")
    if not out.exists():
        check_creatable(out, flag)


def check_creatable(out: str | os.PathLike, flag: str = "--out") -> None:
    """CheckpointError naming `flag` when the absent directory `out` cannot be made (a parent that is a file, a
    read-only or virtual file system, no permission), before a command spends minutes on what it would write
    there. It makes the missing directories and removes them again: the one test that holds for root too."""
    out = Path(os.path.abspath(out))
    missing = []  # deepest first
    p = out
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    if not missing:
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointError(f"{flag} {str(out)!r} cannot be created: {e.strerror or e}"
                              f"{f' ({e.filename})' if e.filename and str(e.filename) != str(out) else ''}") from None
    for d in missing:
        with suppress(OSError):  # another process may have put something there since
            d.rmdir()


def require_local_dir(path: str | os.PathLike, what: str) -> Path:
    """Return `path` as a Path if it is an existing directory; otherwise say why not."""
    p = Path(path).expanduser()
    if p.is_dir():
        return p
    if existing_dir(p).is_dir():  # a save of `p` was killed between its two renames: read the complete copy
        return existing_dir(p)
    if p.exists():
        raise CheckpointError(f"{what} {str(path)!r} is a file, expected a directory")
    if _HUB_NAME.match(str(path)) and not Path(str(path).split("/", 1)[0]).expanduser().is_dir():  # runs/nope: a path
        raise CheckpointError(
            f"{what} {str(path)!r} is not a local directory. It looks like a model-hub name, but this tool "
            "never downloads (no network). Train one with `python -m training.pretrain` or pass the path "
            "of a local copy."
        )
    raise CheckpointError(f"{what} {str(path)!r} does not exist")


def require_extra(feature: str, modules: tuple[str, ...] = ("torch", "transformers"), extra: str = "torch") -> None:
    """Raise `MissingExtra` naming `feature` and how to install `extra` (`install_hint`) unless `modules` are
    installed (looked up, not imported). Serving ONNX exports needs neither torch nor transformers."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(f"{feature} needs {' and '.join(missing)}, which this installation lacks: "
                           f"{install_hint(extra)}")


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


FINETUNE_CONFIG = "finetune_config.json"  # beside a fine-tuned model: its fine-tuning config (max_seq_length)


def trained_length(model_dir: str | os.PathLike, config: dict) -> tuple[int, str]:
    """The longest input, [CLS]/[SEP] included, that the model in `model_dir` (its transformers `config`) was trained
    on, and where that figure comes from, in words: the max_seq_length of a fine-tuned model (finetune_config.json
    in its directory) or of a pretraining run (RUN/config.json beside RUN/discriminator or RUN/generator); for a
    checkpoint from elsewhere (no training config), its position table (max_position_embeddings). Never more than
    the table. Positions past it exist in the table but were never trained: serve them only on purpose."""
    d = Path(model_dir)
    table = int(config.get("max_position_embeddings", 512))
    candidates = [d / FINETUNE_CONFIG]
    if d.resolve() in {p.resolve() for p in run_parts(d.resolve().parent).values()}:
        candidates.append(d.resolve().parent / "config.json")  # the pretraining run's
    for path in candidates:
        if not path.is_file():
            continue
        try:
            values = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise CheckpointError(f"{str(path)!r} is not valid JSON: {e}") from None
        length = values.get("max_seq_length") if isinstance(values, dict) else None
        if length is None:
            continue
        if not isinstance(length, int) or isinstance(length, bool) or length < 3:
            raise CheckpointError(f"{str(path)!r}: max_seq_length {length!r} is not a length of at least 3 tokens")
        return min(length, table), f"max_seq_length of {path}"
    return table, f"max_position_embeddings of {d / 'config.json'} (no training config beside the checkpoint)"


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


def training_health(model_dir: str | os.PathLike) -> dict | None:
    """What the pretraining run that made this model said of it at its end (steps, tokens, its first and last
    evaluation, `warnings`): TRAINING_HEALTH in a checkpoint directory, its copy in an export's manifest; None
    for a model no run of ours made (or made before runs wrote it), or one whose file cannot be read."""
    d = Path(model_dir)
    try:
        if (d / MANIFEST).is_file():
            return ExportManifest.read(d).training_health
        if (d / TRAINING_HEALTH).is_file():
            return json.loads((d / TRAINING_HEALTH).read_text())
    except (OSError, ValueError):  # CheckpointError is a ValueError
        return None
    return None


class ExportManifest(BaseModel):
    """MANIFEST: what an `electric export` directory holds and how it was made. Export writes it (`write`); the
    runtime, the server and `serving_defaults` read it (`read`), which refuses a format version not in
    FORMAT_VERSIONS. The file has exactly the keys set when it was made or read: a key older exports lack stays
    absent, and a discriminator's `calibration` is null when it was not calibrated, absent for other kinds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["electric-onnx"]
    format_version: int  # FORMAT_VERSION when written
    kind: Kind
    architecture: str  # the checkpoint's head, one of ARCHITECTURE_KINDS
    labels: list[str] | None  # a classifier's or tagger's class names in id order; null for other kinds
    problem_type: str | None  # the checkpoint config's (a classifier's "regression", ...)
    max_length: int  # the position table: the most the graph takes
    # the length the model was trained on and where that comes from (trained_length): what the runtime, `electric
    # score` and the server take by default; exports made before it was recorded lack both
    trained_length: int | None = None
    trained_length_from: str | None = None
    opset: int
    precision: dict[str, str]  # the default precision per device: {"cpu": ..., "cuda": ...}
    # how model.int8.onnx scales its activations: "static" = the same score in any batch; "dynamic" = a text's score
    # moves a little with its batch-mates; null without int8
    int8_method: str | None = None
    files: dict[str, str]  # precision (fp32, int8, fp16) -> its graph's file in the directory
    inputs: list[str]  # the graph's input names, in order
    output: str  # the graph's output name
    output_meaning: str | None = None  # what the output is, in words
    scoring_methods: list[str] = Field(default_factory=list)  # electric score/serve --method on this directory
    source: dict[str, str]  # the checkpoint exported: its path and sha256
    exporter: dict[str, str]  # the torch.onnx exporter and the attention it traced
    versions: dict[str, str]  # of the libraries that made it
    onnxruntime: str  # the version parity was checked with
    parity: dict[str, Any]  # the sentences and each precision's difference from its reference
    training_health: dict[str, Any] | None = None  # training_health of the checkpoint
    # discriminators: P(replaced) = sigmoid(scale * s + bias) (electric.inference.calibration); null = raw sigmoid(s)
    calibration: dict[str, Any] | None = None
    created: str  # when, %Y-%m-%dT%H:%M:%S%z
    # what `electric serve --model DIR` applies by default (`electric adapt` writes them: serving_defaults)
    rerank_weights: dict[str, Any] | None = None  # the /v1/rerank weights a request that gives none gets
    detector: str | None = None  # a discriminator export inside DIR that answers /v1/detect, by its relative path
    ngram: str | None = None  # an ARPA n-gram LM inside DIR that /v1/rerank weighs beside the model, by its path
    adapted: dict[str, Any] | None = None  # where `electric adapt`'s model card and report lie

    @classmethod
    def read(cls, model_dir: str | os.PathLike) -> ExportManifest:
        """The manifest of the export directory `model_dir`; CheckpointError in one line naming the file when there
        is none, it is not JSON, its format version is not one of FORMAT_VERSIONS, or a key is missing, unknown or
        of the wrong type."""
        d = require_local_dir(model_dir, "model")
        path = d / MANIFEST
        if not path.is_file():
            raise CheckpointError(f"{str(d)!r} has no {MANIFEST}: it is not an `electric export` directory "
                                  "(export it with `electric export --model DIR --out DIR`)")
        try:
            values = json.loads(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise CheckpointError(f"{str(path)!r} cannot be read: {e.strerror or e}") from None
        except ValueError as e:  # UnicodeDecodeError, JSONDecodeError
            raise CheckpointError(f"{str(path)!r} is not valid JSON: {e}") from None
        if not isinstance(values, dict):
            raise CheckpointError(f"{str(path)!r} holds a JSON {type(values).__name__}, not an object")
        version = values.get("format_version")
        if "format_version" in values and (type(version) is not int or version not in FORMAT_VERSIONS):
            raise CheckpointError(
                f"{str(path)!r} has format_version {version!r}; this version of electric reads format_version "
                f"{' or '.join(map(str, FORMAT_VERSIONS))}: export the model again with it, or use the version that "
                "exported it")
        try:
            return cls.model_validate(values)
        except ValidationError as e:
            raise CheckpointError(f"{str(path)!r} {'; '.join(map(_manifest_problem, e.errors()))}") from None

    def to_json(self) -> str:
        """The file's text: the keys set, in the order declared."""
        return json.dumps(self.model_dump(exclude_unset=True), indent=2) + "\n"

    def write(self, model_dir: str | os.PathLike) -> None:
        """Write MANIFEST into `model_dir`, whole or not at all (`atomic_write_text`)."""
        atomic_write_text(Path(model_dir) / MANIFEST, self.to_json())


def _manifest_problem(error: ErrorDetails) -> str:
    """One pydantic error of ExportManifest.read, in words."""
    key = ".".join(map(str, error["loc"]))
    if error["type"] == "missing":
        return f"lacks {key!r}"
    if error["type"] == "extra_forbidden":
        return f"has a key {key!r} that format_version {FORMAT_VERSION} does not define"
    return f"{key!r}: {error['msg']}"


@dataclass(frozen=True)
class ServingDefaults:
    """What an export's manifest tells `electric serve --model DIR` to do by default (`electric adapt` writes it):
    the /v1/rerank weights a request that gives none gets, and a discriminator export inside DIR that answers
    /v1/detect beside a cloze scorer."""

    rerank_weights: dict | None = None  # a weights object: lm, length, beta, prior, piece, lm_score, ngram
    detector: Path | None = None  # DIR/<its manifest's "detector">
    ngram: Path | None = None  # DIR/<its manifest's "ngram">: an ARPA file (electric.evaluation.arpa)


def serving_defaults(model_dir: str | os.PathLike) -> ServingDefaults:
    """The serving defaults in DIR's manifest (none for a checkpoint, or an export that carries none);
    CheckpointError naming the file when the manifest cannot be read or the detector is missing."""
    d = Path(model_dir)
    if not (d / MANIFEST).is_file():
        return ServingDefaults()
    manifest = ExportManifest.read(d)
    detector = ngram = None
    if manifest.detector is not None:
        where = (d / manifest.detector).resolve()
        if d.resolve() not in where.parents or not (where / MANIFEST).is_file():
            raise CheckpointError(f"{str(d / MANIFEST)!r}: 'detector' {manifest.detector!r} is not an export "
                                  f"directory inside {str(d)!r}")
        detector = d / manifest.detector
    if manifest.ngram is not None:
        where = (d / manifest.ngram).resolve()
        if d.resolve() not in where.parents or not where.is_file():
            raise CheckpointError(f"{str(d / MANIFEST)!r}: 'ngram' {manifest.ngram!r} is not a file inside {str(d)!r} "
                                  "(the model directory lost its n-gram LM: copy the whole directory)")
        ngram = d / manifest.ngram
    return ServingDefaults(manifest.rerank_weights, detector, ngram)
