"""Export an ELECTRA checkpoint to ONNX, check parity, quantise, and write the runtime's manifest.

    manifest = export_model("runs/electric-tiny/discriminator", "runs/electric-tiny/onnx", quantize="int8")

The output directory (written to a temporary directory and renamed into place, so it is complete or
absent) holds:
    model.onnx          fp32 graph: inputs input_ids, attention_mask, token_type_ids (int64, (B, T));
                        output logits (float32; (B, T) | (B, C) | (B, T, C)); B and T dynamic
    model.int8.onnx     with --quantize int8: dynamic int8 quantisation of the encoder's MatMuls (CPU)
    model.fp16.onnx     with --fp16: fp16 weights and activations, fp32 inputs/outputs (CUDA)
    config.json, tokenizer files   copied from the checkpoint
    electric.json       the manifest (see `build_manifest`)

How the graph is made: torch.onnx's TorchScript exporter (`dynamo=False`) on the transformers model
loaded with `attn_implementation="eager"`. Measured here against the torch.export-based exporter, SDPA
attention and onnxruntime's transformer optimizer (fused attention); this was fastest on CPU
(benchmarks/results/runtime.md).

Parity is checked on real sentences at shapes other than the export shape: fp32 must be within 1e-4
of torch (else ParityError, always); int8/fp16 report the max logit difference and the Spearman
correlation with fp32 of sentence PLL (-sum of s_t over non-special tokens; for classifiers and taggers,
of the logits), and fail below 0.99 unless `force`.

A discriminator is also calibrated (electric.inference.calibration): Platt scaling p_t = sigmoid(scale * s_t + bias),
fitted on held-out sentences that the run's own generator (RUN/generator, or `generator`) corrupts as in
pretraining, so that detect's probabilities mean the same for ELECTRA and Electric; the manifest keeps
the two numbers, what they were fitted on and a held-out check.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from electric.checkpoint import (
    TOKENIZER_FILES,
    CheckpointError,
    atomic_dir,
    load_tokenizer,
    require_local_dir,
    run_parts,
)
from electric.export.calibration import MAX_SENTENCES, find_generator, fit_calibration
from electric.inference.backend import ARCHITECTURE_KINDS, MANIFEST, Kind, TorchBackend
from electric.inference.runtime import CPU, CUDA, INPUT_NAMES, OUTPUT_NAME, OnnxRunner, select_providers

DEFAULT_OPSET = 17
FP32_TOLERANCE = 1e-4  # max |ONNX fp32 - torch| over real tokens
MIN_SPEARMAN = 0.99  # int8/fp16 vs fp32, sentence-level
FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx", "fp16": "model.fp16.onnx"}
PARITY_BATCHES = (1, 7, 24, 32)  # parity batch sizes; each padded to its own longest row
PARITY_MAX_TOKENS = 128
EXPORT_SHAPE = (2, 16)  # the traced example's (B, T); row 2 is padded so the mask path is traced
TOKENIZER_EXTRA = ("tokenizer_config.json", "special_tokens_map.json")
GENERATOR_HEADS = {"ElectraForMaskedLM", "ElectricForClozeLM"}
# int8 leaves these (graph node names from the module path) in fp32: heads and the embedding projection
KEEP_FP32 = ("/discriminator_predictions/", "/classifier/", "/embeddings_project/")
FORMAT_VERSION = 1

# Built-in parity sentences, used only when neither --parity-data nor a default sentence file is available.
BUILTIN_SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "i would like to book a flight from boston to denver on monday morning",
    "She sells sea shells by the sea shore.",
    "The committee will meet again next week to discuss the budget.",
    "he was born in a small town near the river and moved to the city when he was twelve",
    "What time does the last train leave for the airport?",
    "Paris is the capital and most populous city of France.",
    "the results of the experiment were not consistent with the original hypothesis",
    "Please turn off the lights when you leave the room.",
    "A new species of frog was discovered in the rainforest last year.",
    "show me the cheapest fare from dallas to san francisco",
    "The museum is closed on Mondays and public holidays.",
    "they decided to postpone the meeting because of the storm",
    "Water boils at one hundred degrees Celsius at sea level.",
    "The novel was translated into more than forty languages.",
    "could you tell me how to get to the nearest train station",
)


class ExportError(RuntimeError):
    """The export could not be completed (the output directory was not written)."""


class ParityError(ExportError):
    """The exported graph does not reproduce the checkpoint closely enough."""


# ---- inputs -------------------------------------------------------------------------------------

def inspect_checkpoint(model_dir: str | Path) -> tuple[Path, dict, Kind, str]:
    """Validate a transformers ELECTRA checkpoint dir; returns (dir, config, kind, architecture)."""
    d = require_local_dir(model_dir, "model")
    cfg_path = d / "config.json"
    if "discriminator" in run_parts(d):
        raise CheckpointError(f"{str(d)!r} is a pretraining run directory: export its discriminator, "
                              f"{str(d / 'discriminator')!r}")
    if not cfg_path.is_file():
        raise CheckpointError(f"{str(d)!r} has no config.json, so it is not a transformers checkpoint")
    try:
        config = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{str(cfg_path)!r} is not valid JSON: {e}") from e
    archs = config.get("architectures") or []
    generator = sorted(GENERATOR_HEADS.intersection(archs))
    if generator:
        raise CheckpointError(
            f"{str(d)!r} holds {generator[0]} (a generator / masked-LM head), which `electric export` does "
            f"not support: export the discriminator (RUN/discriminator) or a fine-tuned classifier/tagger "
            f"(supported heads: {sorted(ARCHITECTURE_KINDS)})")
    if config.get("model_type") != "electra":
        raise CheckpointError(f"{str(d)!r} holds model_type {config.get('model_type')!r}, not ELECTRA")
    arch = next((a for a in archs if a in ARCHITECTURE_KINDS), None)
    if arch is None:
        raise CheckpointError(f"{str(d)!r}: head {archs} is not supported (supported: {sorted(ARCHITECTURE_KINDS)})")
    if not any((d / f).is_file() for f in TOKENIZER_FILES):
        raise CheckpointError(f"{str(d)!r} has no tokenizer (tokenizer.json or vocab.txt); save the tokenizer "
                              "beside the model")
    return d, config, ARCHITECTURE_KINDS[arch], arch


def checkpoint_hash(d: Path) -> str:
    """sha256 over the checkpoint's top-level files (names and bytes, in name order)."""
    h = hashlib.sha256()
    for p in sorted(x for x in d.iterdir() if x.is_file()):
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def read_sentences(path: str | Path, limit: int | None = None) -> list[str]:
    """One sentence a line; for a .tsv, the `sentence` column if the header has one, else the first."""
    p = Path(path)
    if not p.is_file():
        raise ExportError(f"sentence file {str(p)!r} is not a file")
    lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
    col = 0
    if p.suffix == ".tsv" and lines and "sentence" in lines[0].split("\t"):
        col = lines.pop(0).split("\t").index("sentence")
    out = []
    for line in lines:
        text = (line.split("\t")[col] if p.suffix == ".tsv" else line).strip()
        if text:
            out.append(text)
        if limit and len(out) >= limit:
            break
    return out


