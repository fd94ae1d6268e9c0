"""`electric adapt`: a checkpoint, your domain's text and your n-best lists in; a served reranker out.

    electric adapt --checkpoint runs/checkpoints/all-MiniLM-L6-v2 --text my_domain.txt \\
        --train-lists train.nbest.json --dev dev.nbest.json --test test.nbest.json --out models/my-domain
    electric serve --model models/my-domain      # /v1/score, /v1/rerank (the chosen combination), /v1/detect

1. check every input before anything is written (one line naming the input and what is wrong);
2. continue the checkpoint as Electric on the text (one sentence a line, each its own example) with the recipe
   measured on ATIS (RECIPE: 10 epochs at lr 1e-4, no warm-up floor, the sampling temperature's default
   schedule), `--minutes` at most;
3. stop when the adapted model ranks replaced tokens below chance or ends worse than it started (nothing is
   exported);
4. with --train-lists: train the scorer on them with the minimum-word-error loss (training/discriminative.py), and
   the detector on their real errors (training/detector.py);
5. export the scorer (`--scorer`: Electric's energy with --train-lists, the cloze model's log q without, by
   default) and the detector (the energy model), ONNX int8 by default, each behind the export's parity gate;
6. score every distinct hypothesis of the dev (and test) lists once, and tune the weights on dev;
7. the same for a Kneser-Ney trigram trained on the same text, the baseline a user would build first, and for both
   LMs together; the guard chooses among no LM, the trigram, the model and both, simplest first, each only on a
   significant dev gain over the one it holds (training/adapt_choice.py);
8. write MODEL: the scorer's export with the chosen weights in its manifest (the server applies them to /v1/rerank
   requests that give none), `detector/` (/v1/detect), `ngram.arpa` (the trigram, which /v1/rerank scores when the
   weights use it), `README.md` (a model card: what it was adapted and trained on, how long, its health, the
   guard's walk, every candidate against the trigram on dev and test) and `adapt.json` (all of it, as data).

Work happens in MODEL.partial beside MODEL; MODEL appears whole at the end or not at all. Interrupted (Ctrl-C), the
same command resumes where it stopped (training from its last checkpoint or saved state); other inputs start
clean. Both say so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import random
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from electric.evaluation.nbest import ScoredLists
    from electric.evaluation.nbest.scored import ScoreTexts

from training.adapt_card import NGRAM_FILE, detector_line, guard_sentence, model_card, summary
from training.adapt_choice import figures, tune, with_prior
from training.adapt_inputs import MIN_DEV_LISTS, MIN_TRAIN_LISTS, AdaptError, Inputs, check_inputs

REPO = Path(__file__).resolve().parents[1]

# The recipe that took all-MiniLM-L6-v2 from 7.25% to about 6.2% ATIS test WER in 4 CPU minutes (docs/adaptation.md):
# chosen here, not by the user.
RECIPE: dict[str, str | int | float] = {"objective": "electric", "epochs": 10, "lr": 1e-4, "min_warmup_steps": 0}
DEFAULT_MINUTES = 4.0
DEFAULT_TRAIN_MINUTES = 10.0
DEFAULT_TRAIN_EPOCHS = 3
DETECTOR_MINUTES = 4.0  # the detector's training on the lists' real errors, at most (within --train-minutes)
NGRAM_ORDER = 3
PARITY_SENTENCES = 200  # of the text, seeded: the export's parity check runs on them
CALIBRATION_SENTENCES = 1000  # of the text, seeded: /v1/detect's calibration needs a few thousand tokens
MIN_ENERGY_AUC = 0.5  # an energy that ranks replaced tokens below chance would rank texts backwards
METHOD_OF_SCORER = {"cloze": "cloze", "electric": "electric"}
CARD, REPORT = "README.md", "adapt.json"


class NotServable(AdaptError):
    """The adapted model failed the health gate: the next run starts clean."""


class Said(AdaptError):
    """A stop whose one line the pretraining process has printed already."""


def log(msg: str) -> None:
    print(f"[adapt {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def stage(k: int, what: str) -> None:
    log(f"{k}/8 {what}")


# ---- the work directory: resume or start clean ---------------------------------------------------------------


@dataclass(frozen=True)
class Work:
    """MODEL.partial: the run, the exports and the inputs' fingerprint, until MODEL is written."""

    root: Path

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def text(self) -> Path:
        return self.root / "text.txt"

    @property
    def discriminative(self) -> Path:
        return self.root / "discriminative"

    @property
    def detector(self) -> Path:
        return self.root / "detector"

    @property
    def parity(self) -> Path:
        return self.root / "parity.txt"

    @property
    def calibration(self) -> Path:
        return self.root / "calibration.txt"

    def done(self, name: str) -> bool:
        return (self.root / f"{name}.done").is_file()

    def mark(self, name: str, value: dict | None = None) -> None:
        from electric.checkpoint import atomic_write_text

        atomic_write_text(self.root / f"{name}.done", json.dumps(value or {}) + "\n")

    def read(self, name: str) -> dict:
        return json.loads((self.root / f"{name}.done").read_text())


