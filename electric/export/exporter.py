"""Export an ELECTRA checkpoint to ONNX, check parity, quantise, and write the runtime's manifest.

    manifest = export_model("runs/electric-tiny/discriminator", "runs/electric-tiny/onnx",
                            ExportOptions(quantize="int8"))

The output directory (written to a temporary directory and renamed into place, so it is complete or
absent) holds:
    model.onnx          fp32 graph: inputs input_ids, attention_mask, token_type_ids (int64, (B, T));
                        output logits (float32; (B, T) | (B, C) | (B, T, C)); B and T dynamic. Electric's cloze
                        model (RUN/generator of an Electric run): inputs input_ids, attention_mask; output
                        token_logprobs (B, T), log q(x_t | x_not_t) of each input token, gathered in the graph
    model.int8.onnx     with --quantize int8: int8 quantisation of the encoder's MatMuls (CPU): static (QDQ, activation
                        ranges calibrated at export on real text; a text scores the same in any batch), or dynamic
                        with --int8-method dynamic (batch-dependent); the manifest's `int8_method` says which
    model.fp16.onnx     with --fp16: fp16 weights and activations, fp32 inputs/outputs (CUDA)
    config.json, tokenizer files   copied from the checkpoint
    electric.json       the manifest (electric.checkpoint.ExportManifest)

How the graph is made: torch.onnx's TorchScript exporter (`dynamo=False`) on the transformers model
loaded with `attn_implementation="eager"`. Measured here against the torch.export-based exporter, SDPA
attention and onnxruntime's transformer optimizer (fused attention); this was fastest on CPU
(benchmarks/results/runtime.md). The cloze model goes through the torch.export-based exporter: the TorchScript
one writes its towers' boolean identity mask as a bool EyeLike, which onnxruntime cannot run.

Parity is checked on real sentences at shapes other than the export shape: fp32 must be within 1e-4
of torch (1e-3 for the cloze model's log-softmax: `fp32_tolerance`; else ParityError, always); int8/fp16 report the max logit difference and the Spearman
correlation with fp32 of sentence PLL (-sum of s_t over non-special tokens; the cloze model: the sum of its
log q; for classifiers and taggers, of the logits), and fail below 0.99 unless `force`.

A discriminator is also calibrated (electric.inference.calibration): Platt scaling p_t = sigmoid(scale * s_t + bias),
fitted on held-out sentences that the run's own generator (RUN/generator, or `generator`) corrupts as in
pretraining, so that detect's probabilities mean the same for ELECTRA and Electric; the manifest keeps
the two numbers, what they were fitted on and a held-out check.

`export_model` runs the steps in order - `plan_export` (check and resolve everything before writing), `export_fp32`,
`check_fp32_parity`, `calibrate_discriminator`, `add_variant` for int8 and fp16, `build_manifest` - on an
`ExportOptions` record; the work of each lives beside this module: `graph` (trace, optimise, quantise, fp16),
`parity` (sentences, batches, measures), `calibration`, `triton`, `manifest` (what the manifest records of the
output, the libraries and the checkpoint).
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from electric.checkpoint import (
    ARCHITECTURE_KINDS,
    FORMAT_VERSION,
    CheckpointError,
    ExportManifest,
    Kind,
    atomic_dir,
    check_creatable,
    require_local_dir,
    run_parts,
    trained_length,
    training_health,
)
from electric.export.calibration import MAX_SENTENCES, find_generator, fit_calibration
from electric.export.errors import ExportError, ParityError
from electric.export.graph import (
    DEFAULT_OPSET,
    EXPORT_SHAPE,
    KEEP_FP32,
    convert_fp16,
    export_onnx,
    ffn_outputs,
    load_for_export,
    quantize_int8_dynamic,
    quantize_int8_fused,
    quantize_int8_static,
)
from electric.export.manifest import OUTPUT_MEANINGS, checkpoint_hash, export_versions
from electric.export.parity import (
    PARITY_MAX_TOKENS,
    compare,
    parity_batches,
    parity_sentences,
    run_batches,
    sentences_or_default,
)
from electric.export.triton import triton_name, write_triton
from electric.inference.backend import TorchBackend
from electric.inference.runtime import (
    CLOZE_INPUT_NAMES,
    CLOZE_OUTPUT_NAME,
    CPU,
    CUDA,
    INPUT_NAMES,
    OUTPUT_NAME,
    OnnxRunner,
    select_providers,
)
from electric.inference.scoring import METHODS_OF_KIND
from electric.tokenization import TOKENIZER_FILES, load_tokenizer

FP32_TOLERANCE = 1e-4  # max |ONNX fp32 - torch| over real tokens
# The cloze model's output is a log-softmax over the whole vocabulary inside the graph: its fp32 rounding grows with the
# range of the head's logits, i.e. with training (3.05e-4 at log q near 0 for all-MiniLM-L6-v2 adapted 30 minutes on
# WSJ text; 1.4e-5 to 6e-5 after 4 minutes on ATIS). A wrong graph is off by 1e-2 and more.
CLOZE_FP32_TOLERANCE = 1e-3


def fp32_tolerance(kind: Kind) -> float:
    """How far the fp32 graph may be from torch on any real token before the export is called wrong."""
    return CLOZE_FP32_TOLERANCE if kind == "cloze" else FP32_TOLERANCE
MIN_SPEARMAN = 0.99  # int8/fp16 vs fp32, sentence-level
FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx", "fp16": "model.fp16.onnx"}
VARIANT_PROVIDERS = {"int8": [CPU], "fp16": [CUDA, CPU]}  # where each precision's parity is measured, first found
# how the int8 graph is made: "plain" = the exported graph's MatMuls quantised; "fused" = onnxruntime's transformer
# optimizer first (fused Attention, SkipLayerNorm, BiasGelu), then its MatMuls and Attention quantised
INT8_GRAPHS = ("plain", "fused")
# how its activations are scaled: "static" = ranges calibrated at export (QDQ; batch-independent, the default);
# "dynamic" = by each batch's largest value at run time (a text's score moves with its batch-mates; the fused graph's)
INT8_METHODS = ("static", "dynamic")
STATIC_INT8_SENTENCES = (16, 256)  # the fewest and the most calibration sentences static int8 ranges are measured on
STATIC_INT8_BATCH = 32  # sentences per calibration batch
TOKENIZER_EXTRA = ("tokenizer_config.json", "special_tokens_map.json")
GENERATOR_HEADS = {"ElectraForMaskedLM"}  # masked LMs: scored with n passes on torch (mlm-pll), not exported
MODEL_TYPES = {"electra", "electric-cloze"}


# ---- what to export -----------------------------------------------------------------------------

@dataclass(frozen=True)
class ExportOptions:
    """How to export: what `electric export`'s flags set. Checked when made (ExportError); never changed after."""

    quantize: str | None = None  # "int8": also write model.int8.onnx (the CPU default)
    int8_graph: str = INT8_GRAPHS[0]  # how the int8 graph is made (INT8_GRAPHS)
    int8_method: str | None = None  # INT8_METHODS; None: static, dynamic for the fused graph (set when made)
    fp16: bool = False  # also write model.fp16.onnx (the CUDA default)
    opset: int = DEFAULT_OPSET  # 7..21; the torch.export-based exporter takes 18 at least
    exporter: str | None = None  # "legacy" (TorchScript) or "dynamo" (torch.export); None: legacy, dynamo for cloze
    attn_implementation: str = "eager"  # the attention traced
    force: bool = False  # keep an int8/fp16 graph below MIN_SPEARMAN (fp32 parity is never waived)
    overwrite: bool = False  # replace an existing output directory (and Triton model)
    parity_data: str | Path | None = None  # parity sentences, one a line (a .tsv: its `sentence` or first column)
    default_sentences: str | Path | None = None  # the text when none is given, if it exists; else built-in sentences
    threads: int | None = None  # onnxruntime threads for the parity checks
    calibrate: bool = True  # calibrate a discriminator when a generator is found
    generator: str | Path | None = None  # corrupts the calibration text; default RUN/generator beside the model
    calibration_data: str | Path | None = None  # calibration sentences; default as for parity
    triton_repo: str | Path | None = None  # also write a Triton model repository entry here
    triton_model_name: str | None = None  # its name; default the output folder's

    def __post_init__(self) -> None:
        if self.quantize not in (None, "int8"):
            raise ExportError(f"--quantize {self.quantize!r}: only int8 is supported")
        if self.int8_graph not in INT8_GRAPHS:
            raise ExportError(f"--int8-graph {self.int8_graph!r}: expected one of {', '.join(INT8_GRAPHS)}")
        if self.int8_method is None:  # the one place it is implied: the fused graph's Attention has no static form here
            object.__setattr__(self, "int8_method", "dynamic" if self.int8_graph == "fused" else "static")
        if self.int8_method not in INT8_METHODS:
            raise ExportError(f"--int8-method {self.int8_method!r}: expected one of {', '.join(INT8_METHODS)}")
        if self.int8_method == "static" and self.int8_graph == "fused":
            raise ExportError("--int8-graph fused is dynamic int8 only (its fused Attention is quantised at run time); "
                              "pass --int8-method dynamic or --int8-graph plain")
        if not 7 <= self.opset <= 21:
            raise ExportError(f"--opset {self.opset}: expected 7..21 (17 recommended)")

    @property
    def variants(self) -> tuple[str, ...]:
        """The precisions written beside fp32, in the order they are made and checked."""
        return (("int8",) if self.quantize == "int8" else ()) + (("fp16",) if self.fp16 else ())


