"""Making the graphs: the transformers model traced by torch.onnx (TorchScript exporter, eager attention; Electric's
cloze model through the torch.export-based exporter), onnxruntime's transformer optimizer, int8 quantisation of the
encoder's MatMuls (static QDQ, the default, or dynamic), fp16 conversion."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from electric.checkpoint import (
    ARCHITECTURE_KINDS,
)
from electric.export.errors import ExportError
from electric.inference.cloze import ClozeTokenLogProbs, load_cloze_model
from electric.inference.runtime import CLOZE_INPUT_NAMES, CLOZE_OUTPUT_NAME, INPUT_NAMES, OUTPUT_NAME

DEFAULT_OPSET = 17
EXPORT_SHAPE = (2, 16)  # the traced example's (B, T); row 2 is padded so the mask path is traced
# int8 leaves these (module paths, from the node name or the exporter's namespace) in fp32: heads (the cloze
# model's cloze_head and tied vocabulary layer too) and the embedding projection
KEEP_FP32 = ("/discriminator_predictions/", "/classifier/", "/embeddings_project/", "/cloze_head/", "/lm_head/")


class LogitsOnly(torch.nn.Module):
    """A transformers model with positional inputs and one output, `logits`: the graph's signature."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):  # each (B, T) int64
        return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits


def load_for_export(model_dir: Path, arch: str, attn_implementation: str = "eager"):
    """The module to trace: the transformers head, or for Electric's cloze model `ClozeTokenLogProbs` (its
    (B, T) log q(x_t | x_not_t), gathered inside the graph)."""
    import transformers

    if ARCHITECTURE_KINDS.get(arch) == "cloze":
        return ClozeTokenLogProbs(load_cloze_model(model_dir)).eval()

    from electric.modeling.pre_layer_norm import require_post_layer_norm

    require_post_layer_norm(model_dir, "the ONNX export")
    from electric.modeling.loading import load_model

    return load_model(model_dir, getattr(transformers, arch), torch.float32, attn_implementation=attn_implementation)


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
    """Write `model` (a transformers ELECTRA head, or `ClozeTokenLogProbs`) to `path` with dynamic batch and
    sequence axes.

    exporter: "legacy" = TorchScript exporter (dynamo=False), "dynamo" = torch.export-based exporter."""
    # eval() on the wrapper too: the exporter restores the wrapper's mode afterwards, and a fresh Module
    # is in training mode, which would silently switch dropout on in `model` for everyone after us.
    cloze = isinstance(model, ClozeTokenLogProbs)
    wrapper = model.eval() if cloze else LogitsOnly(model).eval()
    inputs, output = (CLOZE_INPUT_NAMES, CLOZE_OUTPUT_NAME) if cloze else (INPUT_NAMES, OUTPUT_NAME)
    args = example_inputs((model.model if cloze else model).config.vocab_size, pad_token_id)[: len(inputs)]
    classifier = ARCHITECTURE_KINDS.get(type(model).__name__) == "classifier"
    out_axes = {0: "batch"} if classifier else {0: "batch", 1: "sequence"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
        if exporter == "legacy":
            axes = {name: {0: "batch", 1: "sequence"} for name in inputs}
            axes[output] = out_axes
            torch.onnx.export(wrapper, args, str(path), input_names=list(inputs), output_names=[output],
                              dynamic_axes=axes, opset_version=opset, do_constant_folding=True, dynamo=False)
        elif exporter == "dynamo":
            batch, seq = torch.export.Dim("batch", min=1, max=4096), torch.export.Dim("sequence", min=2, max=4096)
            shapes = {name: {0: batch, 1: seq} for name in inputs}
            registry_log = logging.getLogger("torch.onnx._internal.exporter._registration")
            level = registry_log.level
            registry_log.setLevel(logging.ERROR)  # "torchvision is not installed": ops no ELECTRA graph has
            try:
                program = torch.onnx.export(wrapper, args, input_names=list(inputs), output_names=[output],
                                            dynamic_shapes=shapes, opset_version=max(opset, 18), dynamo=True,
                                            optimize=True, verbose=False)
            finally:
                registry_log.setLevel(level)
            if program is None:
                raise ExportError(f"torch.onnx.export (dynamo) returned no program for {path.name}")
            program.save(str(path))
        else:
            raise ValueError(f"exporter {exporter!r}: expected 'legacy' or 'dynamo'")


def optimize_transformer(src: Path, dst: Path, config: dict) -> dict[str, int]:
    """onnxruntime's BERT optimizer (fused Attention, SkipLayerNorm, BiasGelu). Measured, not the default.
    Returns how many of each fused operator it made (its own statistics: {"Attention": 2, ...})."""
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(str(src), model_type="bert", num_heads=config["num_attention_heads"],
                           hidden_size=config["hidden_size"], opt_level=1)
    model.save_model_to_file(str(dst))
    return {op: int(n) for op, n in model.get_fused_operator_statistics().items()}


class _NoPreprocessAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


@contextlib.contextmanager
def _without_preprocess_advice() -> Iterator[None]:
    """Drop onnxruntime's "Please consider to run pre-processing before quantization" (a root-logger WARNING
    for every model not run through quant_pre_process): skipping it is deliberate (measured within noise or
    slower, benchmarks/archive/runtime.md; `preprocess=True` runs it), so the advice would only look like a failure."""
    advice = _NoPreprocessAdvice()
    logging.getLogger().addFilter(advice)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(advice)


def module_path(node) -> str:
    """Where an ONNX node comes from, as "/a/b/": its name (the TorchScript exporter names nodes by module path,
    e.g. "/model/lm_head/MatMul"), then the modules of the torch.export-based exporter's "namespace" metadata
    (its node names are "node_MatMul_12")."""
    namespace = next((p.value for p in node.metadata_props if p.key == "namespace"), "")
    modules = [seg.split(":")[0].strip() for seg in namespace.split("/")]
    return f"{node.name} /" + "/".join(m.replace(".", "/") for m in modules if m) + "/"


def weight_matmuls(graph, keep_fp32: Sequence[str] = KEEP_FP32) -> list[str]:
    """The names of the MatMul/Gemm nodes that multiply by a weight (an initializer), less those under `keep_fp32`:
    what static int8 quantises (the attention's activation x activation MatMuls stay fp32, as in dynamic int8)."""
    weights = {i.name for i in graph.initializer}
    return [n.name for n in graph.node if n.op_type in ("MatMul", "Gemm") and any(i in weights for i in n.input)
            and not any(k in module_path(n) for k in keep_fp32)]


INT8_RANGES = ("minmax", "percentile", "entropy")


def ffn_outputs(layers: int) -> tuple[str, ...]:
    """The module paths of the encoder's FFN output MatMuls (layer.i.output.dense), as either exporter names them:
    where a static int8 graph loses the most rank (research/int8_detector), kept fp32 when the first graph fails."""
    return tuple(f"/layer{sep}{i}/output/dense/" for i in range(layers) for sep in (".", "/"))  # how static int8 turns calibration activations into ranges


def quantize_int8_static(src: Path, dst: Path, batches: Sequence[Mapping[str, np.ndarray]], *,
                         keep_fp32: Sequence[str] = KEEP_FP32, per_channel: bool = True,
                         ranges: str = "minmax") -> None:
    """Static int8 quantisation of the encoder's weight MatMuls (`weight_matmuls`), the default int8: a QDQ graph
    with int8 weights per output channel (`per_channel`; else one scale a matrix) and uint8 inputs (outputs stay
    fp32) whose ranges (`ranges`: min-max, the default; or onnxruntime's 99.999th percentile or entropy of their
    histograms) are measured here, once, by running `batches` (real text: dicts of (B, T) int64 inputs; extra keys
    are ignored) through `src`.

    Fixed ranges make each row's output independent of its batch-mates: the same text scores the same alone and in
    any batch (tests/test_int8_determinism.py). Activations beyond the calibrated range are clipped to it."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    if ranges not in INT8_RANGES:
        raise ValueError(f"ranges must be one of {INT8_RANGES}, got {ranges!r}")
    method = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
              "entropy": CalibrationMethod.Entropy}[ranges]
    graph = onnx.load(str(src), load_external_data=False).graph
    inputs = [i.name for i in graph.input]
    nodes = weight_matmuls(graph, keep_fp32)
    if not nodes:
        raise ExportError(f"static int8 of {src.name}: no weight MatMul to quantise")

    feeds = [{k: np.asarray(b[k], dtype=np.int64) for k in inputs} for b in batches]
    if ranges != "minmax":  # the histogram calibrators stack their batches: one shape for all, padded with 0s
        rows, cols = (max(f[inputs[0]].shape[d] for f in feeds) for d in (0, 1))
        feeds = [{k: np.pad(v, ((0, rows - v.shape[0]), (0, cols - v.shape[1]))) for k, v in f.items()} for f in feeds]

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(feeds)

        def get_next(self) -> dict | None:
            return next(self.feeds, None)

    try:
        with _without_preprocess_advice():
            quantize_static(str(src), str(dst), Batches(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            op_types_to_quantize=["MatMul", "Gemm"], nodes_to_quantize=nodes,
                            calibrate_method=method,
                            # MatMul outputs stay fp32 (no Q after them): onnxruntime then fuses each DQ -> MatMul into
                            # MatMulIntegerToFloat, the int8 GEMM dynamic int8 uses; requantised outputs (QLinearMatMul)
                            # measured slower and further from fp32 (benchmarks/archive/runtime.md)
                            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT,
                                           "OpTypesToExcludeOutputQuantization": ["MatMul", "Gemm"]})
    except Exception as e:  # noqa: BLE001 - any library failure is one clear error
        raise ExportError(f"int8 quantisation of {src.name} failed: {type(e).__name__}: {e}") from e
    if not dst.is_file():
        raise ExportError(f"int8 quantisation of {src.name} wrote nothing")
    model = onnx.load(str(dst))
    only_matmuls_read_int8(model.graph)
    int8_matmuls_with_bias(model)
    onnx.save(model, str(dst))


def only_matmuls_read_int8(graph) -> int:
    """Give every consumer of a quantised activation other than a MatMul/Gemm the float tensor back, and drop the
    QuantizeLinear/DequantizeLinear nodes nothing reads any more; returns how many inputs were given back.

    onnxruntime's QDQ quantiser rewires every consumer of a quantised tensor to its DequantizeLinear, so the
    residual connections (the Add / LayerNorm beside each MatMul) read a rounded copy: error that buys no int8 GEMM,
    and a DequantizeLinear the runtime cannot fuse away."""
    float_of = {}  # DequantizeLinear output -> the float tensor its QuantizeLinear read
    quantized_from = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "QuantizeLinear"}
    for n in graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0] in quantized_from:
            float_of[n.output[0]] = quantized_from[n.input[0]]
    given_back = 0
    for n in graph.node:
        if n.op_type in ("MatMul", "Gemm", "DequantizeLinear", "QuantizeLinear"):
            continue
        for i, name in enumerate(n.input):
            if name in float_of:
                n.input[i] = float_of[name]
                given_back += 1
    outputs = {o.name for o in graph.output}
    while True:  # dead DequantizeLinear first, then the QuantizeLinear only they read
        read = {name for n in graph.node for name in n.input} | outputs
        dead = [n for n in graph.node if n.op_type in ("DequantizeLinear", "QuantizeLinear")
                and not any(o in read for o in n.output)]
        if not dead:
            return given_back
        for n in dead:
            graph.node.remove(n)


def int8_matmuls_with_bias(model) -> int:
    """Each DequantizeLinear(x_q), DequantizeLinear(w_q) -> MatMul -> Add(bias) of a QDQ graph as one
    com.microsoft MatMulIntegerToFloat(x_q, w_q, scales, zero points, bias), the int8 GEMM with its bias that dynamic
    int8's graph runs; returns how many. onnxruntime fuses the QDQ MatMul into MatMulIntegerToFloat itself but leaves
    the bias Add beside it: one more pass over each output, 0.1-0.4 ms of a 4 ms request at batch 1 (MiniLM-sized).
    The outputs are the same to the bit."""
    import onnx

    graph = model.graph
    weights = {i.name for i in graph.initializer}
    made_by = {o: n for n in graph.node for o in n.output}
    readers: dict[str, list] = {}
    for n in graph.node:
        for name in n.input:
            readers.setdefault(name, []).append(n)
    fused: dict[int, object] = {}  # id(MatMul) -> its replacement; the Adds go
    gone: set[int] = set()
    for mm in graph.node:
        if mm.op_type != "MatMul":
            continue
        x, w = (made_by.get(name) for name in mm.input)
        after = readers.get(mm.output[0], [])
        if (x is None or w is None or x.op_type != "DequantizeLinear" or w.op_type != "DequantizeLinear"
                or len(after) != 1 or after[0].op_type != "Add"):
            continue
        add = after[0]
        bias = next((name for name in add.input if name != mm.output[0]), "")
        while bias not in weights and bias in made_by and made_by[bias].op_type == "Identity":
            bias = made_by[bias].input[0]  # the exporter shares equal weights (e.g. zero biases) through Identity
        if bias not in weights:
            continue
        zero = lambda dq: dq.input[2] if len(dq.input) > 2 else ""  # noqa: E731
        fused[id(mm)] = onnx.helper.make_node(
            "MatMulIntegerToFloat", [x.input[0], w.input[0], x.input[1], w.input[1], zero(x), zero(w), bias],
            [add.output[0]], name=f"{mm.name}/int8", domain="com.microsoft")
        gone.add(id(add))
    if not fused:
        return 0
    nodes = [fused.get(id(n), n) for n in graph.node if id(n) not in gone]
    del graph.node[:]
    graph.node.extend(nodes)
    only_matmuls_read_int8(graph)  # drops the DequantizeLinear nodes nothing reads now
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    return len(fused)


def quantize_int8_dynamic(src: Path, dst: Path, *, preprocess: bool = False, keep_fp32: Sequence[str] = KEEP_FP32,
                  op_types: Sequence[str] = ("MatMul", "Gemm")) -> None:
    """Dynamic int8 quantisation (int8 weights per tensor, uint8 activations) of the encoder's MatMuls
    (`electric export --int8-method dynamic`, and the fused graph). Batch-dependent: each MatMul scales its input
    by the largest value in the whole batch, so a row's output moves with what is batched beside it.

    keep_fp32: MatMul/Gemm nodes whose name contains one of these stay fp32: the output head and the
    embedding projection, <2% of the FLOPs but most of the ranking error (measured on a briefly trained
    discriminator: per-token PLL Spearman vs fp32 0.70 with them quantised, 0.999 without).
    preprocess: run onnxruntime's quant_pre_process first, as its quantiser advises; measured in
    benchmarks/bench_runtime.py, not the default.
    op_types: the node types quantised; "Attention" adds the fused attention of `optimize_transformer`'s graph
    (its Q/K/V projection becomes QAttention), measured in benchmarks/bench_runtime.py."""
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
                   if n.op_type in op_types and any(k in module_path(n) for k in keep_fp32)]
        # DefaultTensorType: outputs that shape inference leaves untyped (e.g. after fusion) are float
        with _without_preprocess_advice():
            quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, op_types_to_quantize=list(op_types),
                             per_channel=False, reduce_range=False, nodes_to_exclude=exclude,
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    except Exception as e:  # noqa: BLE001 - any library failure is one clear error
        raise ExportError(f"int8 quantisation of {src.name} failed: {type(e).__name__}: {e}") from e
    finally:
        if preprocess:
            dst.with_name(dst.stem + ".pre.onnx").unlink(missing_ok=True)
    if not dst.is_file():
        raise ExportError(f"int8 quantisation of {src.name} wrote nothing")


def quantize_int8_fused(src: Path, dst: Path, config: dict) -> None:
    """The fused int8 graph (`electric export --int8-graph fused`): onnxruntime's transformer optimizer on `src`,
    then dynamic int8 of its MatMuls and its fused Attention (Q/K/V projection -> QAttention). The intermediate
    fused fp32 graph is not kept. Raises ExportError."""
    fused = dst.with_name(dst.stem + ".fused.onnx")
    try:
        try:
            made = optimize_transformer(src, fused, config)
        except Exception as e:  # noqa: BLE001 - any optimizer failure is one clear error
            raise ExportError(f"the fused int8 graph failed at fusion: {type(e).__name__}: {e}") from e
        if not made.get("Attention"):  # onnxruntime 1.30 and older do not know this graph's attention pattern
            import onnxruntime

            raise ExportError(
                f"the fused int8 graph: onnxruntime {onnxruntime.__version__}'s transformer optimizer fused no "
                f"attention in {src.name} (onnxruntime 1.31 and later do): upgrade onnxruntime, or export without "
                "--int8-graph fused")
        quantize_int8_dynamic(fused, dst, op_types=("MatMul", "Gemm", "Attention"))
    finally:
        fused.unlink(missing_ok=True)


def convert_fp16(src: Path, dst: Path) -> None:
    """fp16 weights and activations, inputs/outputs kept int64/float32 (onnxruntime's converter)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    try:
        model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
        onnx.save(model, str(dst))
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"fp16 conversion of {src.name} failed: {type(e).__name__}: {e}") from e