def open_work(inputs: Inputs) -> Work:
    """MODEL.partial for these inputs: resumed when an interrupted run left it with the same fingerprint, else
    made anew; says which."""
    from electric.checkpoint import atomic_write_text

    work = Work(inputs.out.with_name(inputs.out.name + ".partial"))
    fingerprint = json.dumps(inputs.fingerprint(RECIPE), sort_keys=True)
    stamp = work.root / "inputs.json"
    if stamp.is_file() and stamp.read_text() == fingerprint:
        done = [s for s in ("trained", "discriminated", "detector", "exported") if work.done(s)]
        log(f"resuming the interrupted run in {work.root} (same inputs; "
            + (f"done: {', '.join(done)})" if done else "training continues from its last checkpoint)"))
        return work
    if work.root.exists():
        log(f"starting clean: {work.root} holds a run of other inputs (checkpoint, text, lists or options)")
        shutil.rmtree(work.root)
    work.root.mkdir(parents=True)
    atomic_write_text(stamp, fingerprint)
    return work


def write_text(inputs: Inputs, work: Work) -> None:
    """The adaptation text, one sentence a document (as the hypotheses it will score come, one at a time), and
    seeded samples of it for the export's parity check and the detector's calibration."""
    work.text.write_text("".join(f"{s}\n\n" for s in inputs.sentences), encoding="utf-8")
    sample = random.Random(inputs.seed).sample(inputs.sentences, min(CALIBRATION_SENTENCES, len(inputs.sentences)))
    work.calibration.write_text("".join(f"{s}\n" for s in sample), encoding="utf-8")
    work.parity.write_text("".join(f"{s}\n" for s in sample[:PARITY_SENTENCES]), encoding="utf-8")


# ---- 2-3. adapt, and the health gate -------------------------------------------------------------------------


def pretrain_argv(inputs: Inputs, work: Work, resume: bool) -> list[str]:
    """The pretraining command line, its paths absolute (it runs from the project's root)."""
    run, text = str(work.run.resolve()), str(work.text.resolve())
    if resume:
        return ["--resume", "--out", run, "--data", text, "--num-proc", "1"]
    return ["--objective", str(RECIPE["objective"]), "--init-from", str(inputs.checkpoint.resolve()), "--data", text,
            "--epochs", str(RECIPE["epochs"]), "--lr", str(RECIPE["lr"]),
            "--min-warmup-steps", str(RECIPE["min_warmup_steps"]), "--time-budget", str(inputs.minutes),
            "--seed", str(inputs.seed), "--num-proc", "1", "--out", run, "--overwrite"]


def adapt(inputs: Inputs, work: Work) -> None:
    """`python -m training.pretrain` in its own process (its progress bar on this terminal; Ctrl-C makes it save a
    checkpoint, and the next run resumes from it)."""
    from training.run_dir import saved_trainer

    resume = (work.run / "state" / "trainer.pt").is_file()
    argv = pretrain_argv(inputs, work, resume)
    log(("resuming" if resume else "starting") + f": python -m training.pretrain {shlex.join(argv)}")
    proc = subprocess.Popen([sys.executable, "-m", "training.pretrain", *argv], cwd=REPO)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.wait()  # it got the signal too: it saves a checkpoint first
        raise
    if rc == 2:  # the text or the checkpoint: pretraining said what is wrong in one line
        raise Said(f"adapting on {', '.join(map(str, inputs.texts))} failed")
    if rc != 0:
        raise AdaptError(f"adapting failed (python -m training.pretrain exited {rc}; its message is above)")
    health = run_health(work.run)
    health["minutes"] = saved_trainer(work.run).elapsed / 60
    if health.get("end") is None:
        raise AdaptError("adapting ended without an evaluation of the model (interrupted?); run the same command "
                         "again to resume")
    work.mark("trained", health)