# ---- the whole export ---------------------------------------------------------------------------

def export_model(model_dir: str | Path, out_dir: str | Path, options: ExportOptions | None = None, *,
                 log: Callable[[str], None] = print) -> ExportManifest:
    """Export fp32, check its parity, calibrate, add each precision variant, write the manifest; returns it.

    `options` (default: `ExportOptions()`): the exporter is legacy (TorchScript), dynamo (torch.export) for the
    cloze model (the only one it can export). Parity runs on `parity_data` sentences, else on the
    `default_sentences` file when it exists (`electric export` passes ../shared/data/glue/sst2/dev.tsv), else on
    built-in ones. A discriminator is calibrated (electric.inference.calibration) when `calibrate` and a generator
    is found: `generator`, else RUN/generator beside RUN/discriminator; on `calibration_data` sentences (default: as
    for parity). Without one the manifest's calibration is null and detect returns sigma(s_t).

    Raises CheckpointError (bad input), ExportError (failed step, existing output) or ParityError.
    Nothing is left in `out_dir` (or the Triton repository) unless everything succeeded."""
    plan = plan_export(model_dir, out_dir, options or ExportOptions(), log)
    t0 = time.perf_counter()
    with atomic_dir(plan.out) as tmp:
        fp32 = check_fp32_parity(plan, export_fp32(plan, tmp, log), log)
        calibration = calibrate_discriminator(plan, fp32.runner.run, log)
        parity = dict(fp32.parity)
        for precision in plan.options.variants:  # int8, fp16
            parity[precision] = add_variant(plan, precision, fp32, tmp, log)
        files = {p: FILES[p] for p in ("fp32", *plan.options.variants)}
        copy_model_files(plan.src, tmp)
        manifest = build_manifest(plan, files, parity, calibration)
        manifest.write(tmp)
        if plan.options.triton_repo is not None:
            add_triton_model(plan, tmp, files, log)
    log(f"wrote {plan.out} ({', '.join(files.values())}) in {time.perf_counter() - t0:.1f}s")
    for w in (manifest.training_health or {}).get("warnings", []):  # the manifest keeps them: /info shows them
        log(f"WARNING: the run that made this model ended saying {w}")
    return manifest


