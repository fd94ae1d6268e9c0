"""ONNX Runtime inference: the backend the server and `--backend onnx` use for `electric export` dirs.

    backend = OnnxBackend("runs/electric-tiny/onnx")      # CUDA if onnxruntime-gpu sees a GPU, else CPU
    logits = backend.run(input_ids, attention_mask)        # (B, T) for a discriminator, as TorchBackend

Choices made here, each overridable:
- providers: CUDA (then CPU) when onnxruntime offers CUDAExecutionProvider, else CPU. Providers that
  this onnxruntime build lacks are dropped with a warning; `backend.providers` is what the session
  really uses (onnxruntime itself may also drop CUDA, e.g. without a driver).
- precision: the export directory may hold fp32, int8 and fp16 graphs (manifest `files`). CUDA runs
  fp16 when there is one, CPU runs int8 when there is one, otherwise fp32 (or what `precision=` or
  $ELECTRIC_ONNX_PRECISION asks for, e.g. fp32 for results identical to torch).
- threads: intra-op threads = physical cores available to this process (hyper-threads do not help
  GEMM-bound inference); inter-op 1 (the graph is a chain).
- shape buckets: the batch is padded up to the next bucket (`round_up_to_bucket`: a multiple of 8 on CPU, a few
  fixed lengths on CUDA, where fewer distinct shapes mean fewer allocations) and the output is cut
  back to the caller's length. Padding is masked out, so the result does not depend on the bucket.
- IOBinding: on CUDA, inputs are copied to the device once and the output is bound on the device.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from electric.batching import pad_columns, round_up_to_bucket
from electric.checkpoint import MANIFEST, CheckpointError, ExportManifest, Kind, Runtime, require_local_dir
from electric.inference.calibration import Calibration
from electric.tokenization import load_inference_tokenizer

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")  # the graph's inputs, in order
OUTPUT_NAME = "logits"
# Electric's cloze model: one segment in, (B, T) log q(x_t | x_not_t) of each input token out (electric.inference.cloze)
CLOZE_INPUT_NAMES = INPUT_NAMES[:2]
CLOZE_OUTPUT_NAME = "token_logprobs"


def physical_cores() -> int:
    """Physical cores among the CPUs this process may run on (Linux /proc/cpuinfo; else os.cpu_count)."""
    try:
        allowed = os.sched_getaffinity(0)
    except AttributeError:  # not Linux
        allowed = set(range(os.cpu_count() or 1))
    cores, proc, phys = set(), None, "0"
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "processor":
                    proc, phys = int(value), "0"
                elif key == "physical id":
                    phys = value
                elif key == "core id" and proc in allowed:
                    cores.add((phys, value))
    except (OSError, ValueError):
        cores = set()
    return max(1, min(len(cores) or len(allowed), len(allowed)))


def select_providers(requested: Sequence[str] | None = None, available: Sequence[str] | None = None) -> list[str]:
    """The providers to ask onnxruntime for: `requested` (default: CUDA if available, then CPU) minus
    those this build lacks, always ending with CPU as the fallback."""
    import onnxruntime as ort

    available = list(ort.get_available_providers() if available is None else available)
    if requested is None:
        requested = [CUDA, CPU] if CUDA in available else [CPU]
    missing = [p for p in requested if p not in available]
    if missing:
        warnings.warn(f"execution providers {missing} are not available in this onnxruntime build "
                      f"(available: {available}); falling back", RuntimeWarning, stacklevel=3)
    chosen = [p for p in requested if p in available]
    if CPU not in chosen:
        chosen.append(CPU)
    return chosen


def make_session(path: str | Path, providers: Sequence[str] | None = None, threads: int | None = None,
                 spin: bool = True):
    """An onnxruntime InferenceSession with our thread and provider choices; returns (session, threads).

    spin: ONNX Runtime's intra-op threads spin between operators, waiting for the next one's work (its default). One
    caller's pass runs faster so; a server under load needs those cycles for its own event loop and tokenisation,
    and serves it with spin=False (the server's --spin-wait)."""
    import onnxruntime as ort

    threads = int(threads) if threads else physical_cores()
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3  # errors only: CUDA-less fallbacks are reported by us, once
    if not spin:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    chosen = select_providers(providers)
    try:
        session = ort.InferenceSession(str(path), sess_options=so, providers=chosen)
    except Exception as e:  # noqa: BLE001 - e.g. onnxruntime-gpu without a usable CUDA: retry on CPU
        if chosen == [CPU]:
            raise
        warnings.warn(f"could not start {chosen} ({e}); falling back to {CPU}", RuntimeWarning, stacklevel=2)
        session = ort.InferenceSession(str(path), sess_options=so, providers=[CPU])
    running = session.get_providers()
    if CUDA in chosen and CUDA not in running:  # onnxruntime logs why at a level we silenced: say it here
        warnings.warn(f"asked for {chosen}, running on {running}: onnxruntime offers {CUDA} but could not load it; "
                      "the CUDA libraries must match the build (onnxruntime-gpu 1.20-1.26 needs CUDA 12 and cuDNN 9, "
                      "1.27 and later CUDA 13)", RuntimeWarning, stacklevel=2)
    elif providers and providers[0] != running[0]:
        warnings.warn(f"asked for {list(providers)}, running on {running}", RuntimeWarning, stacklevel=2)
    return session, threads


class OnnxRunner:
    """One ONNX graph in an onnxruntime session: validates, pads to a bucket, runs, cuts back."""

    def __init__(self, path: str | Path, *, max_length: int, pad_token_id: int = 0,
                 providers: Sequence[str] | None = None, threads: int | None = None,
                 buckets: bool = True, io_binding: bool | None = None, spin: bool = True):
        self.path = Path(path)
        self.session, self.threads = make_session(self.path, providers, threads, spin)
        self.providers: list[str] = self.session.get_providers()
        self.on_cuda = self.providers[0] == CUDA
        self.max_length = int(max_length)
        self.pad_token_id = int(pad_token_id)
        self.buckets = buckets
        # IOBinding pays off on a device; forcing it on CPU runs the same code (the tests do this)
        self.io_binding = self.on_cuda if io_binding is None else bool(io_binding)
        self.device = "cuda" if self.on_cuda else "cpu"
        options = self.session.get_provider_options().get(CUDA, {}) if self.on_cuda else {}
        self.device_id = int(options.get("device_id", 0))
        self.input_names = [i.name for i in self.session.get_inputs()]
        output = self.session.get_outputs()[0]
        self.output_name = output.name
        # (B, T) or (B, T, C) outputs have a symbolic axis 1; a classifier's (B, C) has a number there
        self.per_token = len(output.shape) == 3 or (len(output.shape) == 2 and not isinstance(output.shape[1], int))
        unknown = set(self.input_names) - set(INPUT_NAMES)
        if unknown:
            raise CheckpointError(f"{str(self.path)!r} has unexpected inputs {sorted(unknown)} "
                                  f"(expected a subset of {list(INPUT_NAMES)})")

    def padded_length(self, length: int) -> int:
        """The length a batch whose longest row has `length` tokens runs at (its bucket)."""
        return round_up_to_bucket(length, self.max_length, self.on_cuda) if self.buckets else length

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray,
            token_type_ids: np.ndarray | None = None) -> np.ndarray:
        input_ids = np.asarray(input_ids)
        attention_mask = np.asarray(attention_mask)
        if input_ids.ndim != 2 or input_ids.shape != attention_mask.shape:
            raise ValueError(f"input_ids {input_ids.shape} and attention_mask {attention_mask.shape} "
                             "must both be (B, T)")
        if token_type_ids is None:
            token_type_ids = np.zeros_like(input_ids)
        token_type_ids = np.asarray(token_type_ids)
        if token_type_ids.shape != input_ids.shape:
            raise ValueError(f"token_type_ids {token_type_ids.shape} must match input_ids {input_ids.shape}")
        length = input_ids.shape[1]
        if input_ids.size == 0:
            raise ValueError(f"empty batch: input_ids has shape {input_ids.shape}")
        if length > self.max_length:
            raise ValueError(f"sequence length {length} is above the model's max_length {self.max_length}")
        padded = self.padded_length(length)
        feeds = {
            "input_ids": pad_columns(input_ids, padded, self.pad_token_id),  # (B, T')
            "attention_mask": pad_columns(attention_mask, padded, 0),  # (B, T')
            "token_type_ids": pad_columns(token_type_ids, padded, 0),  # (B, T')
        }
        feeds = {k: v for k, v in feeds.items() if k in self.input_names}
        out = self._run_bound(feeds) if self.io_binding else self.session.run([self.output_name], feeds)[0]
        if self.per_token and padded != length:  # (B, T'[, C]) -> (B, T[, C])
            out = out[:, :length]
        return np.ascontiguousarray(out, dtype=np.float32)

    def release_memory(self) -> None:
        """Give back what onnxruntime's arena kept from larger batches: one 1-row pass with the arena shrinkage
        run option frees every arena region that pass does not use (a 64 x 512 batch of a MiniLM-sized int8 graph
        leaves ~4 GB in the arena otherwise). Call it idle, from the thread that runs the batches."""
        import onnxruntime as ort

        options = ort.RunOptions()
        arenas = "cpu:0" + (f";gpu:{self.device_id}" if self.on_cuda else "")
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", arenas)
        ids = np.full((1, self.padded_length(1)), self.pad_token_id, dtype=np.int64)  # (1, T')
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        self.session.run([self.output_name], {k: v for k, v in feeds.items() if k in self.input_names}, options)

    def _run_bound(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        import onnxruntime as ort

        binding = self.session.io_binding()
        for name, value in feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, self.device, self.device_id))
        binding.bind_output(self.output_name, self.device, self.device_id)
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]