def sentences_or_default(path: str | Path | None, limit: int, what: str,
                         default: str | Path | None = None) -> tuple[list[str], str]:
    """Up to `limit` sentences and where they came from: `path`, else the `default` file when it exists and holds
    some, else the built-in ones."""
    if path is not None:
        sents = read_sentences(path, limit)
        if not sents:
            raise ExportError(f"{what} {str(path)!r} holds no sentences")
        return sents, str(path)
    sents = read_sentences(default, limit) if default is not None and Path(default).is_file() else []
    return (sents, str(default)) if sents else (list(BUILTIN_SENTENCES), "built-in sentences")


def parity_sentences(path: str | Path | None = None, n: int = sum(PARITY_BATCHES),
                     default: str | Path | None = None) -> tuple[list[str], str]:
    """n real sentences: from `path`, else the `default` file, else built-in ones."""
    sents, source = sentences_or_default(path, n, "parity data", default)
    while len(sents) < n:  # repeat a short file; the batch shapes still differ
        sents = sents + sents[: n - len(sents)]
    return sents[:n], source


def parity_batches(tokenizer, sentences: Sequence[str], max_length: int, pairs: bool) -> list[dict]:
    """Batches of PARITY_BATCHES sizes, each padded to its own longest row (so T differs between them).
    With `pairs`, every other example is a sentence pair (token_type_ids 1 on the second segment)."""
    out, i = [], 0
    limit = min(max_length, PARITY_MAX_TOKENS)
    for size in PARITY_BATCHES:
        chunk = list(sentences[i : i + size])
        i += size
        if not chunk:
            break
        if pairs:
            firsts = chunk
            seconds = [chunk[(j + 1) % len(chunk)] if j % 2 else None for j in range(len(chunk))]
            enc = [tokenizer(a, b, truncation=True, max_length=limit) if b else
                   tokenizer(a, truncation=True, max_length=limit) for a, b in zip(firsts, seconds, strict=True)]
            enc = tokenizer.pad({"input_ids": [e["input_ids"] for e in enc],
                                 "token_type_ids": [e.get("token_type_ids", [0] * len(e["input_ids"])) for e in enc],
                                 "attention_mask": [e["attention_mask"] for e in enc]}, return_tensors="np")
            ids = enc["input_ids"]
            special = np.isin(ids, tokenizer.all_special_ids)
        else:
            enc = tokenizer(chunk, padding=True, truncation=True, max_length=limit, return_tensors="np",
                            return_special_tokens_mask=True)
            special = enc["special_tokens_mask"].astype(bool)
        batch = {k: np.asarray(enc[k], dtype=np.int64) for k in INPUT_NAMES if k in enc}
        batch.setdefault("token_type_ids", np.zeros_like(batch["input_ids"]))
        batch["candidates"] = batch["attention_mask"].astype(bool) & ~special  # (B, T)
        out.append(batch)
    return out


