"""Pretrain an ELECTRA, Electric or MLM encoder from raw text.

    python -m training.pretrain --objective electric --preset tiny \\
        --data ../shared/data/corpus/enwiki --tokenizer runs/tok --time-budget 20 --out runs/electric-tiny
    # at CPU budgets: the first 40% of the time on MLM, then ELECTRA on its encoder (docs/pretraining.md)
    python -m training.pretrain --objective electra --warm-start 0.4 --gen-lr 1e-3 --time-budget 90 ...
    torchrun --nproc_per_node=8 -m training.pretrain --objective electra --preset small --data ... --out ...

Writes OUT/discriminator/ (ElectraForPreTraining), OUT/generator/ (ElectraForMaskedLM, or the
two-tower ElectricForClozeLM; for --objective mlm the full-size masked LM), OUT/config.json (the run's
`RunConfig`: the model and recipe at the top level, the run's settings under "run"), OUT/metrics.jsonl and
OUT/state/ for --resume, and with --warm-start OUT/warm_start/ (the MLM of the first stage). Ctrl-C saves a
checkpoint and exits.

`main` resolves the command line into one frozen `RunConfig` (`resolve_run`); `train` runs it top to bottom:
`setup` (data, model, optimizer), `start_or_resume` (trainer state, run directory, config.json), `take_steps`
(the loop, one job a part: `schedule_at` the step's learning rate and temperature, `optimizer_step`, the clock of
training/budget.py, `StepLog` the log and evaluations, `stop_reason` and `warm_start_reason`, `checkpoint`), with a
warm start `switch_to_objective` and `take_steps` again, then `finish`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from electric.allocator import keep_freed_memory
from electric.checkpoint import CheckpointError, atomic_dir
from electric.pretraining import health
from electric.pretraining.batches import Batches, step_rng
from electric.pretraining.config import PretrainConfig, RunConfig
from electric.pretraining.data import DataError, build_datasets
from electric.pretraining.handover import model_on_masked_lm
from electric.pretraining.init_from import pretraining_model, resolve_init
from electric.pretraining.modeling import PretrainingModel, SpecialIds
from electric.pretraining.validation import evaluate, unigram_baseline
from electric.tokenization import load_tokenizer
from training.budget import StageClock
from training.distributed import Dist
from training.pretrain_args import parse_args, resolve_run
from training.progress import TrainProgress
from training.report import (
    print_summary,
    progress_fields,
    read_metrics,
    record_baseline,
    record_eval,
    verdict,
    write_curves,
    write_health,
)
from training.run_dir import TrainerState, load_checkpoint, save_checkpoint, saved_trainer, truncate_metrics
from training.schedule import build_optimizer, lr_at, set_lr, temperature_at

WARM_START_DONE = "warm start done"  # take_steps' reason when the MLM stage has run its share


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__)
    try:
        run = resolve_run(args)
        tokenizer = load_tokenizer(run.tokenizer)
    except (CheckpointError, DataError, FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        return train(run, tokenizer)
    except OSError as e:  # the disk, not the code (a full disk, a directory removed under the run): one line
        print(f"error: {e}", file=sys.stderr)
        return 1


def train(run: RunConfig, tokenizer) -> int:
    """Set up, take optimizer steps until the schedule ends or something stops the run, finish.
    Exit status 0; 2 when the data or the model cannot be set up; 3 when --stop-on-collapse ended the run."""
    if run.threads:
        torch.set_num_threads(run.threads)
    keep_freed_memory()  # each step reuses the last one's memory, however setup left the heap
    d = Dist(run.device)
    try:
        parts = setup(run, tokenizer, d)
        trainer = start_or_resume(run, parts)
    except (DataError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        d.close()
        return 2
    if d.main and run.pretrain.init_from and trainer.step == 0:  # where the checkpoint under a fresh head starts
        record_baseline(Path(run.out) / "metrics.jsonl", evaluate(
            parts.model, parts.val_ds, run.pretrain, parts.special.pad, d.device, parts.autocast, parts.unigram_lp))
    first_step = trainer.step
    end = take_steps(run, parts, step_module(parts.model, run.pretrain, d), trainer)
    if end.reason == WARM_START_DONE:  # the MLM stage ran its share: its encoder becomes the discriminator's
        parts = switch_to_objective(run, parts, trainer)
        end = take_steps(run, parts, step_module(parts.model, run.pretrain, d), trainer)
    finish(run, parts, trainer, end)
    if d.world > 1:  # each process's own account, on its own node's log: every rank did its share
        print(f"{d}: steps {first_step + 1}-{trainer.step}, {parts.batches.tokens_read:,} tokens read from "
              "its shard", file=sys.stderr)
    return 3 if end.reason == "collapse" else 0


@dataclass(frozen=True)
class Parts:
    """What the steps work on, built once by `setup`."""

    d: Dist
    tokenizer: Any  # saved with every checkpoint
    special: SpecialIds
    batches: Batches  # this rank's shard of the training set, in seeded per-epoch order
    val_ds: Any  # the fixed validation slice
    unigram_lp: torch.Tensor | None  # (V,) add-one unigram log-probabilities of the training set; rank 0 only
    model: PretrainingModel  # the plain module: saved, evaluated, its gradients clipped
    optimizer: torch.optim.Optimizer
    autocast: Callable[[], contextlib.AbstractContextManager]  # bf16 autocast, or nothing


def setup(run: RunConfig, tokenizer, d: Dist) -> Parts:
    """The data, the model of the run's current stage (fresh, with --init-from's weights, or the shape of the
    checkpoint to resume) and its optimizer. Raises DataError or CheckpointError."""
    cfg = run.pretrain
    per_rank_batch, rem = divmod(cfg.micro_batch_size, d.world)
    if rem or per_rank_batch < 1:
        raise DataError(f"micro-batch {cfg.micro_batch_size} (batch_size / grad_accum) is not divisible by "
                        f"{d.world} processes")
    torch.manual_seed(cfg.seed)
    special = SpecialIds.from_tokenizer(tokenizer)
    with d.leaders_first():  # rank 0, then each node's local rank 0, tokenise and fill the cache; the rest read it
        train_ds, val_ds = build_datasets(list(run.train_files), tokenizer, cfg.max_seq_length, cfg.val_sequences,
                                          cfg.num_proc, run.cache_dir, rank0=d.main)
        batches = Batches(train_ds, per_rank_batch, special.pad, cfg.seed, d.rank, d.world)
        model = stage_model(run, special)
    unigram_lp = unigram_baseline(train_ds, special.vocab_size, special.all_special) if d.main else None
    model.to(d.device).train()
    optimizer = build_optimizer(model, model.cfg)
    autocast = (lambda: torch.autocast(d.device.type, dtype=torch.bfloat16)) if cfg.precision == "bf16" \
        else contextlib.nullcontext
    return Parts(d, tokenizer, special, batches, val_ds, unigram_lp, model, optimizer, autocast)


def start_or_resume(run: RunConfig, parts: Parts) -> TrainerState:
    """The trainer state (step, schedule length, time, tokens, data position, collapse) from the last
    checkpoint with --resume, else fresh in an empty run directory. Rank 0 saves the run's config.json."""
    cfg, out, d = run.pretrain, Path(run.out), parts.d
    total_steps = cfg.max_steps
    if cfg.epochs:  # the schedule ends with the last epoch, not at the preset's max_steps
        steps_per_epoch = max(1, parts.batches.per_rank // (parts.batches.batch_size * cfg.grad_accum))
        total_steps = min(cfg.max_steps, math.ceil(cfg.epochs * steps_per_epoch))
    trainer = TrainerState(total_steps=total_steps, run_steps=total_steps, processes=d.world,
                           stage="warm" if cfg.warm_start else "main")
    if cfg.warm_start:
        trainer.total_steps = max(1, round(cfg.warm_start * total_steps))
    metrics_path = out / "metrics.jsonl"
    if run.resume:
        trainer = load_checkpoint(out, parts.model, parts.optimizer, d.device)
        if trainer.processes != d.world:  # each process's data position is its own
            raise CheckpointError(f"--resume: {str(out)!r} was checkpointed by {trainer.processes} processes, this "
                                  f"run has {d.world}; resume with the same number (nodes x processes per node)")
        assert trainer.batches is not None  # every checkpoint saves the data position
        parts.batches.load_state_dict(trainer.batches)
        if "max_steps" in run.extended:
            trainer.run_steps = cfg.max_steps
            if not trainer.warm:
                trainer.total_steps = cfg.max_steps
        if d.main:
            truncate_metrics(metrics_path, trainer.step)
    elif d.main:
        if run.overwrite and out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True, exist_ok=True)
        metrics_path.write_text("")
    if d.main:
        run.save(out / "config.json")
    return trainer


