"""The models and inputs the speed benchmarks share: random-weight ELECTRA discriminators of the pretraining presets'
shapes (`tiny`, `small`), their int8 exports, a real checkpoint's export (`export_checkpoint`), and real ASR
sentences and n-best lists from ATIS.

Imported by the benchmark scripts (bench_server, bench_runtime, profile_server, bench_huge_inputs,
bench_serve_startup), which put the repository on sys.path first.
"""

from __future__ import annotations

import json
import re
from itertools import islice
from pathlib import Path

from electric.checkpoint import MANIFEST, ExportManifest
from electric.pretraining.config import PRESETS
from electric.shared_data import shared_data_dir

SHARED = shared_data_dir()
SHAPE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "embedding_size")
SIZES = {size: {k: PRESETS[size][k] for k in SHAPE} for size in ("tiny", "small")}  # the presets' discriminators


def sentences(n: int) -> list[str]:
    """Real ASR hypotheses: the first hypothesis of each ATIS test utterance."""
    data = json.loads((SHARED / "nbest" / "atis_test.whisper5best.json").read_text())
    return [u["input"][0] for u in data][:n]


def wiki_sentences(n: int, min_words: int = 10, max_words: int = 40) -> list[str]:
    """`n` distinct enwiki sentences of `min_words` to `max_words` words, in corpus order (wiki_00 first): real
    sentences for the serving benchmarks' one-text requests."""
    out, seen = [], set()
    for f in sorted((SHARED / "corpus" / "enwiki").glob("wiki_*")):
        with open(f, encoding="utf-8") as lines:
            for line in lines:
                if line.startswith("<") or len(line) < 40:
                    continue
                for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", line.strip()):
                    if s[-1:] in ".!?" and min_words <= len(s.split()) <= max_words and s not in seen:
                        out.append(s)
                        seen.add(s)
                        if len(out) == n:
                            return out
    raise SystemExit(f"found only {len(out)} sentences of {min_words}-{max_words} words in {SHARED / 'corpus/enwiki'}")


def random_discriminator(size: str, tok_dir: Path, out: Path, max_positions: int) -> Path:
    """OUT: a random-weight (seed 0) ElectraForPreTraining of `size` taking `max_positions` tokens, saved with the
    tokenizer in `tok_dir` (its model_max_length set to that length, which peers pad to)."""
    import torch
    from transformers import AutoTokenizer, ElectraConfig, ElectraForPreTraining

    tok = AutoTokenizer.from_pretrained(tok_dir)
    torch.manual_seed(0)
    cfg = ElectraConfig(vocab_size=len(tok), max_position_embeddings=max_positions, pad_token_id=tok.pad_token_id,
                        **SIZES[size])
    ElectraForPreTraining(cfg).save_pretrained(out)
    tok.model_max_length = max_positions
    tok.save_pretrained(out)
    return out


def random_discriminator_export(size: str, work: Path, positions: int = 128) -> Path:
    """A random-weight ElectraForPreTraining of `size` and `positions` (served at all of them) with a WordPiece
    tokenizer, exported with int8."""
    out = work / (f"{size}-onnx" if positions == 128 else f"{size}-{positions}-onnx")
    if (out / "electric.json").is_file():
        return out
    from electric.export.exporter import ExportOptions, export_model

    export_model(random_checkpoint(size, work, positions), out, ExportOptions(quantize="int8", overwrite=True),
                 log=lambda *_: None)
    return out


def model_label(model_dir: str | Path) -> str:
    """How the reports name a checkpoint: its directory's name, with the run's name for a pretraining run's
    RUN/discriminator (runs/fc/electric/discriminator -> electric/discriminator)."""
    d = Path(model_dir).resolve()
    return f"{d.parent.name}/{d.name}" if d.name == "discriminator" else d.name


def export_checkpoint(model_dir: str | Path, work: Path, log=print) -> Path:
    """WORK/model-LABEL-onnx: the checkpoint `model_dir` (e.g. a pretraining run's discriminator) exported as
    `electric export --model DIR --out OUT --quantize int8` exports it (fp32 and int8 graphs, parity gates,
    calibration with the run's generator, electric.json); reused while the checkpoint's files are unchanged.
    Raises electric.checkpoint.CheckpointError or electric.export.errors.ExportError."""
    from electric.cli.export import default_sentences
    from electric.export.exporter import ExportOptions, export_model
    from electric.export.manifest import checkpoint_hash

    out = work / f"model-{model_label(model_dir).replace('/', '-')}-onnx"
    if (out / MANIFEST).is_file() and ExportManifest.read(out).source["sha256"] == checkpoint_hash(Path(model_dir)):
        return out
    export_model(model_dir, out, ExportOptions(quantize="int8", overwrite=True, default_sentences=default_sentences()),
                 log=log)
    return out


def random_checkpoint(size: str, work: Path, positions: int = 128) -> Path:
    """WORK/SIZE-checkpoint: a random-weight ElectraForPreTraining of `size` (128 positions, or `positions`) with an
    8k WordPiece tokenizer trained on 2,500 lines of enwiki by `python -m training.tokenizer`'s entry point."""
    ckpt = work / (f"{size}-checkpoint" if positions == 128 else f"{size}-{positions}-checkpoint")
    if (ckpt / "config.json").is_file():
        return ckpt
    import training.tokenizer

    tok_dir = work / "tokenizer"
    if not (tok_dir / "tokenizer.json").is_file():
        sample = work / "wiki_sample.txt"
        with open(SHARED / "corpus" / "enwiki" / "wiki_00", encoding="utf-8") as f:
            sample.write_text("".join(islice(f, 2500)), encoding="utf-8")
        if training.tokenizer.main(["--data", str(sample), "--vocab-size", "8000", "--out", str(tok_dir), "--overwrite"]):
            raise SystemExit("training the tokenizer failed")
    return random_discriminator(size, tok_dir, ckpt, max_positions=positions)


def nbest_lists(n: int, count: int) -> list[list[str]]:
    """`count` n-best lists of `n` hypotheses: ATIS test's Whisper 5-best lists as they are for n = 5; for other n,
    the hypotheses of consecutive utterances joined (or cut) to n - the server's work depends on the
    hypotheses' number and length, not on their being alternatives of one utterance."""
    data = json.loads((SHARED / "nbest" / "atis_test.whisper5best.json").read_text())
    flat = [h for u in data for h in u["input"]]
    if n == 5:
        return [u["input"][:5] for u in data if len(u["input"]) >= 5][:count]
    return [[flat[(i * n + k) % len(flat)] for k in range(n)] for i in range(count)]