# ---- measures -----------------------------------------------------------------------------------

def sentence_scores(kind: Kind, logits: np.ndarray, batch: dict) -> np.ndarray:
    """One number per sentence (discriminator: PLL = -sum s_t over candidates) or per logit
    (classifier: every class; tagger: every class at every real token), for rank correlation."""
    if kind == "discriminator":
        return -(logits * batch["candidates"]).sum(axis=1)  # (B,)
    if kind == "classifier":
        return logits.reshape(-1)  # (B*C,)
    return logits[batch["attention_mask"].astype(bool)].reshape(-1)  # (N_real*C,)


def real_values(kind: Kind, logits: np.ndarray, batch: dict) -> np.ndarray:
    """The logits that mean something: all of a classifier's, the real tokens' otherwise."""
    return logits.reshape(-1) if kind == "classifier" else logits[batch["attention_mask"].astype(bool)].reshape(-1)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if len(a) < 3 or np.all(a == a[0]) or np.all(b == b[0]):
        return float("nan")
    return float(spearmanr(a, b).statistic)


def compare(kind: Kind, batches: list[dict], ref: list[np.ndarray], got: list[np.ndarray]) -> dict:
    diff = max(float(np.abs(real_values(kind, g, b) - real_values(kind, r, b)).max())
               for b, r, g in zip(batches, ref, got, strict=True))
    s_ref = np.concatenate([sentence_scores(kind, r, b) for b, r in zip(batches, ref, strict=True)])
    s_got = np.concatenate([sentence_scores(kind, g, b) for b, g in zip(batches, got, strict=True)])
    out = {"max_abs_diff": diff, "spearman": spearman(s_ref, s_got)}
    if kind == "discriminator":  # length-free view: PLL per token (sentence length drives the sum's ranks)
        n = np.concatenate([b["candidates"].sum(axis=1) for b in batches]).clip(min=1)
        out["spearman_per_token"] = spearman(s_ref / n, s_got / n)
    return out