@dataclass(frozen=True)
class StepModule:
    """What a micro-step calls, and the context in which its backward pass skips DDP's gradient all-reduce."""

    model: Callable[..., Any]  # the model, in DDP over several processes, compiled with --compile
    no_sync: Callable[[], contextlib.AbstractContextManager]  # DDP's no_sync; nothing in one process


def step_module(model: PretrainingModel, cfg: PretrainConfig, d: Dist) -> StepModule:
    """The model as a micro-step calls it: in DDP over several processes, compiled with --compile."""
    step_model: torch.nn.Module = model
    no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    if d.world > 1:
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[d.device.index] if d.device.type == "cuda" else None, find_unused_parameters=False)
        step_model, no_sync = ddp, ddp.no_sync
    if cfg.compile and not compile_refused(d.device):
        return StepModule(torch.compile(step_model, mode=None if cfg.compile_mode == "default" else cfg.compile_mode),
                          no_sync)
    return StepModule(step_model, no_sync)


def compile_refused(device: torch.device) -> bool:
    """Whether --compile cannot work here (it says why in one line, and the run goes on uncompiled); on a CPU it
    says in one line what compiling costs there, and compiles."""
    import torch._dynamo  # noqa: PLC0415 - only a compiled run needs it

    if not torch._dynamo.is_dynamo_supported():
        print(f"--compile: torch {torch.__version__} cannot compile on this Python; training uncompiled",
              file=sys.stderr)
        return True
    if device.type == "cuda":
        from torch.utils._triton import has_triton  # noqa: PLC0415

        if not has_triton():
            print("--compile: this torch has no Triton, which compiling for CUDA needs; training uncompiled",
                  file=sys.stderr)
            return True
    elif device.type == "cpu":
        print("--compile on a CPU: the first steps compile C++ kernels (about a minute); it pays back over long runs",
              file=sys.stderr)
    return False