# ---- before anything is written -----------------------------------------------------------------

@dataclass(frozen=True)
class ExportPlan:
    """One checkpoint's export, resolved and checked before anything is written."""

    options: ExportOptions
    src: Path  # the checkpoint
    out: Path  # the output directory
    config: dict  # the checkpoint's config.json
    kind: Kind
    arch: str  # its head, of ARCHITECTURE_KINDS
    exporter: str  # "legacy" | "dynamo"
    opset: int  # the options', at least 18 for dynamo
    tokenizer: Any
    max_length: int  # the position table: the graph takes all of it
    trained: tuple[int, str]  # the length trained on and where that comes from (electric.checkpoint.trained_length)
    generator: Path | None  # corrupts the calibration text; None: not calibrated
    sentences: list[str]  # the parity sentences
    parity_source: str  # where they come from
    int8_batches: list[dict]  # static int8's calibration batches (real text, not the parity sentences); [] otherwise
    int8_source: str  # where their sentences come from
    batches: list[dict]  # their parity batches, at shapes other than the export shape
    triton_name: str


def plan_export(model_dir: str | Path, out_dir: str | Path, options: ExportOptions,
                log: Callable[[str], None]) -> ExportPlan:
    """Check the checkpoint, the exporter and the output directory; find the served length, the calibration
    generator and the parity batches."""
    src, config, kind, arch = inspect_checkpoint(model_dir)
    exporter, opset = choose_exporter(kind, options)
    out = Path(out_dir)
    tname = options.triton_model_name or triton_name(out)
    check_outputs(src, out, tname, options)
    tokenizer = load_tokenizer(src)
    max_length = int(config.get("max_position_embeddings", 512))  # the graph takes its whole position table
    trained, trained_from = trained_length(src, config)  # what the runtime and server take by default
    if trained < max_length:
        log(f"trained on {trained} of its {max_length} positions ({trained_from}): served with {trained} tokens by "
            f"default (electric serve --max-tokens-per-input serves more on purpose)")
    gen_dir = calibration_generator(src, config, kind, options.calibrate, options.generator, log)
    sentences, parity_source = parity_sentences(options.parity_data, default=options.default_sentences)
    pairs = kind in ("classifier", "tagger")
    batches = parity_batches(tokenizer, sentences, max_length, pairs)
    int8_batches: list[dict] = []
    int8_source = ""
    if options.quantize == "int8" and options.int8_method == "static":
        int8_batches, int8_source = static_int8_batches(options, tokenizer, sentences, max_length, pairs)
    return ExportPlan(options, src, out, config, kind, arch, exporter, opset, tokenizer, max_length,
                      (trained, trained_from), gen_dir, sentences, parity_source, int8_batches, int8_source, batches,
                      tname)