def run_batches(run: Callable, batches: list[dict]) -> list[np.ndarray]:
    return [run(b["input_ids"], b["attention_mask"], b["token_type_ids"]) for b in batches]


# ---- graph making -------------------------------------------------------------------------------

class LogitsOnly(torch.nn.Module):
    """A transformers model with positional inputs and one output, `logits`: the graph's signature."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):  # each (B, T) int64
        return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits


def load_for_export(model_dir: Path, arch: str, attn_implementation: str = "eager"):
    import transformers

    cls = getattr(transformers, arch)
    try:
        return cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation=attn_implementation).eval()
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"could not load {str(model_dir)!r} as {arch}: {e}") from e


def example_inputs(vocab_size: int, pad_token_id: int):
    B, T = EXPORT_SHAPE
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(min(5, vocab_size - 1), vocab_size, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, T // 2 :] = 0  # a padded row: the attention-mask path must be in the graph
    ids[1, T // 2 :] = pad_token_id
    return ids, mask, torch.zeros(B, T, dtype=torch.long)


def export_onnx(model, path: Path, *, opset: int = DEFAULT_OPSET, exporter: str = "legacy",
                pad_token_id: int = 0) -> None:
    """Write `model` (a transformers ELECTRA head) to `path` with dynamic batch and sequence axes.

    exporter: "legacy" = TorchScript exporter (dynamo=False), "dynamo" = torch.export-based exporter."""
    # eval() on the wrapper too: the exporter restores the wrapper's mode afterwards, and a fresh Module
    # is in training mode, which would silently switch dropout on in `model` for everyone after us.
    wrapper = LogitsOnly(model).eval()
    args = example_inputs(model.config.vocab_size, pad_token_id)
    classifier = ARCHITECTURE_KINDS.get(type(model).__name__) == "classifier"
    out_axes = {0: "batch"} if classifier else {0: "batch", 1: "sequence"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
        if exporter == "legacy":
            axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
            axes[OUTPUT_NAME] = out_axes
            torch.onnx.export(wrapper, args, str(path), input_names=list(INPUT_NAMES), output_names=[OUTPUT_NAME],
                              dynamic_axes=axes, opset_version=opset, do_constant_folding=True, dynamo=False)
        elif exporter == "dynamo":
            batch, seq = torch.export.Dim("batch", min=1, max=4096), torch.export.Dim("sequence", min=2, max=4096)
            shapes = {name: {0: batch, 1: seq} for name in INPUT_NAMES}
            program = torch.onnx.export(wrapper, args, input_names=list(INPUT_NAMES), output_names=[OUTPUT_NAME],
                                        dynamic_shapes=shapes, opset_version=max(opset, 18), dynamo=True,
                                        optimize=True, verbose=False)
            program.save(str(path))
        else:
            raise ValueError(f"exporter {exporter!r}: expected 'legacy' or 'dynamo'")


def optimize_transformer(src: Path, dst: Path, config: dict) -> None:
    """onnxruntime's BERT optimizer (fused Attention, SkipLayerNorm, BiasGelu). Measured, not the default."""
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(str(src), model_type="bert", num_heads=config["num_attention_heads"],
                           hidden_size=config["hidden_size"], opt_level=1)
    model.save_model_to_file(str(dst))


class _NoPreprocessAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


@contextlib.contextmanager
def _without_preprocess_advice() -> Iterator[None]:
    """Drop onnxruntime's "Please consider to run pre-processing before quantization" (a root-logger WARNING
    for every model not run through quant_pre_process): skipping it is deliberate (measured within noise or
    slower, BENCHMARKS.md; `preprocess=True` runs it), so the advice would only look like a failure."""
    advice = _NoPreprocessAdvice()
    logging.getLogger().addFilter(advice)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(advice)