@dataclass(frozen=True)
class StageEnd:
    """How `take_steps` ended a stage."""

    reason: str  # why: the schedule's end ("max steps", "time budget", WARM_START_DONE) or a stop_reason
    last: dict  # the latest logged values
    temperature: float  # the sampling temperature of the last step: the closing evaluation measures at it


def take_steps(run: RunConfig, parts: Parts, step_model: StepModule, trainer: TrainerState) -> StageEnd:
    """Optimizer steps until this stage's schedule ends or something stops the run. Each step: its learning rate
    and temperature (`schedule_at`), `optimizer_step`, the clock (`StageClock`: elapsed time, the schedule refitted
    to a --time-budget), the log and the evaluation (`StepLog`), whether to stop (`stop_reason`,
    `warm_start_reason`), and a checkpoint every save_every steps."""
    cfg, d = parts.model.cfg, parts.d  # cfg: this stage's recipe
    clock = StageClock.start(run, trainer)
    log = StepLog(run, parts, trainer, clock.budget_s)
    temperature = schedule_at(cfg, trainer)[1]  # what the closing evaluation measures at, should no step be taken
    with stop_signals() as stop, contextlib.closing(log.bar):
        while trainer.step < trainer.total_steps:
            lr, temperature = schedule_at(cfg, trainer)
            sums, grad_norm, tokens = optimizer_step(step_model, parts, cfg, trainer.step, lr, temperature)
            trainer.step, trainer.tokens, trainer.elapsed = trainer.step + 1, trainer.tokens + tokens, clock.elapsed()
            clock.refit(trainer, d)
            log.step(trainer, sums, grad_norm, lr, tokens)
            collapsed = log.evaluate(trainer, temperature) if trainer.step % cfg.eval_every == 0 and d.main else False
            reason = warm_start_reason(trainer, clock, stop_reason(
                run, stop["signal"], trainer.elapsed, parts.batches.epoch_fraction, trainer.step, collapsed))
            if d.any(reason is not None):
                return StageEnd(reason or "another rank", log.last, temperature)
            if trainer.step % cfg.save_every == 0:
                checkpoint(run, parts, trainer)
                d.barrier()
    return StageEnd(schedule_end_reason(run, trainer, clock), log.last, temperature)