def static_int8_batches(options: ExportOptions, tokenizer, parity: list[str], max_length: int,
                        pairs: bool) -> tuple[list[dict], str]:
    """The batches static int8's activation ranges are measured on, and where their text comes from: up to
    STATIC_INT8_SENTENCES[1] sentences of the calibration text (`calibration_data`, else as for parity), those
    not among the parity sentences when enough remain. Too few is an ExportError naming --int8-method dynamic."""
    fewest, most = STATIC_INT8_SENTENCES
    sents, source = sentences_or_default(options.calibration_data, MAX_SENTENCES, "calibration data",
                                         options.default_sentences)
    seen = set(parity)
    held_out = [t for t in sents if t not in seen]
    sents = (held_out if len(held_out) >= fewest else sents)[:most]
    if len(sents) < fewest:
        raise ExportError(f"calibration text {source!r} holds {len(sents)} sentences, too few for static int8 "
                          f"activation ranges (at least {fewest}): give more with --calibration-data, or pass "
                          "--int8-method dynamic")
    sizes = [STATIC_INT8_BATCH] * -(-len(sents) // STATIC_INT8_BATCH)
    return parity_batches(tokenizer, sents, max_length, pairs, sizes), f"{source} ({len(sents)} sentences)"


def choose_exporter(kind: Kind, options: ExportOptions) -> tuple[str, int]:
    """(exporter, opset): the cloze model exports with torch.export only, whose lowest opset is 18."""
    if kind == "cloze":
        if options.exporter == "legacy":
            raise ExportError("the cloze model exports with the torch.export-based exporter only (the TorchScript "
                              "one writes a bool EyeLike, which onnxruntime cannot run)")
        if options.quantize == "int8" and options.int8_graph == "fused":
            raise ExportError("--int8-graph fused is onnxruntime's BERT fusion, not made for the cloze model's causal "
                              "towers; use --int8-graph plain")
    exporter = options.exporter or ("dynamo" if kind == "cloze" else "legacy")
    return exporter, max(options.opset, 18) if exporter == "dynamo" else options.opset


def check_outputs(src: Path, out: Path, tname: str, options: ExportOptions) -> None:
    """The output directory (and Triton model) can be written: new or `overwrite`, not the checkpoint, creatable."""
    if out.exists() and not options.overwrite:
        raise ExportError(f"output directory {str(out)!r} already exists (pass --overwrite to replace it)")
    if out.resolve() == src.resolve():
        raise ExportError("--out must differ from --model")
    check_creatable(out)  # before minutes of exporting into a directory that cannot be made
    triton = Path(options.triton_repo) / tname if options.triton_repo is not None else None
    if triton is not None and triton.exists() and not options.overwrite:
        raise ExportError(f"Triton model {str(triton)!r} already exists (pass --overwrite to replace it)")


def inspect_checkpoint(model_dir: str | Path) -> tuple[Path, dict, Kind, str]:
    """Validate a transformers ELECTRA checkpoint dir; returns (dir, config, kind, architecture)."""
    d = require_local_dir(model_dir, "model")
    cfg_path = d / "config.json"
    if "discriminator" in run_parts(d):
        raise CheckpointError(f"{str(d)!r} is a pretraining run directory: export its discriminator, "
                              f"{str(d / 'discriminator')!r} (or, of an Electric run, its cloze model for --method "
                              f"cloze, {str(d / 'generator')!r})")
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
            f"not support: export the discriminator (RUN/discriminator), Electric's cloze model or a fine-tuned "
            f"classifier/tagger (supported heads: {sorted(ARCHITECTURE_KINDS)})")
    if config.get("model_type") not in MODEL_TYPES:
        raise CheckpointError(f"{str(d)!r} holds model_type {config.get('model_type')!r}, not ELECTRA")
    arch = next((a for a in archs if a in ARCHITECTURE_KINDS), None)
    if arch is None:
        raise CheckpointError(f"{str(d)!r}: head {archs} is not supported (supported: {sorted(ARCHITECTURE_KINDS)})")
    if not any((d / f).is_file() for f in TOKENIZER_FILES):
        raise CheckpointError(f"{str(d)!r} has no tokenizer (tokenizer.json or vocab.txt); save the tokenizer "
                              "beside the model")
    return d, config, ARCHITECTURE_KINDS[arch], arch


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


