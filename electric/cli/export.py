"""`electric export`: a transformers ELECTRA checkpoint -> an ONNX directory for the runtime and server.

    electric export --model runs/electric-tiny/discriminator --out runs/electric-tiny/onnx --quantize int8
    electric export ... --quantize int8 --int8-method dynamic   # batch-dependent int8, as before
    electric export --model runs/electric-tiny/generator --out runs/electric-tiny/onnx-cloze   # --method cloze
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from electric.checkpoint import CheckpointError, MissingExtra, install_hint, require_extra

# what the export imports of its extra (pyproject.toml `export`: torch, onnx and the metrics of the parity check)
EXPORT_MODULES = ("torch", "transformers", "onnx", "onnxscript", "scipy", "sklearn")


def default_sentences() -> Path:
    """The parity and calibration text when none is given: glue/sst2/dev.tsv of the shared data
    (electric.shared_data: $ELECTRIC_SHARED_DATA, else ../shared/data); the export falls back to built-in
    sentences without it."""
    from electric.shared_data import shared_data_dir

    return shared_data_dir() / "glue" / "sst2" / "dev.tsv"


def add_parser(subparsers) -> argparse.ArgumentParser:
    ap = subparsers.add_parser(
        "export", help="export a checkpoint to ONNX (+ int8 / fp16, Triton layout) with parity checks (needs the "
                       "export extra)",
        description="Export an ELECTRA discriminator, Electric's two-tower cloze model (RUN/generator of an Electric "
                    "run: a graph whose output is log q(x_t | x without t) of each input token, for --method cloze), "
                    "a sequence classifier or a token tagger to ONNX with dynamic batch and sequence axes, check parity against torch on real sentences, and write the "
                    "tokenizer, config.json and the electric.json manifest beside the graph(s). The output "
                    "directory is written completely or not at all. Needs the export extra (torch, transformers, "
                    f"onnx), which a serving install leaves out: {install_hint('export')}.")
    ap.add_argument("--model", required=True, metavar="DIR",
                    help="transformers checkpoint directory (ElectraForPreTraining / ElectricForClozeLM / "
                         "ElectraForSequenceClassification / ElectraForTokenClassification, with its tokenizer)")
    ap.add_argument("--out", required=True, metavar="DIR", help="output directory (must not exist)")
    ap.add_argument("--quantize", choices=("int8",), help="also write an int8-quantised graph (the CPU runtime's "
                    "default when present)")
    ap.add_argument("--int8-method", choices=("static", "dynamic"),
                    help="how int8 scales activations: static = ranges calibrated at export on the calibration text, "
                         "a text scores the same in any batch (default); dynamic = by each batch's largest value at "
                         "run time, so a text's score moves a little with its batch-mates (the default of "
                         "--int8-graph fused, which is dynamic only)")
    ap.add_argument("--int8-graph", choices=("plain", "fused"), default="plain",
                    help="how the int8 graph is made: plain = the exported graph's MatMuls quantised (default); "
                         "fused = onnxruntime's transformer optimizer first (fused Attention, SkipLayerNorm, BiasGelu), "
                         "then its MatMuls and Attention quantised (BENCHMARKS.md compares the two)")
    ap.add_argument("--fp16", action="store_true", help="also write an fp16 graph (the CUDA runtime's default)")
    ap.add_argument("--opset", type=int, default=17, metavar="N", help="ONNX opset (default 17)")
    ap.add_argument("--parity-data", metavar="FILE",
                    help="sentences for the parity check, one a line (a .tsv: its `sentence` or first column); "
                         "default ../shared/data/glue/sst2/dev.tsv, else built-in sentences")
    ap.add_argument("--force", action="store_true",
                    help="keep an int8/fp16 graph whose Spearman vs fp32 is below 0.99 (fp32 parity is never waived)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out (and Triton model)")
    ap.add_argument("--triton-repo", metavar="DIR",
                    help="also write DIR/NAME/config.pbtxt and DIR/NAME/1/model.onnx for NVIDIA Triton "
                         "(the fp16 graph if exported, else int8, else fp32)")
    ap.add_argument("--triton-name", metavar="NAME", help="Triton model name (default: the --out folder's name)")
    ap.add_argument("--threads", type=int, metavar="N", help="onnxruntime threads for the parity check")
    c = ap.add_argument_group("calibration (discriminators): detect's P(replaced) = sigmoid(scale * s + bias)")
    c.add_argument("--generator", metavar="DIR",
                   help="the generator that corrupts the calibration text (default: RUN/generator beside "
                        "RUN/discriminator; without one the export is not calibrated)")
    c.add_argument("--calibration-data", metavar="FILE",
                   help="held-out sentences, one a line (a .tsv: its `sentence` or first column), also what static "
                        "int8's activation ranges are measured on (any model kind); default as --parity-data")
    c.add_argument("--no-calibration", action="store_true",
                   help="do not calibrate: detect returns the raw sigmoid(s_t)")
    ap.set_defaults(func=run)
    return ap


def run(args: argparse.Namespace) -> int:
    try:  # as every command: one line naming the extra, exit status 2
        require_extra("electric export", EXPORT_MODULES, "export")
    except MissingExtra as e:
        print(f"electric export: error: {e}", file=sys.stderr)
        return 2
    from transformers.utils import logging as hf_logging

    from electric.export.exporter import ExportError, ExportOptions, export_model

    hf_logging.disable_progress_bar()  # one line per step is enough on a terminal
    try:
        options = ExportOptions(quantize=args.quantize, int8_graph=args.int8_graph, int8_method=args.int8_method,
                                fp16=args.fp16, opset=args.opset,
                                force=args.force, overwrite=args.overwrite, parity_data=args.parity_data,
                                default_sentences=default_sentences(), threads=args.threads,
                                calibrate=not args.no_calibration, generator=args.generator,
                                calibration_data=args.calibration_data, triton_repo=args.triton_repo,
                                triton_model_name=args.triton_name)
        export_model(args.model, args.out, options, log=lambda msg: print(msg, file=sys.stderr))
    except (CheckpointError, ExportError) as e:
        print(f"electric export: error: {e}", file=sys.stderr)
        return 1
    return 0