PRECISION_ENV = "ELECTRIC_ONNX_PRECISION"  # fp32 | int8 | fp16: overrides the per-device default


def choose_onnx_precision(manifest: ExportManifest, on_cuda: bool, precision: str | None = None) -> str:
    """The one asked for (argument, else $ELECTRIC_ONNX_PRECISION); otherwise fp16 on CUDA and int8 on
    CPU when the export has them, else fp32."""
    files = manifest.files
    precision = precision or os.environ.get(PRECISION_ENV) or None
    if precision is not None:
        if precision not in files:
            raise CheckpointError(f"this export has no {precision} model (it has {sorted(files)}); "
                                  f"re-export with {'--fp16' if precision == 'fp16' else '--quantize int8'}")
        return precision
    preferred = ("fp16", "fp32") if on_cuda else ("int8", "fp32")
    return next((p for p in preferred if p in files), next(iter(files)))


class OnnxBackend:
    """An `electric export` directory on ONNX Runtime; implements electric.inference.backend.Backend.

    providers: onnxruntime provider names in order of preference (default: CUDA if available, CPU);
    device: "cpu" or "cuda" as a shorthand for providers (TorchBackend's argument);
    threads: intra-op threads (default: physical cores); precision: "fp32" | "int8" | "fp16"
    (default: $ELECTRIC_ONNX_PRECISION, else fp16 on CUDA and int8 on CPU when exported, else fp32);
    buckets: pad T up to a length bucket;
    io_binding: bind inputs/outputs on the device (default: on CUDA);
    spin: the intra-op threads spin between operators (`make_session`).
    """

    runtime: Runtime = "onnx"

    def __init__(self, model_dir: str | Path, providers: Sequence[str] | None = None, threads: int | None = None,
                 precision: str | None = None, device: str | None = None, buckets: bool = True,
                 io_binding: bool | None = None, spin: bool = True):
        d = require_local_dir(model_dir, "model")
        self.manifest = ExportManifest.read(d)
        self.model_dir = d
        self.kind: Kind = self.manifest.kind
        # detect's P(replaced) = sigma(scale * s + bias), fitted at export; None: raw sigma(s) (older exports)
        self.calibration = Calibration.from_manifest(self.manifest) if self.kind == "discriminator" else None
        self.max_positions = self.manifest.max_length  # the graph's position table
        if self.manifest.trained_length is None:
            raise CheckpointError(f"{str(d / MANIFEST)!r} lacks 'trained_length': re-export the model with "
                                  "`electric export`")
        self.max_length = min(self.manifest.trained_length, self.max_positions)
        self.max_length_from = f"{self.manifest.trained_length_from}, as its {MANIFEST} records"
        self.config = json.loads((d / "config.json").read_text()) if (d / "config.json").is_file() else {}
        self.tokenizer = load_inference_tokenizer(d)  # from tokenizer.json: no transformers, no torch
        if providers is None and device is not None:
            if device.startswith("cuda"):
                providers = [CUDA, CPU]
            elif device == "cpu":
                providers = [CPU]
            else:
                raise ValueError(f"device {device!r}: expected 'cpu' or 'cuda'")
        requested = select_providers(providers)
        self.precision = choose_onnx_precision(self.manifest, requested[0] == CUDA, precision)
        self.runner = self._runner(requested, threads, buckets, io_binding, spin)
        if requested[0] == CUDA and not self.runner.on_cuda:  # onnxruntime itself fell back to CPU
            cpu_precision = choose_onnx_precision(self.manifest, False, precision)
            if cpu_precision != self.precision:
                self.precision = cpu_precision
                self.runner = self._runner([CPU], threads, buckets, io_binding, spin)
        self.providers: list[str] = self.runner.providers
        self.threads = self.runner.threads
        if self.precision == "fp16" and not self.runner.on_cuda:
            warnings.warn("running the fp16 model on the CPU provider is slow; pass precision='fp32' or 'int8'",
                          RuntimeWarning, stacklevel=2)

    def _runner(self, providers, threads, buckets, io_binding, spin) -> OnnxRunner:
        path = self.model_dir / self.manifest.files[self.precision]
        if not path.is_file():
            raise CheckpointError(f"{str(path)!r} named in {MANIFEST} is missing")
        return OnnxRunner(path, max_length=self.max_positions, pad_token_id=self.tokenizer.pad_token_id,
                          providers=providers, threads=threads, buckets=buckets, io_binding=io_binding, spin=spin)

    @property
    def labels(self) -> list[str] | None:
        return self.manifest.labels

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray,
            token_type_ids: np.ndarray | None = None) -> np.ndarray:
        return self.runner.run(input_ids, attention_mask, token_type_ids)

    def padded_length(self, length: int) -> int:
        """The length the runtime pads a batch of longest row `length` to: pad to it first and it pads nothing."""
        return self.runner.padded_length(length)

    def release_memory(self) -> None:
        """Give the runtime's arena back after a burst (OnnxRunner.release_memory)."""
        self.runner.release_memory()

    def warmup(self, lengths: Sequence[int] = (16, 64), batch_size: int = 8) -> None:
        """Run dummy batches once, so the first real request does not pay for allocations."""
        for length in lengths:
            T = min(int(length), self.max_length)
            ids = np.full((batch_size, T), self.tokenizer.pad_token_id, dtype=np.int64)
            self.run(ids, np.ones_like(ids))

    def __repr__(self) -> str:
        return (f"OnnxBackend({str(self.model_dir)!r}, kind={self.kind}, precision={self.precision}, "
                f"providers={self.providers}, threads={self.threads})")