# ---- the steps ----------------------------------------------------------------------------------

def export_fp32(plan: ExportPlan, tmp: Path, log: Callable[[str], None]) -> Path:
    """Step 1: trace the checkpoint into the fp32 graph, tmp/model.onnx."""
    t0 = time.perf_counter()
    model = load_for_export(plan.src, plan.arch, plan.options.attn_implementation)
    path = tmp / FILES["fp32"]
    try:
        export_onnx(model, path, opset=plan.opset, exporter=plan.exporter, pad_token_id=plan.tokenizer.pad_token_id)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"ONNX export failed: {type(e).__name__}: {e}") from e
    log(f"exported {plan.arch} ({plan.kind}) to ONNX opset {plan.opset} in {time.perf_counter() - t0:.1f}s")
    return path


@dataclass(frozen=True)
class Fp32Graph:
    """The fp32 graph, checked against torch: what calibration runs and each precision variant is compared with."""

    path: Path
    runner: OnnxRunner
    outputs: list[np.ndarray]  # on the parity batches
    parity: dict  # the manifest's parity record so far: the sentences, their shapes and fp32 vs torch


def check_fp32_parity(plan: ExportPlan, path: Path, log: Callable[[str], None]) -> Fp32Graph:
    """Step 2: the fp32 graph against torch on the parity batches; ParityError past `fp32_tolerance`, always."""
    # the reference is the torch path users get (TorchBackend), not the eager copy we traced
    ref = run_batches(TorchBackend(plan.src, device="cpu").run, plan.batches)
    runner = OnnxRunner(path, max_length=plan.max_length, pad_token_id=plan.tokenizer.pad_token_id,
                        providers=[CPU], threads=plan.options.threads)
    outputs = run_batches(runner.run, plan.batches)
    stats = compare(plan.kind, plan.batches, ref, outputs)
    tolerance = fp32_tolerance(plan.kind)
    parity: dict = {
        "sentences": len(plan.sentences), "source": plan.parity_source,
        "shapes": [list(b["input_ids"].shape) for b in plan.batches], "export_shape": list(EXPORT_SHAPE),
        "fp32": {"max_abs_diff": stats["max_abs_diff"], "tolerance": tolerance, "provider": CPU,
                 "reference": "torch (transformers, CPU, fp32)"},
    }
    log(f"parity fp32 vs torch: max |diff| {stats['max_abs_diff']:.2e} on {len(plan.sentences)} sentences, "
        f"shapes {parity['shapes']}")
    if not stats["max_abs_diff"] <= tolerance:
        raise ParityError(f"fp32 ONNX logits differ from torch by {stats['max_abs_diff']:.3g} "
                          f"(> {tolerance:g}); the export is wrong, not saved")
    return Fp32Graph(path, runner, outputs, parity)