def quantize_int8(src: Path, dst: Path, *, preprocess: bool = False, keep_fp32: Sequence[str] = KEEP_FP32) -> None:
    """Dynamic int8 quantisation (int8 weights per tensor, uint8 activations) of the encoder's MatMuls.

    keep_fp32: MatMul/Gemm nodes whose name contains one of these stay fp32: the output head and the
    embedding projection, <2% of the FLOPs but most of the ranking error (measured on a briefly trained
    discriminator: per-token PLL Spearman vs fp32 0.70 with them quantised, 0.999 without).
    preprocess: run onnxruntime's quant_pre_process first, as its quantiser advises; measured in
    benchmarks/bench_runtime.py, not the default."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    try:
        if preprocess:
            from onnxruntime.quantization.shape_inference import quant_pre_process

            pre = dst.with_name(dst.stem + ".pre.onnx")
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)  # the legacy graph defeats it
            src = pre
        graph = onnx.load(str(src), load_external_data=False).graph
        exclude = [n.name for n in graph.node
                   if n.op_type in ("MatMul", "Gemm") and any(k in n.name for k in keep_fp32)]
        # DefaultTensorType: outputs that shape inference leaves untyped (e.g. after fusion) are float
        with _without_preprocess_advice():
            quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"],
                             per_channel=False, reduce_range=False, nodes_to_exclude=exclude,
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    except Exception as e:  # noqa: BLE001 - any library failure is one clear error
        raise ExportError(f"int8 quantisation of {src.name} failed: {type(e).__name__}: {e}") from e
    finally:
        if preprocess:
            dst.with_name(dst.stem + ".pre.onnx").unlink(missing_ok=True)
    if not dst.is_file():
        raise ExportError(f"int8 quantisation of {src.name} wrote nothing")


def convert_fp16(src: Path, dst: Path) -> None:
    """fp16 weights and activations, inputs/outputs kept int64/float32 (onnxruntime's converter)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    try:
        model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
        onnx.save(model, str(dst))
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"fp16 conversion of {src.name} failed: {type(e).__name__}: {e}") from e


# ---- Triton -------------------------------------------------------------------------------------

_ONNX_TO_TRITON = {1: "TYPE_FP32", 10: "TYPE_FP16", 7: "TYPE_INT64", 6: "TYPE_INT32", 9: "TYPE_BOOL"}


def _dims(value_info) -> list[int]:
    """Dims of a graph input/output without the batch axis; symbolic dims become -1."""
    dims = value_info.type.tensor_type.shape.dim[1:]
    return [d.dim_value if d.HasField("dim_value") else -1 for d in dims]