def run_health(run: Path) -> dict:
    """The run's health record (steps, tokens, its first and last evaluation, warnings), or {}."""
    from electric.checkpoint import training_health

    return training_health(run / "discriminator") or {}


def health_gate(health: dict) -> None:
    """AdaptError when the adapted model must not be served: its energy ranks replaced tokens below chance, or
    the run ended worse than it started (training.report.verdict's warnings)."""
    end = health["end"]
    auc = end.get("val_energy_auc")
    if auc is not None and auc < MIN_ENERGY_AUC:
        raise NotServable(f"the adapted model ranks replaced tokens below chance on held-out text (energy AUC "
                         f"{auc:.3f} < {MIN_ENERGY_AUC}), so it is not served: give more text of your domain or "
                         "more --minutes")
    worse = [w for w in health.get("warnings", []) if "worse than it started" in w]
    if worse:
        raise NotServable(f"the adapted model {worse[0].removeprefix('it ')}, so it is not served: give more text "
                         "of your domain or more --minutes")


# ---- discriminative training on the train lists ---------------------------------------------------------------


def discriminate(inputs: Inputs, work: Work) -> None:
    """The scorer fine-tuned on the --train-lists with the MWER loss (training/discriminative.py) into
    work.discriminative/run; Ctrl-C saves its state there and the same command resumes it."""
    from training.discriminative import Interrupted, TrainSpec, train_on_lists

    spec = TrainSpec(source=work.run, part="generator" if inputs.scorer == "cloze" else "discriminator",
                     out=work.discriminative, lists=inputs.train, metric=inputs.metric, epochs=inputs.train_epochs,
                     minutes=inputs.train_minutes, seed=inputs.seed)
    try:
        record = train_on_lists(spec, log=log)
    except Interrupted:
        raise KeyboardInterrupt from None
    log(f"discriminative training: {record['steps']} steps, {record['tokens']:,} tokens in "
        f"{record['seconds'] / 60:.1f} minutes ({record['tokens_per_s']:,} tokens/s); held-back "
        f"{inputs.metric.upper()} {record['held_back_before']:.2f}% -> {record['held_back_after']:.2f}% (epoch "
        f"{record['chosen_epoch']:g} kept; stopped: {record['stopped']})")
    work.mark("discriminated", record)


def train_the_detector(inputs: Inputs, work: Work) -> None:
    """The adapted energy model fine-tuned on the --train-lists' real errors (training/detector.py) into
    work.detector/run/discriminator: what /v1/detect serves."""
    from training.detector import DetectorSpec, train_detector

    run = work.detector / "run"
    run.mkdir(parents=True, exist_ok=True)
    shutil.copy2(work.run / "config.json", run / "config.json")  # the trained length, as the run's
    spec = DetectorSpec(source=work.run / "discriminator", out=run / "discriminator", lists=inputs.train,
                        test=inputs.test, minutes=min(DETECTOR_MINUTES, inputs.train_minutes), seed=inputs.seed)
    work.mark("detector", train_detector(spec, log=log))


# ---- 4. export -----------------------------------------------------------------------------------------------