def calibrate_discriminator(plan: ExportPlan, run: Callable, log: Callable[[str], None]) -> dict | None:
    """Step 3: a discriminator's Platt scaling, fitted on the fp32 graph's logits (`run`) over text the generator
    corrupts; None when there is no generator."""
    if plan.generator is None:
        return None
    sents, source = sentences_or_default(plan.options.calibration_data, MAX_SENTENCES, "calibration data",
                                         plan.options.default_sentences)
    return fit_calibration(run, plan.tokenizer, plan.generator, sents, source,
                           max_length=min(plan.trained[0], PARITY_MAX_TOKENS), log=log)


def make_variant(plan: ExportPlan, precision: str, fp32_path: Path, path: Path) -> None:
    """The int8 graph (static, or dynamic of the plain or fused graph: `int8_method`, `int8_graph`) or the fp16 one,
    from the fp32 graph."""
    if precision == "fp16":
        convert_fp16(fp32_path, path)
    elif plan.options.int8_method == "static":
        quantize_int8_static(fp32_path, path, plan.int8_batches)
    elif plan.options.int8_graph == "fused":
        quantize_int8_fused(fp32_path, path, plan.config)
    else:
        quantize_int8_dynamic(fp32_path, path)


def add_variant(plan: ExportPlan, precision: str, fp32: Fp32Graph, tmp: Path, log: Callable[[str], None]) -> dict:
    """Step 4, once per precision (int8, fp16): make its graph and compare it with fp32 - the Spearman of sentence
    scores must reach MIN_SPEARMAN unless `force` (ParityError); returns its parity record. A static int8 graph
    that misses it is made once more with the FFN output MatMuls kept fp32 (`retry_static_int8`)."""
    path = tmp / FILES[precision]
    make_variant(plan, precision, fp32.path, path)
    st, provider = variant_parity(plan, precision, path, fp32)
    ok, force = st["spearman"] >= MIN_SPEARMAN, plan.options.force
    how = f" ({plan.options.int8_method})" if precision == "int8" else ""
    log(variant_line(precision + how, provider, st, ok))
    retried = None
    if not ok and precision == "int8" and plan.options.int8_method == "static":
        retried = retry_static_int8(plan, fp32, tmp, st, log)
        if retried is not None:
            st, provider, ok = retried["parity"], retried["provider"], True
            shutil.move(retried["path"], path)
    if not ok and not force:
        also = " (and with the FFN outputs in fp32 it missed too)" if precision == "int8" and \
            plan.options.int8_method == "static" else ""
        raise ParityError(f"{precision} sentence-score Spearman vs fp32 is {st['spearman']:.4f} "
                          f"(< {MIN_SPEARMAN}){also}; not saved (pass --force to keep it anyway)", st["spearman"])
    if not ok:
        log(f"warning: keeping the {precision} model despite low parity (--force)")
    return {
        "max_abs_diff": st["max_abs_diff"], "spearman": st["spearman"],
        "spearman_of": {"discriminator": "sentence PLL", "cloze": "sentence cloze score"}.get(plan.kind, "logits"),
        **({"spearman_per_token": st["spearman_per_token"]} if "spearman_per_token" in st else {}),
        "reference": "onnx fp32", "min_spearman": MIN_SPEARMAN, "passed": bool(ok),
        "forced": bool(not ok and force), "provider": provider,
        **(int8_record(plan) if precision == "int8" else {}),
        **({"kept_fp32": "the FFN output MatMuls", "spearman_all_int8": retried["first"]} if retried else {}),
        "size_mb": round(path.stat().st_size / 2**20, 2),
    }