def triton_config(name: str, onnx_path: Path, *, max_batch_size: int = 128, gpu: bool | None = None) -> str:
    """config.pbtxt for Triton's onnxruntime backend, with names/dtypes/dims read from the graph."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    init = {i.name for i in graph.initializer}

    def tensor(v) -> str:
        dtype = _ONNX_TO_TRITON.get(v.type.tensor_type.elem_type)
        if dtype is None:
            raise ExportError(f"{v.name}: ONNX element type {v.type.tensor_type.elem_type} has no Triton type here")
        dims = ", ".join(str(d) for d in _dims(v))
        return f'  {{\n    name: "{v.name}"\n    data_type: {dtype}\n    dims: [ {dims} ]\n  }}'

    inputs = ",\n".join(tensor(v) for v in graph.input if v.name not in init)
    outputs = ",\n".join(tensor(v) for v in graph.output)
    preferred = ", ".join(str(b) for b in (8, 16, 32, 64, 128) if b <= max_batch_size) or str(max_batch_size)
    lines = [
        f'name: "{name}"',
        'platform: "onnxruntime_onnx"',
        f"max_batch_size: {max_batch_size}",
        f"input [\n{inputs}\n]",
        f"output [\n{outputs}\n]",
        f"dynamic_batching {{\n  preferred_batch_size: [ {preferred} ]\n  max_queue_delay_microseconds: 1000\n}}",
    ]
    if gpu is not None:
        lines.append(f"instance_group [\n  {{\n    count: 1\n    kind: {'KIND_GPU' if gpu else 'KIND_CPU'}\n  }}\n]")
    return "\n".join(lines) + "\n"


def triton_name(out_dir: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", out_dir.resolve().name).strip("-.")
    return name or "electric"


def write_triton(repo: Path, name: str, onnx_path: Path, precision: str, overwrite: bool,
                 max_batch_size: int = 128) -> Path:
    """REPO/NAME/config.pbtxt and REPO/NAME/1/model.onnx (atomic: complete or absent)."""
    final = repo / name
    if final.exists() and not overwrite:
        raise ExportError(f"Triton model {str(final)!r} already exists (pass --overwrite to replace it)")
    gpu = {"fp16": True, "int8": False}.get(precision)
    with atomic_dir(final) as tmp:
        (tmp / "1").mkdir()
        shutil.copyfile(onnx_path, tmp / "1" / "model.onnx")
        (tmp / "config.pbtxt").write_text(triton_config(name, onnx_path, max_batch_size=max_batch_size, gpu=gpu))
    return final


# ---- calibration --------------------------------------------------------------------------------

def calibration_generator(src: Path, config: dict, kind: Kind, calibrate: bool, generator: str | Path | None,
                          log: Callable[[str], None]) -> Path | None:
    """The generator that corrupts the calibration text: `generator`, else RUN/generator beside
    RUN/discriminator; None (with a note) when there is none or no calibration is wanted."""
    if kind != "discriminator" or not calibrate:
        if generator is not None and kind != "discriminator":
            raise ExportError(f"--generator: only a discriminator is calibrated, {str(src)!r} holds a {kind}")
        return None
    gen_dir = require_local_dir(generator, "generator") if generator is not None else find_generator(src)
    if gen_dir is None:
        log(f"no calibration: no generator beside {str(src)!r} (RUN/generator); detect will return the raw "
            "sigmoid(s_t), which is not a probability for Electric (pass --generator DIR)")
        return None
    gen_config = gen_dir / "config.json"
    if not gen_config.is_file():
        raise CheckpointError(f"generator {str(gen_dir)!r} has no config.json")
    gen_vocab = json.loads(gen_config.read_text()).get("vocab_size")
    if gen_vocab != config.get("vocab_size"):
        raise ExportError(f"generator {str(gen_dir)!r} has vocabulary size {gen_vocab}, the discriminator "
                          f"{config.get('vocab_size')}: not the same model's generator")
    return gen_dir


# ---- the whole export ---------------------------------------------------------------------------

def _versions() -> dict:
    import onnx
    import onnxruntime
    import torch
    import transformers

    from electric import __version__

    return {"electric": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def export_model(model_dir: str | Path, out_dir: str | Path, *, quantize: str | None = None, fp16: bool = False,
                 opset: int = DEFAULT_OPSET, force: bool = False, overwrite: bool = False,
                 parity_data: str | Path | None = None, triton_repo: str | Path | None = None,
                 triton_model_name: str | None = None, exporter: str = "legacy",
                 attn_implementation: str = "eager", threads: int | None = None, calibrate: bool = True,
                 generator: str | Path | None = None, calibration_data: str | Path | None = None,
                 default_sentences: str | Path | None = None, log: Callable[[str], None] = print) -> dict:
    """Export, check parity, calibrate, quantise/convert, write the manifest; returns the manifest.

    Parity runs on `parity_data` sentences, else on the `default_sentences` file when it exists (`electric
    export` passes ../shared/data/glue/sst2/dev.tsv), else on built-in ones. A discriminator is calibrated
    (electric.inference.calibration) when `calibrate` and a generator is found: `generator`, else RUN/generator
    beside RUN/discriminator; on `calibration_data` sentences (default: as for parity). Without one the
    manifest's calibration is null and detect returns sigma(s_t).

    Raises CheckpointError (bad input), ExportError (failed step, existing output) or ParityError.
    Nothing is left in `out_dir` (or the Triton repository) unless everything succeeded."""
    if quantize not in (None, "int8"):
        raise ExportError(f"--quantize {quantize!r}: only int8 is supported")
    if not 7 <= opset <= 21:
        raise ExportError(f"--opset {opset}: expected 7..21 (17 recommended)")
    src, config, kind, arch = inspect_checkpoint(model_dir)
    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise ExportError(f"output directory {str(out)!r} already exists (pass --overwrite to replace it)")
    if out.resolve() == src.resolve():
        raise ExportError("--out must differ from --model")
    tname = triton_model_name or triton_name(out)
    if triton_repo is not None and (Path(triton_repo) / tname).exists() and not overwrite:
        raise ExportError(f"Triton model {str(Path(triton_repo) / tname)!r} already exists "
                          "(pass --overwrite to replace it)")
    tokenizer = load_tokenizer(src)
    max_length = int(config.get("max_position_embeddings", 512))
    gen_dir = calibration_generator(src, config, kind, calibrate, generator, log)
    sentences, parity_source = parity_sentences(parity_data, default=default_sentences)
    batches = parity_batches(tokenizer, sentences, max_length, pairs=kind != "discriminator")

    t0 = time.perf_counter()
    with atomic_dir(out) as tmp:
        model = load_for_export(src, arch, attn_implementation)
        fp32_path = tmp / FILES["fp32"]
        try:
            export_onnx(model, fp32_path, opset=opset, exporter=exporter, pad_token_id=tokenizer.pad_token_id)
        except Exception as e:  # noqa: BLE001
            raise ExportError(f"ONNX export failed: {type(e).__name__}: {e}") from e
        log(f"exported {arch} ({kind}) to ONNX opset {opset} in {time.perf_counter() - t0:.1f}s")
        del model

        # the reference is the torch path users get (TorchBackend), not the eager copy we traced
        reference = TorchBackend(src, device="cpu")
        ref = run_batches(reference.run, batches)
        del reference
        fp32_runner = OnnxRunner(fp32_path, max_length=max_length, pad_token_id=tokenizer.pad_token_id,
                                 providers=[CPU], threads=threads)
        fp32 = run_batches(fp32_runner.run, batches)
        stats = compare(kind, batches, ref, fp32)
        parity: dict = {
            "sentences": len(sentences), "source": parity_source,
            "shapes": [list(b["input_ids"].shape) for b in batches], "export_shape": list(EXPORT_SHAPE),
            "fp32": {"max_abs_diff": stats["max_abs_diff"], "tolerance": FP32_TOLERANCE, "provider": CPU,
                     "reference": "torch (transformers, CPU, fp32)"},
        }
        log(f"parity fp32 vs torch: max |diff| {stats['max_abs_diff']:.2e} on {len(sentences)} sentences, "
            f"shapes {parity['shapes']}")
        if not stats["max_abs_diff"] <= FP32_TOLERANCE:
            raise ParityError(f"fp32 ONNX logits differ from torch by {stats['max_abs_diff']:.3g} "
                              f"(> {FP32_TOLERANCE}); the export is wrong, not saved")

        calibration = None
        if gen_dir is not None:
            sents, source = sentences_or_default(calibration_data, MAX_SENTENCES, "calibration data",
                                                 default_sentences)
            calibration = fit_calibration(fp32_runner.run, tokenizer, gen_dir, sents, source,
                                          max_length=min(max_length, PARITY_MAX_TOKENS), log=log)

        files = {"fp32": FILES["fp32"]}
        variants = []
        if quantize == "int8":
            quantize_int8(fp32_path, tmp / FILES["int8"])
            variants.append(("int8", [CPU]))
        if fp16:
            convert_fp16(fp32_path, tmp / FILES["fp16"])
            variants.append(("fp16", [CUDA, CPU]))
        for precision, providers in variants:
            path = tmp / FILES[precision]
            files[precision] = FILES[precision]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # no CUDA here: measured on CPU, and the manifest says so
                runner = OnnxRunner(path, max_length=max_length, pad_token_id=tokenizer.pad_token_id,
                                    providers=select_providers(providers), threads=threads)
            got = run_batches(runner.run, batches)
            st = compare(kind, batches, fp32, got)
            ok = st["spearman"] >= MIN_SPEARMAN
            parity[precision] = {
                "max_abs_diff": st["max_abs_diff"], "spearman": st["spearman"],
                "spearman_of": "sentence PLL" if kind == "discriminator" else "logits",
                **({"spearman_per_token": st["spearman_per_token"]} if "spearman_per_token" in st else {}),
                "reference": "onnx fp32", "min_spearman": MIN_SPEARMAN, "passed": bool(ok),
                "forced": bool(not ok and force), "provider": runner.providers[0],
                "size_mb": round(path.stat().st_size / 2**20, 2),
            }
            per_token = f" (per token {st['spearman_per_token']:.4f})" if "spearman_per_token" in st else ""
            log(f"parity {precision} vs fp32 on {runner.providers[0]}: max |diff| {st['max_abs_diff']:.3g}, "
                f"Spearman {st['spearman']:.4f}{per_token}" + ("" if ok else f" < {MIN_SPEARMAN}"))
            if not ok and not force:
                raise ParityError(f"{precision} sentence-score Spearman vs fp32 is {st['spearman']:.4f} "
                                  f"(< {MIN_SPEARMAN}); not saved (pass --force to keep it anyway)")
            if not ok:
                log(f"warning: keeping the {precision} model despite low parity (--force)")

        for f in ("config.json", *TOKENIZER_FILES, *TOKENIZER_EXTRA):
            if (src / f).is_file():
                shutil.copyfile(src / f, tmp / f)
        load_tokenizer(tmp)  # the copy must load on its own
        manifest = build_manifest(src, config, kind, arch, max_length, opset, files, parity, exporter,
                                  attn_implementation, calibration)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if triton_repo is not None:
            precision = "fp16" if "fp16" in files else "int8" if "int8" in files else "fp32"
            path = write_triton(Path(triton_repo), tname, tmp / files[precision], precision, overwrite)
            log(f"wrote Triton model {path} ({precision})")
    log(f"wrote {out} ({', '.join(files.values())}) in {time.perf_counter() - t0:.1f}s")
    return manifest


def build_manifest(src: Path, config: dict, kind: Kind, arch: str, max_length: int, opset: int,
                   files: dict, parity: dict, exporter: str, attn_implementation: str,
                   calibration: dict | None = None) -> dict:
    """electric.json: everything the runtime and server need to know about this directory."""
    versions = _versions()
    id2label = config.get("id2label") or {}
    labels = [id2label[k] for k in sorted(id2label, key=int)] if kind != "discriminator" and id2label else None
    return {
        "format": "electric-onnx",
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "architecture": arch,
        "labels": labels,
        "problem_type": config.get("problem_type"),
        "max_length": max_length,
        "opset": opset,
        "precision": {"cpu": "int8" if "int8" in files else "fp32", "cuda": "fp16" if "fp16" in files else "fp32"},
        "files": files,
        "inputs": list(INPUT_NAMES),
        "output": OUTPUT_NAME,
        "source": {"path": str(src.resolve()), "sha256": checkpoint_hash(src)},
        "exporter": {"name": "torch.onnx TorchScript (dynamo=False)" if exporter == "legacy"
                     else "torch.onnx torch.export (dynamo=True)", "attn_implementation": attn_implementation},
        "versions": versions,
        "onnxruntime": versions["onnxruntime"],
        "parity": parity,
        # discriminators: P(replaced) = sigmoid(scale * s + bias) (electric.inference.calibration); null = raw sigmoid(s)
        **({"calibration": calibration} if kind == "discriminator" else {}),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