def schedule_at(cfg: PretrainConfig, trainer: TrainerState) -> tuple[float, float]:
    """The learning rate and the sampling temperature of the step `trainer.step` takes: this stage's schedules,
    from its first step (`trainer.stage_step`) to where it now ends (`trainer.total_steps`)."""
    done, length = trainer.step - trainer.stage_step, trainer.total_steps - trainer.stage_step
    return lr_at(done, cfg, length), temperature_at(done, cfg, length)


class StepLog:
    """One stage's log: the progress bar, a training line in metrics.jsonl every log_every steps and after the
    first (the global batch's means, read off the device only then), and the evaluations (rank 0). `last` holds
    the latest values of both."""

    def __init__(self, run: RunConfig, parts: Parts, trainer: TrainerState, budget_s: float):
        self.run, self.parts, self.cfg = run, parts, parts.model.cfg
        cfg = self.cfg
        name = "mlm warm start" if trainer.warm else f"{cfg.objective} from {Path(cfg.init_from).name}" \
            if cfg.init_from else f"{cfg.objective}-{cfg.preset}"
        self.bar = TrainProgress(name, trainer.total_steps, trainer.step, trainer.elapsed, budget_s,
                                 enabled=parts.d.main)  # time / budget with --time-budget; plain lines in a log file
        self.window_start, self.window_tokens = time.time(), 0  # since the last training line
        self.last: dict = {}

    def step(self, trainer: TrainerState, sums: dict[str, torch.Tensor], grad_norm: torch.Tensor, lr: float,
             tokens: int) -> None:
        """After each step (on every process: the means are all-reduced)."""
        step, d = trainer.step, self.parts.d
        self.window_tokens += tokens
        self.bar.update(step, trainer.total_steps, trainer.elapsed)
        if step % self.cfg.log_every and step != 1:
            return
        sums = d.average(sums)  # the global batch's metrics, not rank 0's share
        dt = time.time() - self.window_start
        tok_s = self.window_tokens / dt if dt > 0 else 0.0
        self.last.update({"step": step, "lr": lr, "grad_norm": float(grad_norm), "tokens": trainer.tokens,
                          "tokens_per_s": round(tok_s, 1), "epoch": round(self.parts.batches.epoch_fraction, 4),
                          "elapsed_s": round(trainer.elapsed, 1), **{k: round(float(v), 5) for k, v in sums.items()}})
        self.window_start, self.window_tokens = time.time(), 0
        self.bar.set_postfix(progress_fields(self.last, tok_s))
        if d.main:
            with (Path(self.run.out) / "metrics.jsonl").open("a") as f:
                f.write(json.dumps({k: v for k, v in self.last.items() if not k.startswith("val_")}) + "\n")

    def evaluate(self, trainer: TrainerState, temperature: float) -> bool:
        """Evaluate and log (rank 0); True iff the evaluation found the discriminator collapsed."""
        collapsed = evaluate_and_log(self.run, self.parts, trainer, self.last, self.bar, temperature)
        self.bar.set_postfix(progress_fields(self.last, None))
        return collapsed


def warm_start_reason(trainer: TrainerState, clock: StageClock, reason: str | None) -> str | None:
    """In the warm start the time budget, the run's or the stage's share of it, ends the stage, not the run:
    WARM_START_DONE in place of "time budget". Any other reason stands."""
    if trainer.warm and (reason == "time budget" or (not reason and clock.over(trainer.elapsed))):
        return WARM_START_DONE
    return reason


def schedule_end_reason(run: RunConfig, trainer: TrainerState, clock: StageClock) -> str:
    """Why a stage whose schedule ran to its end ended: the warm start's share done, the length fitted to the time
    budget, or max_steps."""
    if trainer.warm:
        return WARM_START_DONE
    return "time budget" if clock.budget_s and trainer.total_steps < run.pretrain.max_steps else "max steps"