def variant_parity(plan: ExportPlan, precision: str, path: Path, fp32: Fp32Graph) -> tuple[dict, str]:
    """A variant's graph against fp32 on the parity batches (`compare`), and the provider it ran on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA here: measured on CPU, and the manifest says so
        runner = OnnxRunner(path, max_length=plan.max_length, pad_token_id=plan.tokenizer.pad_token_id,
                            providers=select_providers(VARIANT_PROVIDERS[precision]), threads=plan.options.threads)
    return compare(plan.kind, plan.batches, fp32.outputs, run_batches(runner.run, plan.batches)), runner.providers[0]


def variant_line(what: str, provider: str, st: dict, ok: bool) -> str:
    per_token = f" (per token {st['spearman_per_token']:.4f})" if "spearman_per_token" in st else ""
    return (f"parity {what} vs fp32 on {provider}: max |diff| {st['max_abs_diff']:.3g}, "
            f"Spearman {st['spearman']:.4f}{per_token}" + ("" if ok else f" < {MIN_SPEARMAN}"))


def retry_static_int8(plan: ExportPlan, fp32: Fp32Graph, tmp: Path, first: dict,
                      log: Callable[[str], None]) -> dict | None:
    """The static int8 graph again with each layer's FFN output MatMul kept fp32 - where an adapted MiniLM's int8
    graph lost the most rank (research/int8_detector: Spearman 0.987 -> 0.995; a request 1.4-1.7x the all-int8 time,
    49-71% of fp32's) - when the first missed MIN_SPEARMAN; None when this one misses too."""
    path = tmp / "model.int8-ffn-fp32.onnx"
    layers = int(plan.config.get("num_hidden_layers", 0))
    quantize_int8_static(fp32.path, path, plan.int8_batches, keep_fp32=(*KEEP_FP32, *ffn_outputs(layers)))
    st, provider = variant_parity(plan, "int8", path, fp32)
    ok = st["spearman"] >= MIN_SPEARMAN
    log(variant_line("int8 (static, the FFN outputs fp32)", provider, st, ok))
    if not ok:
        path.unlink()
        return None
    return {"path": path, "parity": st, "provider": provider, "first": first["spearman"]}


def int8_record(plan: ExportPlan) -> dict:
    """What the int8 parity record adds: how the graph was made and, for static int8, what its ranges came from."""
    method = plan.options.int8_method
    ranges = {"ranges_from": plan.int8_source, "ranges": "min-max", "weights": "int8 per channel",
              "activations": "uint8 per tensor"} if method == "static" else {}
    return {"graph": plan.options.int8_graph, "method": method, **ranges}


def copy_model_files(src: Path, tmp: Path) -> None:
    """config.json and the tokenizer's files beside the graphs; the copied tokenizer must load on its own."""
    for f in ("config.json", *TOKENIZER_FILES, *TOKENIZER_EXTRA):
        if (src / f).is_file():
            shutil.copyfile(src / f, tmp / f)
    load_tokenizer(tmp)


def build_manifest(plan: ExportPlan, files: dict[str, str], parity: dict, calibration: dict | None) -> ExportManifest:
    """Step 5: electric.json, everything the runtime and server need to know about this directory."""
    versions = export_versions()
    id2label = plan.config.get("id2label") or {}
    labels = [id2label[k] for k in sorted(id2label, key=int)] if plan.kind in ("classifier", "tagger") and id2label \
        else None
    cloze = plan.kind == "cloze"
    calibrated: dict[str, Any] = {"calibration": calibration} if plan.kind == "discriminator" else {}  # others: no key
    return ExportManifest(
        format="electric-onnx",
        format_version=FORMAT_VERSION,
        kind=plan.kind,
        architecture=plan.arch,
        labels=labels,
        problem_type=plan.config.get("problem_type"),
        max_length=plan.max_length,
        trained_length=plan.trained[0],
        trained_length_from=plan.trained[1],
        opset=plan.opset,
        precision={"cpu": "int8" if "int8" in files else "fp32", "cuda": "fp16" if "fp16" in files else "fp32"},
        int8_method=plan.options.int8_method if "int8" in files else None,
        files=files,
        inputs=list(CLOZE_INPUT_NAMES if cloze else INPUT_NAMES),
        output=CLOZE_OUTPUT_NAME if cloze else OUTPUT_NAME,
        output_meaning=OUTPUT_MEANINGS[plan.kind],
        scoring_methods=list(METHODS_OF_KIND.get(plan.kind, ())),
        source={"path": str(plan.src.resolve()), "sha256": checkpoint_hash(plan.src)},
        exporter={"name": "torch.onnx TorchScript (dynamo=False)" if plan.exporter == "legacy"
                  else "torch.onnx torch.export (dynamo=True)",
                  "attn_implementation": "sdpa" if cloze else plan.options.attn_implementation},  # cloze: SDPA
        versions=versions,
        onnxruntime=versions["onnxruntime"],
        parity=parity,
        training_health=training_health(plan.src),  # its warnings: below chance, worse than its start
        **calibrated,
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )


def add_triton_model(plan: ExportPlan, tmp: Path, files: dict, log: Callable[[str], None]) -> None:
    """The Triton model repository entry, of the fp16 graph if there is one, else int8, else fp32."""
    precision = "fp16" if "fp16" in files else "int8" if "int8" in files else "fp32"
    assert plan.options.triton_repo is not None  # called only when a repository was asked for
    path = write_triton(Path(plan.options.triton_repo), plan.triton_name, tmp / files[precision], precision,
                        plan.options.overwrite)
    log(f"wrote Triton model {path} ({precision})")