def export(inputs: Inputs, work: Work) -> None:
    """The scorer into work.model and, beside a cloze scorer, the energy model into work.model/detector; each
    behind the export's parity gate (CheckpointError, ExportError or ParityError become an AdaptError)."""
    from electric.checkpoint import CheckpointError
    from electric.export.errors import ExportError, ParityError
    from electric.export.exporter import ExportOptions, export_model

    def quiet(msg: str) -> None:  # the export's progress is noise here, its warnings are not
        if "warning" in msg.lower():
            log(msg)

    int8 = ExportOptions(quantize="int8", overwrite=True, parity_data=work.parity, calibration_data=work.calibration)
    fp32 = dataclasses.replace(int8, quantize=None)
    scorer_part = "generator" if inputs.scorer == "cloze" else "discriminator"
    trained = work.discriminative / "run" if inputs.train else work.run  # the lists' model, or the text's
    parts = [(trained / scorer_part, work.model)]
    if inputs.scorer == "cloze" or inputs.train:  # the scorer is not the Electric run's energy model
        detector = work.detector / "run" / "discriminator" if inputs.train else work.run / "discriminator"
        parts.append((detector, work.model / "detector"))
    precisions: dict = {}
    refused: dict[str, float | None] = {}  # graph -> its int8 graph's Spearman against fp32, when below the gate
    for source, dest in parts:
        what = ("the cloze model" if scorer_part == "generator" else "the energy model") + (
            ", trained on the lists (the scorer)" if inputs.train else " (the scorer)")
        if dest != work.model:
            what = "the energy model (the detector)"
        elif not inputs.train and inputs.scorer != "cloze":
            what = "the energy model (the scorer and the detector)"
        log(f"exporting {what} to ONNX {inputs.precision}, parity checked on {PARITY_SENTENCES} sentences of the text")
        precisions[dest.name] = inputs.precision
        try:
            try:
                export_model(source, dest, int8 if inputs.precision == "int8" else fp32, log=quiet)
            except ParityError as e:
                if inputs.precision != "int8":
                    raise
                # the int8 graph ranks texts too unlike fp32 (its gate): the fp32 graph, gated on its own, is served
                log(f"{what}: its int8 graph failed its gate ({e}); exporting fp32 only")
                precisions[dest.name] = "fp32"
                refused[dest.name] = e.spearman
                export_model(source, dest, fp32, log=quiet)
        except (CheckpointError, ExportError) as e:  # fp32 unlike torch: the export is wrong
            raise AdaptError(f"the export of {what} failed: {e}") from None
    work.mark("exported", {**precisions, **({"int8_refused": refused} if refused else {})})


# ---- 5-6. score, tune, compare -------------------------------------------------------------------------------


def score_lists(score_texts: ScoreTexts, dev: list, test: list | None) -> tuple[ScoredLists, ScoredLists | None]:
    """(dev, test or None) `ScoredLists`, each distinct hypothesis of both scored once."""
    from electric.evaluation.nbest import ScoredLists

    scored, _ = ScoredLists.score([*dev, *(test or [])], score_texts, chunk_size=512, progress=True)
    d, t = scored.split(len(dev))
    return d, (t if test else None)


def score_and_tune(inputs: Inputs, work: Work) -> tuple[dict, ScoredLists, ScoredLists | None]:
    """The exported scorer's scores of the lists, and its figures with the weights the guard chose on dev."""
    from electric.inference.scoring import load_scorer

    scorer = load_scorer(work.model, METHOD_OF_SCORER[inputs.scorer], backend="onnx", truncate=True)
    n_hyps = len({h for nb in [*inputs.dev, *(inputs.test or [])] for h in nb.hyps})
    log(f"scoring {n_hyps:,} distinct hypotheses of {len(inputs.dev)} dev"
        + (f" and {len(inputs.test)} test lists" if inputs.test else " lists") + " with the exported scorer")
    t0 = time.perf_counter()
    dev, test = score_lists(scorer.score, inputs.dev, inputs.test)
    took = time.perf_counter() - t0
    model = figures(tune(dev, test, inputs.metric, inputs.seed), test, inputs.metric)
    model["seconds_to_score"] = round(took, 2)
    log(guard_sentence("the adapted model", model, inputs.metric))
    return model, dev, test