def optimizer_step(step_model: StepModule, parts: Parts, cfg: PretrainConfig, step: int, lr: float,
                   temperature: float) -> tuple[dict[str, torch.Tensor], torch.Tensor, int]:
    """One optimizer step at learning rate `lr`, its samples drawn at `temperature`, over grad_accum micro-steps:
    (the metrics' means, still on the device; the gradient norm before clipping; the tokens seen, over all
    processes). Each micro-step's draws are made first (`PretrainingModel.draw_noise`), so the model is called with
    its batch and those tensors alone."""
    d = parts.d
    set_lr(parts.optimizer, lr)
    sums: dict[str, torch.Tensor] = {}  # metrics stay on the device until a log step reads them
    read_before = parts.batches.tokens_read  # Batches counts each batch's tokens on the host, before the copy
    for micro in range(cfg.grad_accum):
        ids, mask = parts.batches.next()  # (B, T) each
        if d.device.type == "cuda":  # from page-locked memory the copy runs behind the host, which goes on queueing
            ids, mask = ids.pin_memory(), mask.pin_memory()
        ids, mask = ids.to(d.device, non_blocking=True), mask.to(d.device, non_blocking=True)
        noise = parts.model.draw_noise(ids, step_rng(cfg.seed, step, micro * d.world + d.rank, d.device), temperature)
        last_micro = micro == cfg.grad_accum - 1
        # Gradients are all-reduced once per optimizer step, on the last micro-step.
        no_sync = contextlib.nullcontext if last_micro else step_model.no_sync
        with no_sync(), parts.autocast():
            res = step_model.model(ids, mask, noise)
        (res["loss"] / cfg.grad_accum).backward()
        for k, v in res.items():
            sums[k] = sums.get(k, 0) + v.detach() / cfg.grad_accum
    grad_norm = torch.nn.utils.clip_grad_norm_(parts.model.parameters(), cfg.max_grad_norm)
    parts.optimizer.step()
    parts.optimizer.zero_grad(set_to_none=True)
    return sums, grad_norm, (parts.batches.tokens_read - read_before) * d.world


@contextlib.contextmanager
def stop_signals() -> Iterator[dict]:
    """While inside, SIGINT and SIGTERM only record their name ({"signal": name}): the loop stops after the
    step, with a checkpoint."""
    stop: dict = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signal.Signals(signum).name

    old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)


def stop_reason(run: RunConfig, signal_name: str | None, elapsed: float, epoch_fraction: float, step: int,
                collapsed: bool) -> str | None:
    """Why the run ends after this step, if it does: a signal, the time budget, the epochs, --stop-at, or
    --stop-on-collapse when this step's evaluation found a collapse."""
    cfg = run.pretrain
    if signal_name:
        return signal_name
    if cfg.time_budget_minutes and elapsed >= cfg.time_budget_minutes * 60:
        return "time budget"
    if cfg.epochs and epoch_fraction >= cfg.epochs:
        return "epochs"
    if run.stop_at is not None and step >= run.stop_at:
        return "--stop-at"
    if run.stop_on_collapse and collapsed:
        return "collapse"
    return None


def evaluate_and_log(run: RunConfig, parts: Parts, trainer: TrainerState, last: dict, bar: TrainProgress | None,
                     temperature: float) -> bool:
    """Evaluate on the validation slice, its samples drawn at `temperature` (the last step's), and log it (rank
    0); True iff it finds the discriminator collapsed."""
    val = evaluate(parts.model, parts.val_ds, run.pretrain, parts.special.pad, parts.d.device, parts.autocast,
                   parts.unigram_lp, temperature)
    return record_eval(Path(run.out) / "metrics.jsonl", trainer.step, trainer, val, last, bar, run.pretrain.start)


def stage_model(run: RunConfig, special: SpecialIds) -> PretrainingModel:
    """The model of the run's current stage: the warm start's MLM, the objective's model on a warm encoder, or
    `pretraining_model`'s. Resuming, its shape only: the checkpoint's weights replace its own."""
    cfg = run.pretrain
    stage = saved_trainer(Path(run.out)).stage if run.resume else ("warm" if cfg.warm_start else "main")
    if stage == "warm":
        return PretrainingModel(cfg.warm_stage, special)
    if run.resume and (cfg.warm_start or cfg.generator_mode == "frozen"):  # a discriminator on an MLM's encoder
        return model_on_masked_lm(cfg, special, PretrainingModel(cfg.warm_stage, special).masked_lm)
    return pretraining_model(cfg, special, resolve_init(cfg.init_from, cfg.init_generator_from)
                       if cfg.init_from and not run.resume else None)


