"""Pretraining throughput and MFU on one GPU (or the CPU), per objective, compiled and not, with a profile of each.

    python benchmarks/bench_gpu_throughput.py --data FILE --tokenizer DIR --preset small --steps 30 \\
        --warmup-steps 10 --json $OUT/gpu_throughput.json --profile DIR
    python benchmarks/bench_gpu_throughput.py --data FILE --tokenizer DIR --device cpu --preset debug \\
        --steps 2 --warmup-steps 1 --compile off --json /tmp/t.json          # the same path, on a CPU

Each row is one objective (--objectives) at --preset, with torch.compile off, on, or on with CUDA graphs (--compile
cudagraphs: `--compile-mode reduce-overhead`): the step is built
as `python -m training.pretrain` builds it - `training.pretrain_args.resolve_run` over the same flags, then
`training.pretrain`'s `setup` (the data of --data tokenised and packed, `Batches`, the model, fused AdamW),
`step_module` (torch.compile with --compile on) and `optimizer_step` (the next batch, its copy to the device,
forward, backward, clip, step) at the loop's learning rate and temperature. --warmup-steps steps first
(compilation happens there), then --steps timed steps between two `torch.cuda.synchronize()` (on CUDA).
tokens_per_s counts real (non-padding) tokens, as the loop's own tokens_per_s does; step_ms is the timed time over
--steps; warmup_s is the --warmup-steps' time, compilation and CUDA graph capture included (what a compiled run pays
before its pace: benchmarks/gpu_compile_choice.py weighs the two). Rows run in the order of --compile (off first by default), so a run cut short keeps the cheap rows.

MFU = flops_per_token x tokens_per_s / device_peak: flops_per_token is the matmul FLOPs of one training token
(forward + backward; benchmarks/_flops.py states the formula), the peak is measured in the same run: a bf16
8192 x 8192 x 8192 matmul on CUDA, an fp32 1024 x 1024 x 1024 one on a CPU (the JSON's "peak_matmul" says which).
--precision auto (the default) is the project's rule: bf16 on a GPU with bf16, bf16 on a CPU with native bf16,
else fp32 (`training.pretrain_args.choose_precision`).

--base-row adds one row at the `base` preset (hidden 768, 12 layers, 512 positions, batch 256): ELECTRA, compiled
when --compile includes on, with --grad-accum 4 (micro-batches of 64 x 512, as one GPU trains it; the global
batch and so the recipe unchanged). It is timed like the others and not profiled.

--json PATH is rewritten whole (write, then rename) after every row, so a run killed by a time limit keeps the rows
before it: {"gpu": device name (a CPU's description), "torch", "device", "precision", "peak_matmul", "steps",
"warmup_steps", "rows": [{"objective", "preset", "compile", "tokens_per_s", "step_ms", "warmup_s", "mfu",
"batch_size", "seq_len", "flops_per_token", "device_peak_tflops"}], "failures": [{"objective", "preset", "compile",
"reason"}]}. A row that fails (compile unavailable, out of memory, ...) prints `objective/compile: failed: reason`
and the next row runs.

--profile DIR: after a row's timed steps, 3 more steps under torch.profiler (CPU and CUDA activities where CUDA
exists) write DIR/<objective>[_compiled|_cudagraphs].txt: the host syncs seen (`host_syncs`: cudaStreamSynchronize and its
kin, device-to-host copies, and the aten ops that wait for the device: .item(), nonzero for boolean indexing), then
the top 30 ops by self device time (self CPU time on a CPU). A benchmark, not a test: it asserts no time.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _flops import flops_per_token  # noqa: E402
from gpu_compile_choice import COMPILE_FLAGS  # noqa: E402

from electric.allocator import keep_freed_memory  # noqa: E402
from electric.checkpoint import atomic_write_text  # noqa: E402
from electric.hardware import cpu_description  # noqa: E402
from electric.pretraining.config import OBJECTIVES, PRESETS, RunConfig  # noqa: E402
from electric.tokenization import load_tokenizer  # noqa: E402
from training.distributed import Dist  # noqa: E402
from training.pretrain import Parts, StepModule, optimizer_step, setup, step_module  # noqa: E402
from training.pretrain_args import parse_args, resolve_run  # noqa: E402
from training.schedule import lr_at, temperature_at  # noqa: E402

PROFILED_STEPS = 3
PROFILE_ROWS = 30
BASE_ROW = ("electra", "base", ("--grad-accum", "4"))  # objective, preset, its extra flags (see the docstring)
# Host syncs, by the name torch.profiler gives their events: CUDA runtime calls that wait for the device, the
# device's own copies to the host, and the aten ops that read a device value on the host (on a CPU these show where
# a GPU step would wait). cudaMemcpyAsync is counted whole: its events do not say the direction.
SYNC_EVENTS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpyAsync",
               "aten::_local_scalar_dense", "aten::item", "aten::nonzero")
DEVICE_TO_HOST = "Memcpy DtoH"  # the device's copy events: "Memcpy DtoH (Device -> Pinned)", "... -> Pageable)"
# --compile's values: the training.pretrain flags of each (COMPILE_FLAGS), and its profile file's suffix
PROFILE_SUFFIX = {"off": "", "on": "_compiled", "cudagraphs": "_cudagraphs"}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", nargs="+", required=True, help="training text, as `training.pretrain --data` takes it")
    ap.add_argument("--tokenizer", required=True, help="tokenizer directory (`python -m training.tokenizer`)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small", help="default small")
    ap.add_argument("--objectives", nargs="+", choices=OBJECTIVES, default=list(OBJECTIVES),
                    help="default mlm electra electric")
    ap.add_argument("--compile", nargs="+", choices=tuple(COMPILE_FLAGS), default=["off", "on"],
                    help="torch.compile the step: off, on, cudagraphs (on, in mode reduce-overhead: the step replayed "
                         "as CUDA graphs), in the order given (default: off on)")
    ap.add_argument("--base-row", action="store_true", help="add one `base` ELECTRA row (see above)")
    ap.add_argument("--steps", type=int, default=30, help="timed optimizer steps (default 30)")
    ap.add_argument("--warmup-steps", type=int, default=10, help="untimed steps first, compilation included "
                                                                  "(default 10)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="default cuda if available, else cpu")
    ap.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                    help="default auto: bf16 on a GPU with bf16, else the project's rule for the device")
    ap.add_argument("--json", help="write the rows here, rewritten after every row")
    ap.add_argument("--profile", metavar="DIR", help="profile 3 steps of each row into DIR/<objective>[_compiled|_cudagraphs].txt")
    ap.add_argument("--num-proc", type=int, default=0, help="tokenisation processes (default 0: one a CPU, up to 8)")
    ap.add_argument("--cache-dir", help="datasets cache for the tokenised data (default: datasets' own)")
    ap.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.steps < 1 or args.warmup_steps < 0:
        print(f"error: --steps {args.steps} must be >= 1 and --warmup-steps {args.warmup_steps} >= 0", file=sys.stderr)
        return 2
    keep_freed_memory()  # as training.pretrain.train does
    if args.threads:  # the peak's matmul on a CPU runs on the rows' threads
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    peak_what, peak_tflops = measure_peak(device)
    report: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_description(),
        "torch": torch.__version__, "device": str(device), "precision": None, "peak_matmul": peak_what,
        "steps": args.steps, "warmup_steps": args.warmup_steps, "rows": [], "failures": [],
    }
    print(f"{report['gpu']}, torch {torch.__version__}: peak {peak_tflops:.3g} TFLOP/s ({peak_what})")
    write_report(args.json, report)
    plan: list[tuple[str, str, str, tuple[str, ...]]] = [(o, args.preset, c, ()) for c in args.compile
                                                         for o in args.objectives]
    if args.base_row:
        plan.append((*BASE_ROW[:2], args.compile[-1], BASE_ROW[2]))  # compiled as the last rows are
    for objective, preset, compiled, extra in plan:
        try:
            row, precision = measure_row(args, objective, preset, compiled, extra, peak_tflops,
                                         profile_dir=args.profile if preset == args.preset else None)
        except Exception as e:  # noqa: BLE001 - one row's failure is a line of the report, the next row runs
            reason = one_line(e)
            print(f"{objective}/{compiled}: failed: {reason}", flush=True)
            report["failures"].append({"objective": objective, "preset": preset, "compile": compiled,
                                       "reason": reason})
        else:
            report["precision"] = precision
            report["rows"].append(row)
            print(f"{objective}/{compiled} {preset}: {row['tokens_per_s']:,.0f} tokens/s, {row['step_ms']:.1f} ms a "
                  f"step, MFU {row['mfu']:.2%} ({row['flops_per_token'] / 1e6:.2f} MFLOP a token, batch "
                  f"{row['batch_size']} x {row['seq_len']}, {precision})", flush=True)
        finally:
            release(device)
        write_report(args.json, report)
    return 0 if report["rows"] else 1


def measure_row(args: argparse.Namespace, objective: str, preset: str, compiled: str, extra: tuple[str, ...],
                peak_tflops: float, profile_dir: str | None) -> tuple[dict[str, Any], str]:
    """One row: the step as training.pretrain builds it, warmed up, timed; profiled into `profile_dir` if given.
    Returns (the row, the precision it trained in)."""
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        run = run_config(args, objective, preset, compiled, extra, Path(tmp) / "run")
        cfg = run.pretrain
        if run.threads:
            torch.set_num_threads(run.threads)
        if cfg.compile:
            torch._dynamo.reset()  # each row compiles its own model, whatever the row before left in the cache
        tokenizer = load_tokenizer(run.tokenizer)
        d = Dist(run.device)
        parts = setup(run, tokenizer, d)
        step_model = step_module(parts.model, cfg, d)
        steps = Steps(parts, step_model, run)
        warmup_start = time.perf_counter()
        steps.take(args.warmup_steps)
        synchronize(d.device)
        start = time.perf_counter()
        tokens = steps.take(args.steps)
        synchronize(d.device)
        elapsed = time.perf_counter() - start
        fpt = flops_per_token(cfg, parts.special.vocab_size, cfg.max_seq_length)
        tokens_per_s = tokens / elapsed
        row = {"objective": objective, "preset": preset, "compile": compiled, "tokens_per_s": round(tokens_per_s, 1),
               "step_ms": round(1000 * elapsed / args.steps, 3), "warmup_s": round(start - warmup_start, 3),
               "mfu": round(fpt * tokens_per_s / (peak_tflops * 1e12), 6), "batch_size": cfg.batch_size,
               "seq_len": cfg.max_seq_length, "flops_per_token": round(fpt), "device_peak_tflops": round(peak_tflops, 3)}
        if profile_dir:
            try:
                write_profile(Path(profile_dir), row, cfg.precision, steps, d.device)
            except Exception as e:  # noqa: BLE001 - the timed row stands without its profile
                print(f"{objective}/{compiled}: profile failed: {one_line(e)}", flush=True)
        return row, cfg.precision


def run_config(args: argparse.Namespace, objective: str, preset: str, compiled: str, extra: Iterable[str],
               out: Path) -> RunConfig:
    """The RunConfig `python -m training.pretrain` resolves from the same flags (no warm start: the objective's
    own step is timed)."""
    argv = ["--objective", objective, "--preset", preset, "--data", *args.data, "--tokenizer", args.tokenizer,
            "--out", str(out), "--device", args.device, "--precision", args.precision, "--warm-start", "0",
            "--num-proc", str(args.num_proc), *COMPILE_FLAGS[compiled], *extra]
    if args.cache_dir:
        argv += ["--cache-dir", args.cache_dir]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    return resolve_run(parse_args(argv))


class Steps:
    """Optimizer steps as `training.pretrain.take_steps` takes them: the schedule's lr and temperature, then
    `optimizer_step`; the metrics stay on the device, as the loop leaves them between log steps."""

    def __init__(self, parts: Parts, step_model: StepModule, run: RunConfig):
        self.parts, self.step_model, self.cfg = parts, step_model, run.pretrain
        self.step = 0

    def take(self, n: int) -> int:
        """Take n steps; the real tokens they read."""
        tokens, total = 0, self.cfg.max_steps
        for _ in range(n):
            lr, temperature = lr_at(self.step, self.cfg, total), temperature_at(self.step, self.cfg, total)
            _, _, read = optimizer_step(self.step_model, self.parts, self.cfg, self.step, lr, temperature)
            tokens += read
            self.step += 1
        return tokens


def write_profile(out_dir: Path, row: dict[str, Any], precision: str, steps: Steps, device: torch.device) -> Path:
    """PROFILED_STEPS steps under torch.profiler: their host syncs and top PROFILE_ROWS ops, in one text file."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        steps.take(PROFILED_STEPS)
        synchronize(device)
    syncs = host_syncs(e.name for e in prof.events())
    sort_by = "self_device_time_total" if cuda else "self_cpu_time_total"
    lines = [f"# {row['objective']}, {row['preset']}, compile {row['compile']}, {precision}, {device}: "
             f"{PROFILED_STEPS} optimizer steps under torch.profiler, after the timed ones",
             f"# timed: {row['tokens_per_s']:,.0f} tokens/s, {row['step_ms']:.1f} ms a step, MFU {row['mfu']:.2%}",
             f"# host syncs seen in {PROFILED_STEPS} steps (per step): " + ", ".join(
                 f"{name} {n} ({n / PROFILED_STEPS:g})" for name, n in syncs.items()),
             "# (on CUDA the runtime's synchronize calls and the DtoH copies are the syncs; the aten ops say which "
             "call asked. On a CPU nothing waits: aten::_local_scalar_dense also counts CPU kernels reading their "
             "own scalars, e.g. the optimizer's step)",
             f"# top {PROFILE_ROWS} ops by {sort_by}", "",
             prof.key_averages().table(sort_by=sort_by, row_limit=PROFILE_ROWS)]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{row['objective']}{PROFILE_SUFFIX[row['compile']]}.txt"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def host_syncs(event_names: Iterable[str]) -> dict[str, int]:
    """How many of the profiler's events are host syncs, by kind: each of SYNC_EVENTS, and the device's copies to
    the host (DEVICE_TO_HOST); every kind listed, 0 where none was seen."""
    seen = Counter(DEVICE_TO_HOST if name.startswith(DEVICE_TO_HOST) else name for name in event_names)
    return {name: seen[name] for name in (*SYNC_EVENTS, DEVICE_TO_HOST)}


def measure_peak(device: torch.device) -> tuple[str, float]:
    """(which matmul, its TFLOP/s) on this device: bf16 8192^3 on CUDA, fp32 1024^3 on a CPU; the best of a few
    timed rounds after a warm-up."""
    n, dtype, calls = (8192, torch.bfloat16, 20) if device.type == "cuda" else (1024, torch.float32, 3)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    torch.matmul(a, b, out=out)  # warm-up: the kernel choice, the first call's allocations
    best = float("inf")
    for _ in range(3):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(calls):
            torch.matmul(a, b, out=out)
        synchronize(device)
        best = min(best, (time.perf_counter() - start) / calls)
    del a, b, out
    release(device)
    return f"{str(dtype).removeprefix('torch.')} {n}x{n}x{n} matmul", 2 * n**3 / best / 1e12


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release(device: torch.device) -> None:
    """What a finished (or failed) row held, given back before the next one."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def write_report(path: str | None, report: dict[str, Any]) -> None:
    """The whole report, written then renamed over `path` (none: nothing written)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