def ngram_baseline(inputs: Inputs, dev: ScoredLists, test: ScoredLists | None,
                   model: dict) -> tuple[dict, dict, Any, tuple]:
    """A Kneser-Ney n-gram LM trained on the same text, tuned on the same dev lists the same way, and both LMs: one
    tuned on top of the other's combination, in the order better on dev (`dev`, `test`: the adapted model's scores;
    `model`: its tuned record). Returns the n-gram's and both's records, the LM (MODEL carries it) and the n-gram's
    (dev, test) scores."""
    from electric.evaluation.nbest import Weights, make_metric
    from electric.evaluation.ngram import KneserNeyLM

    t0 = time.perf_counter()
    lm = KneserNeyLM.train(inputs.sentences, NGRAM_ORDER)
    log(f"a {lm.describe()}, trained in {time.perf_counter() - t0:.1f} s")
    ng_dev, ng_test = score_lists(lm.score_texts, inputs.dev, inputs.test)
    # the same no-LM baseline as the adapted model's (its word and WordPiece counts), so that both LMs are measured
    # against one combination
    ng_dev = dataclasses.replace(ng_dev, pieces=dev.pieces)
    ng_test = None if ng_test is None or test is None else dataclasses.replace(ng_test, pieces=test.pieces)
    ng_result = tune(ng_dev, ng_test, inputs.metric, inputs.seed)
    ngram = {"order": NGRAM_ORDER, "sentences": lm.sentences, "words": lm.tokens,
             **figures(ng_result, ng_test, inputs.metric)}
    log(guard_sentence(f"the {NGRAM_ORDER}-gram LM", ngram, inputs.metric))
    # both: one LM tuned on top of the other's tuned combination, in both orders; the better on dev is kept (two
    # steps of a joint tuning, each a grid the guard already searches)
    both = None
    for order, (top_dev, top_test, base_dev, base_test, base) in {
            "model_over_ngram": (dev, test, ng_dev, ng_test, ngram),
            "ngram_over_model": (ng_dev, ng_test, dev, test, model)}.items():
        w = Weights.from_dict(base["weights_lm"])
        on_dev = with_prior(top_dev, base_dev, w)
        on_test = None if top_test is None or base_test is None else with_prior(top_test, base_test, w)
        rec = {"order": order, **figures(tune(on_dev, on_test, inputs.metric, inputs.seed), on_test, inputs.metric)}
        higher_is_better = make_metric(inputs.metric).higher_is_better
        if both is None or (rec["dev"]["reranked"] > both["dev"]["reranked"] if higher_is_better
                            else rec["dev"]["reranked"] < both["dev"]["reranked"]):
            both = rec
    assert both is not None
    return ngram, both, lm, (ng_dev, ng_test)


def choose_served(inputs: Inputs, dev: ScoredLists, test: ScoredLists | None, ng: tuple, tuned: dict) -> dict:
    """The guard's choice among no-LM, n-gram, model and both (training.adapt_choice), on the lists scored by both."""
    from training.adapt_choice import candidate_weights, choose, step_sentence

    ng_dev, ng_test = ng
    choice = choose(dev.with_ngram(ng_dev), None if test is None or ng_test is None else test.with_ngram(ng_test),
                    candidate_weights(tuned), inputs.metric, inputs.seed)
    for step in choice["steps"]:
        log(step_sentence(step, inputs.metric))
    log(f"served: {choice['parts']}")
    return choice


# ---- 7. the model directory ----------------------------------------------------------------------------------


def write_model(inputs: Inputs, work: Work, report: dict, ngram_lm: Any) -> None:
    """MODEL, whole: the scorer's export with the chosen combination's weights, the detector and the n-gram LM
    (ARPA) named in its manifest, the model card and the report."""
    from electric.checkpoint import atomic_dir
    from electric.export.manifest import add_serving_defaults

    ngram_lm.write_arpa(work.model / NGRAM_FILE)
    add_serving_defaults(work.model, rerank_weights=report["results"]["choice"]["weights"],
                         detector="detector" if (work.model / "detector").is_dir() else None, ngram=NGRAM_FILE,
                         adapted={"card": CARD, "report": REPORT})
    with atomic_dir(inputs.out) as tmp:
        shutil.copytree(work.model, tmp, dirs_exist_ok=True)
        (tmp / REPORT).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        (tmp / CARD).write_text(model_card(report), encoding="utf-8")


def versions() -> dict:
    import onnxruntime
    import torch
    import transformers

    from electric import __version__

    return {"electric": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "onnxruntime": onnxruntime.__version__}