def switch_to_objective(run: RunConfig, parts: Parts, trainer: TrainerState) -> Parts:
    """End the warm start: keep its MLM as OUT/warm_start/, build the objective's model on its encoder with a
    fresh optimizer, start the objective's schedule (its own warmup) and checkpoint, so a resume lands after it.

    An MLM still in its unigram phase (a short run: it predicts the corpus' word frequencies from one state shared
    by every token, token cosine >= health.COLLAPSE_MIN_COSINE) is not handed over: its encoder would start the
    discriminator collapsed, so the discriminator starts fresh instead (BENCHMARKS.md, "The warm start's switch")."""
    mlm, d = parts.model.masked_lm, parts.d
    cosine = warm_encoder_cosine(run, parts) if d.main else 0.0
    handed_over = bool(d.broadcast_int(int(not cosine >= health.COLLAPSE_MIN_COSINE)))  # nan: hand over
    if d.main:
        with atomic_dir(Path(run.out) / "warm_start") as tmp:
            mlm.save_pretrained(tmp)
            parts.tokenizer.save_pretrained(tmp)
    if handed_over:
        model = model_on_masked_lm(run.pretrain, parts.special, mlm)
    else:  # a frozen generator is the MLM itself, whatever its stage
        model = PretrainingModel(run.pretrain, parts.special,
                                 generator=mlm if run.pretrain.generator_mode == "frozen" else None)
    model = model.to(d.device).train()
    trainer.warm_start = {"steps": trainer.step, "tokens": trainer.tokens, "elapsed": trainer.elapsed,
                             "token_cosine": round(cosine, 5), "handed_over": handed_over}
    trainer.stage, trainer.stage_step, trainer.stage_elapsed = "main", trainer.step, trainer.elapsed
    trainer.total_steps = trainer.run_steps
    if d.main:
        done = (f"warm start done after {trainer.step} steps ({trainer.tokens:,} tokens, "
                f"{trainer.elapsed / 60:.1f} min): MLM saved to {Path(run.out) / 'warm_start'}; ")
        print(done + (f"{run.pretrain.objective} continues on its encoder" if handed_over else
                      f"its encoder is still in the unigram phase (token cosine {cosine:.3f} >= "
                      f"{health.COLLAPSE_MIN_COSINE}), so {run.pretrain.objective}'s discriminator starts fresh "
                      "(a longer run or a larger --warm-start hands over a trained encoder)"), file=sys.stderr)
    parts = dataclasses.replace(parts, model=model, optimizer=build_optimizer(model, run.pretrain))
    checkpoint(run, parts, trainer)
    d.barrier()
    return parts


def warm_encoder_cosine(run: RunConfig, parts: Parts) -> float:
    """The warm start's MLM encoder: mean cosine between its last-layer token states on the validation slice."""
    val = evaluate(parts.model, parts.val_ds, run.pretrain.warm_stage, parts.special.pad, parts.d.device,
                   parts.autocast)
    return float(val.get("val_token_cosine", float("nan")))


def checkpoint(run: RunConfig, parts: Parts, trainer: TrainerState) -> None:
    """Rank 0 saves the models and the resumable state of this step (the data position included)."""
    trainer.batches = parts.batches.state_dict()
    if parts.d.main:
        save_checkpoint(Path(run.out), parts.model, parts.tokenizer, parts.optimizer, trainer)


def finish(run: RunConfig, parts: Parts, trainer: TrainerState, end: StageEnd) -> None:
    """The last step's evaluation (unless it had one), the final checkpoint, curves.png and the summary."""
    out, d = Path(run.out), parts.d
    if d.main and trainer.step % run.pretrain.eval_every:
        evaluate_and_log(run, parts, trainer, end.last, None, end.temperature)
    checkpoint(run, parts, trainer)
    if d.main:
        write_curves(out)
        warnings = verdict(run.pretrain, read_metrics(out))
        write_health(out, trainer, warnings)
        print_summary(out, run.pretrain, trainer, end.last, end.reason, warnings)
    d.barrier()
    d.close()


if __name__ == "__main__":
    sys.exit(main())