def build_report(inputs: Inputs, health: dict, results: dict, command: str, exported: dict | None = None,
                 discriminative: dict | None = None) -> dict:
    """adapt.json: the inputs, the recipe, the health, each system's figures, the precision each graph was exported
    in (`exported`: "model" and "detector" -> int8 or fp32), the versions and the command."""
    return {
        "exported": exported or {"model": inputs.precision},
        "inputs": {"checkpoint": {"path": str(inputs.checkpoint.resolve()), "sha256": inputs.checkpoint_sha256},
                   "text": {"files": [str(p.resolve()) for p in inputs.texts], "sha256": list(inputs.text_sha256),
                            "sentences": len(inputs.sentences)},
                   "dev": {"file": str(inputs.dev_path.resolve()), "lists": len(inputs.dev)},
                   "test": None if inputs.test_path is None else {"file": str(inputs.test_path.resolve()),
                                                                   "lists": len(inputs.test)},
                   "train": None if not inputs.train else {"files": [str(t.resolve()) for t in inputs.train_paths],
                                                            "lists": len(inputs.train),
                                                            "minutes": inputs.train_minutes,
                                                            "epochs": inputs.train_epochs},
                   "minutes": inputs.minutes, "metric": inputs.metric, "scorer": inputs.scorer,
                   "precision": inputs.precision, "seed": inputs.seed, "out": str(inputs.out)},
        "recipe": RECIPE,
        "health": {"steps": health["steps"], "tokens": health["tokens"],
                   "minutes": health["minutes"],
                   "start": health.get("start"), "end": health.get("end"), "warnings": health.get("warnings", [])},
        "results": results,
        "discriminative": discriminative,
        "versions": versions(),
        "command": command,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


# ---- the command ---------------------------------------------------------------------------------------------


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--checkpoint", required=True, type=Path,
                    help="the checkpoint to adapt: any local BERT-family or sentence-transformers directory, or a run "
                         "of `python -m training.pretrain` (as --init-from takes)")
    ap.add_argument("--text", required=True, nargs="+", metavar="FILE",
                    help="your domain's text, one sentence (or utterance) a line: a few thousand sentences pay")
    ap.add_argument("--dev", required=True, metavar="LISTS",
                    help=f"n-best lists with references to tune the weights on (HyPoradise or ESPnet JSON, with "
                         f"first-pass scores where you have them; at least {MIN_DEV_LISTS}); none of their references "
                         "should be in the text")
    ap.add_argument("--test", metavar="LISTS", help="n-best lists with references to report on (never tuned on)")
    ap.add_argument("--train-lists", nargs="+", metavar="LISTS",
                    help=f"n-best lists with references to train the scorer on (minimum word error): what this "
                         f"recogniser gets wrong, which text alone cannot teach. At least {MIN_TRAIN_LISTS}, none of "
                         "them a --dev or --test utterance (same id or reference); a few thousand pay")
    ap.add_argument("--train-minutes", type=float, default=DEFAULT_TRAIN_MINUTES,
                    help=f"discriminative training time at most (default {DEFAULT_TRAIN_MINUTES:g}: on 2 CPU cores, "
                         "3 epochs of about 2,600 ATIS lists with a MiniLM-size model)")
    ap.add_argument("--train-epochs", type=int, default=DEFAULT_TRAIN_EPOCHS,
                    help=f"epochs over the train lists at most (default {DEFAULT_TRAIN_EPOCHS}); the best on a held-back "
                         "tenth of them is kept")
    ap.add_argument("--out", required=True, type=Path, help="the model directory to write (electric serve --model)")
    ap.add_argument("--minutes", type=float, default=DEFAULT_MINUTES,
                    help=f"adaptation time at most (default {DEFAULT_MINUTES:g}: on 2 CPU cores, 10 epochs of about "
                         "2,600 sentences)")
    ap.add_argument("--metric", choices=("wer", "cer", "bleu", "chrf"), default="wer",
                    help="what the weights are tuned for: wer (default) or cer for speech, bleu or chrf for translation")
    ap.add_argument("--scorer", choices=tuple(METHOD_OF_SCORER), default=None,
                    help="what /v1/score and /v1/rerank score with: cloze (the cloze model's log q, one pass; the "
                         "default without --train-lists) or electric (the energy, one pass; the default with them: the "
                         "model trained on the lists); the adapted energy model detects in every case")
    ap.add_argument("--precision", choices=("int8", "fp32"), default="int8",
                    help="the exported graphs served on a CPU: int8 (default; static, parity-checked) or fp32")
    ap.add_argument("--seed", type=int, default=0, help="of the training run, the parity sample and the bootstraps")
    ap.add_argument("--overwrite", action="store_true", help="replace --out when it exists")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`electric adapt` (registered through the electric.commands entry point: the library never imports training)."""
    p = sub.add_parser("adapt", help="adapt a checkpoint to your domain and make a served reranker of it",
                       description=__doc__.split("\n")[0], epilog=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, command: str | None = None) -> int:
    """The eight stages; exit status 0, 2 on bad input or a model that must not be served (one line, nothing in
    --out), 130 when interrupted (the same command resumes)."""
    t0 = time.monotonic()
    command = command or "electric adapt " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["adapt"] else sys.argv[1:])
    work = None
    try:
        stage(1, "checking the inputs")
        inputs = check_inputs(args)
        log(f"{len(inputs.sentences):,} sentences of text, {len(inputs.dev)} dev lists"
            + (f", {len(inputs.test)} test lists" if inputs.test else ""))
        work = open_work(inputs)
        if not work.done("trained"):
            write_text(inputs, work)
            stage(2, f"adapting {inputs.checkpoint.name} as Electric for {inputs.minutes:g} minutes at most")
            adapt(inputs, work)
        else:
            stage(2, "adapted already (resumed)")
        health = work.read("trained")
        stage(3, "checking the adapted model's health")
        health_gate(health)
        discriminative = None
        if inputs.train and not work.done("discriminated"):
            stage(4, f"discriminative training on {len(inputs.train):,} n-best lists (minimum word error), "
                     f"{inputs.train_minutes:g} minutes at most")
            discriminate(inputs, work)
        else:
            stage(4, "trained on the lists already (resumed)" if inputs.train else
                  "no --train-lists: the scorer is the adapted model as the text made it")
        if inputs.train and not work.done("detector"):
            log("the detector: the adapted energy model fine-tuned on the lists' real errors (their hypotheses "
                "aligned with their references)")
            train_the_detector(inputs, work)
        if inputs.train:
            discriminative = {**work.read("discriminated"), "detector": work.read("detector")}
        if not work.done("exported"):
            stage(5, "exporting")
            export(inputs, work)
        else:
            stage(5, "exported already (resumed)")
        stage(6, "scoring the lists and tuning the weights on dev (the guard decides whether the LM is applied)")
        model, dev, test = score_and_tune(inputs, work)
        stage(7, f"the baseline: a {NGRAM_ORDER}-gram LM on the same text, tuned the same way, both LMs together, and "
                 "the guard's choice among the four")
        ngram, both, ngram_lm, ng_scores = ngram_baseline(inputs, dev, test, model)
        tuned = {"model": model, "ngram": ngram, "model_and_ngram": both}
        choice = choose_served(inputs, dev, test, ng_scores, tuned)
        report = build_report(inputs, health, {**tuned, "choice": choice}, command, work.read("exported"),
                              discriminative)
        stage(8, f"writing {inputs.out}")
        write_model(inputs, work, report, ngram_lm)
    except AdaptError as e:
        if not isinstance(e, Said):
            print(f"error: {e}", file=sys.stderr)
        if work is not None and (isinstance(e, NotServable) or not work.done("trained")):
            shutil.rmtree(work.root, ignore_errors=True)  # nothing worth resuming
        return 2
    except KeyboardInterrupt:
        where = f"; the same command resumes from {work.root}" if work is not None else ""
        print(f"\ninterrupted: nothing was written to {args.out}{where}", file=sys.stderr)
        return 130
    shutil.rmtree(work.root, ignore_errors=True)
    print()
    for line in summary(report):
        print(line)
    if discriminative and discriminative.get("detector"):
        print(detector_line(discriminative["detector"]).removeprefix("- "))
    print(f"done in {(time.monotonic() - t0) / 60:.1f} minutes: {inputs.out} (model card {inputs.out / CARD}); "
          f"serve it with: electric serve --model {inputs.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="electric adapt", description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    args = ap.parse_args(argv)
    return run(args, "electric adapt " + shlex.join(argv if argv is not None else sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
