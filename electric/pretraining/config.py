"""Pretraining configuration: typed frozen dataclasses, presets, and the rules that derive implied values.

`PretrainConfig` is the model and the recipe; `RunConfig` is one run: that config plus how and where it runs
(data, device, resume, ...). Precedence is defaults -> preset -> explicit overrides (CLI flags); every value
implied by others is derived here, in `resolve_config` (what --init-from's source implies) and the properties
(sizes, the head's lr, the warm start's recipe). Each field carries its help, from which training/pretrain_args.py
generates its flag. Unknown keys are an error. Both are validated when built and never changed after: a different value is a new object.

OUT/config.json holds a run's `RunConfig`: the `PretrainConfig` fields at the top level (where model-loading
code and older readers find them) and the run settings under "run" (absent in files written before it).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from electric.checkpoint import CheckpointError, atomic_write_text

Objective = Literal["mlm", "electra", "electric"]
Precision = Literal["fp32", "bf16"]
BiasInit = Literal["prior", "zero"]
GeneratorMode = Literal["joint", "frozen"]
EmbeddingSharing = Literal["shared", "separate", "gdes"]
LayerNormPosition = Literal["post", "pre"]
CompileMode = Literal["default", "reduce-overhead", "max-autotune"]
OBJECTIVES: tuple[str, ...] = ("mlm", "electra", "electric")
RUN_SECTION = "run"  # the key of a run's settings in OUT/config.json
RESUME_FLAGS: tuple[str, ...] = ("max_steps", "time_budget_minutes", "epochs")  # what a resumed run may change


def described(default: Any, help: str) -> Any:
    """A field with its default and its help (`dataclasses.field` metadata "help")."""
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class PretrainConfig:
    """The model and the recipe. Each field's help is the one text that explains it: the comment here and the
    --help of its flag in `python -m training.pretrain` (generated from these fields: training/pretrain_args.py)."""

    # --- what to train
    objective: Objective = described("electric", "mlm = BERT baseline; electra = replaced-token detection; electric = "
                                     "energy-based cloze model (NCE with a two-tower noise model)")
    preset: str = described("small", "model size and schedule: debug (seconds on CPU), tiny (hidden 128 x 4 layers), "
                                     "small/base/large (ELECTRA paper, table 6)")
    # --- discriminator (or the MLM model for objective=mlm); ELECTRA-small defaults
    hidden_size: int = described(256, "transformer width of the discriminator (or of the MLM)")
    num_hidden_layers: int = described(12, "depth (the generator has the same depth)")
    num_attention_heads: int = described(4, "attention heads of the discriminator")
    intermediate_size: int = described(1024, "FFN width of the discriminator")
    embedding_size: int = described(128, "shared embedding width; each network projects to its hidden size")
    max_seq_length: int = described(128, "tokens per packed sequence, [CLS] and [SEP] included")
    max_position_embeddings: int = described(0, "position table size (0 = max(512, max_seq_length)); --init-from "
                                                "adopts its own")
    type_vocab_size: int = described(2, "token-type (segment) vocabulary; --init-from adopts the checkpoint's")
    hidden_dropout_prob: float = described(0.1, "dropout after embeddings / attention output / FFN (--dropout)")
    attention_probs_dropout_prob: float = described(0.1, "dropout on attention weights (--dropout)")
    # --- generator (electra: masked LM; electric: two-tower cloze model)
    generator_hidden_size: int = described(0, "generator width (0 = hidden_size // 4); its heads = max(1, width // 64), "
                                              "its FFN = 4 x width")
    embedding_sharing: EmbeddingSharing = described(
        "shared", "the generator's embeddings: shared with the discriminator (ELECTRA), separate, or gdes (DeBERTa-v3: "
                  "stopgrad(the discriminator's) + a delta of its own, so the generator's loss never pulls on the "
                  "discriminator's embeddings)")
    layer_norm: LayerNormPosition = described(
        "post", "where each layer's LayerNorms sit: post (BERT, ELECTRA) or pre (x + f(LN(x)) and a final LayerNorm; "
                "Cramming's choice for short runs). Pre-LN checkpoints train, resume, hand over their encoder and "
                "score with the torch backend; export and fine-tuning refuse them")
    # --- objective hyper-parameters (paper names)
    mask_prob: float = described(0.15, "fraction of candidate tokens masked / replaced")
    gen_weight: float = described(1.0, "weight of the generator (or cloze) likelihood loss")
    disc_weight: float = described(50.0, "weight of the discriminator BCE loss (lambda)")
    temperature: float = described(1.0, "sampling temperature for replacements (--init-from keeps 1)")
    disc_bias_init: BiasInit = described(
        "prior", "discriminator output bias at start: prior (ELECTRA log(p/(1-p)), Electric log V, so the first logits "
                 "sit at the label prior) or zero (google-research's; can collapse)")
    disc_head_lr_scale: float = described(
        0.0, "the discriminator's head (dense -> dense(1)) trains at this times --lr, so that a fresh head on a trained "
             "encoder reaches the output scale its objective needs by itself instead of the encoder aligning every "
             "token's state to give it (a collapse). 0 = auto: HEAD_LR_SCALE_ON_TRAINED_ENCODER (30) for a fresh head "
             "on a trained encoder (--init-from, a warm start), else 1 (from scratch, or a checkpoint's own head)")
    # --- optimisation
    lr: float = described(5e-4, "peak learning rate (AdamW); --init-from continuing the source's own head: 1/5 of "
                                "the preset's (INIT_FROM_LR_SCALE)")
    batch_size: int = described(128, "sequences per optimizer step, over all processes and micro-steps")
    grad_accum: int = described(1, "micro-steps per optimizer step")
    weight_decay: float = described(0.01, "AdamW weight decay; not applied to LayerNorm weights or biases")
    adam_beta1: float = described(0.9, "AdamW beta1")
    adam_beta2: float = described(0.999, "AdamW beta2")
    adam_eps: float = described(1e-6, "AdamW epsilon")
    max_grad_norm: float = described(1.0, "gradient-norm clip")
    warmup_steps: int = described(10_000, "linear warmup steps; capped at 10% of the run, but never below "
                                          "min_warmup_steps")
    min_warmup_steps: int = described(1_000, "floor of the 10% warmup cap, so a short or time-budgeted run still "
                                             "warms up (0 = the plain 10% cap)")
    max_steps: int = described(1_000_000, "total optimizer steps (the schedule decays linearly to 0 here)")
    time_budget_minutes: float = described(0.0, "> 0: stop after this many minutes; the schedule's length is fitted "
                                                "to it")
    precision: Precision = described("fp32", "bf16 = autocast (CPU and CUDA); master weights stay fp32")
    compile: bool = described(False, "torch.compile the training step (its first steps compile: for long runs)")
    compile_mode: CompileMode = described("default", "torch.compile's mode with --compile: reduce-overhead also "
                                                     "replays the step as CUDA graphs, max-autotune searches kernels")
    seed: int = described(0, "seeds init, masking, sampling and data order")
    # --- data
    num_proc: int = described(0, "tokenisation processes (0 = number of CPUs)")
    val_sequences: int = described(256, "sequences held out (fixed, seeded) for validation")
    # --- logging and checkpoints
    log_every: int = described(10, "optimizer steps between metrics.jsonl lines")
    eval_every: int = described(200, "optimizer steps between validation passes")
    save_every: int = described(500, "optimizer steps between resumable checkpoints")
    eval_batches: int = described(8, "validation batches per evaluation")
    # --- where the first weights come from
    init_from: str = described(
        "", "start from a checkpoint you have (continued pretraining): a run directory, or any local BERT-family "
            "directory - BertModel, BertForMaskedLM, BertForPreTraining, ElectraModel, ElectraForPreTraining, "
            "ElectraForMaskedLM, or a sentence-transformers folder of one. The run adopts its sizes, positions and "
            "tokenizer; its encoder becomes the discriminator (energy model) under a fresh head, or the masked LM for "
            "objective mlm (docs/pretraining.md)")
    init_generator_from: str = described(
        "", "with --init-from: the generator (ElectraForMaskedLM) or cloze model (an Electric run's generator/) to "
            "continue; default the run directory's own, else a fresh one at generator_hidden_size over the "
            "checkpoint's vocabulary")
    # --- warm start (at CPU budgets the binary signal cannot bootstrap context; a likelihood objective can)
    warm_start: float = described(
        0.0, "electra/electric: spend this fraction of the run (time budget or max_steps) on MLM at its own lr first, "
             "then hand its encoder to the discriminator and switch objective in the same run (resumable across the "
             "switch). At CPU budgets a discriminator from scratch does not learn context; a warm one does "
             "(docs/pretraining.md). 0 = none")
    warm_start_lr: float = described(0.0, "peak lr of the warm start's MLM stage (0 = the MLM recipe's for the preset)")
    gen_lr: float = described(0.0, "peak lr of the generator / cloze model, a parameter group of its own (0 = lr)")
    generator_mode: GeneratorMode = described(
        "joint", "joint: the generator trains beside the discriminator; frozen (electra, with a warm start or an MLM "
                 "--init-from): the MLM itself samples the replacements, fixed (Fast-ELECTRA), smoothed by "
                 "temperature_start")
    temperature_start: float = described(
        0.0, "> 0: the sampling temperature falls linearly from this to `temperature` over the objective's stage "
             "(Fast-ELECTRA's schedule for a frozen generator). 0 = constant, except Electric --init-from a checkpoint "
             "with a fresh cloze model: CHECKPOINT_TEMPERATURE_START (4), easy noise while its log q climbs")
    epochs: float = described(0.0, "> 0: stop after this many passes over the training data")

    def __post_init__(self) -> None:
        self.validate()

    # Values implied by others are derived here, and only here.
    @property
    def gen_hidden(self) -> int:
        return self.generator_hidden_size or max(1, self.hidden_size // 4)

    @property
    def gen_heads(self) -> int:
        return max(1, self.gen_hidden // 64)

    @property
    def gen_intermediate(self) -> int:
        return 4 * self.gen_hidden

    @property
    def start(self) -> str:
        """Where the discriminator's first weights come from: "checkpoint" (init_from), "warm" (warm_start) or
        "scratch"."""
        return "checkpoint" if self.init_from else "warm" if self.warm_start else "scratch"

    @property
    def head_lr_scale(self) -> float:
        if self.disc_head_lr_scale:
            return self.disc_head_lr_scale
        return HEAD_LR_SCALE_ON_TRAINED_ENCODER if self.start != "scratch" else 1.0

    @property
    def position_table(self) -> int:
        return self.max_position_embeddings or max(512, self.max_seq_length)

    @property
    def max_predictions(self) -> int:
        from electric.modeling.corruption import max_predictions  # noqa: PLC0415 - reading a config needs no torch

        return max_predictions(self.mask_prob, self.max_seq_length)

    @property
    def micro_batch_size(self) -> int:
        return self.batch_size // self.grad_accum

    @property
    def warm_stage(self) -> PretrainConfig:
        """The recipe of the warm start's MLM stage: the same model and batch, objective mlm at its own lr."""
        lr = self.warm_start_lr or OBJECTIVE_PRESETS.get((self.preset, "mlm"), {}).get("lr", self.lr)
        return dataclasses.replace(self, objective="mlm", lr=lr, warm_start=0.0, gen_lr=0.0,
                                   generator_mode="joint", temperature_start=0.0)

    def validate(self) -> None:
        def require(names: tuple[str, ...], ok: Callable[[Any], bool], rule: str) -> None:
            bad = [f"{n} {getattr(self, n)!r}" for n in names if not ok(getattr(self, n))]
            if bad:
                raise ValueError(f"{', '.join(bad)}: {rule}")

        require(("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "embedding_size",
                 "max_steps", "log_every", "eval_every", "save_every", "eval_batches", "val_sequences"),
                lambda v: v >= 1, "must be at least 1")
        require(("lr", "max_grad_norm"), lambda v: 0 < v < math.inf, "must be a number > 0")  # nan fails too
        require(("gen_weight", "disc_weight", "weight_decay", "adam_eps", "time_budget_minutes", "epochs",
                 "generator_hidden_size", "max_position_embeddings", "num_proc"),
                lambda v: 0 <= v < math.inf, "must be a number >= 0")
        require(("hidden_dropout_prob", "attention_probs_dropout_prob", "adam_beta1", "adam_beta2"),
                lambda v: 0 <= v < 1, "must be in [0, 1)")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be fp32 or bf16, got {self.precision!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads {self.num_attention_heads}"
            )
        if self.gen_hidden % self.gen_heads:
            raise ValueError(f"generator hidden size {self.gen_hidden} is not divisible by {self.gen_heads} heads")
        if not 0.0 < self.mask_prob < 1.0:
            raise ValueError(f"mask_prob must be in (0, 1), got {self.mask_prob}")
        if self.max_seq_length < 8:
            raise ValueError(f"max_seq_length must be at least 8, got {self.max_seq_length}")
        if self.max_seq_length > self.position_table:
            raise ValueError(f"max_seq_length {self.max_seq_length} exceeds the {self.position_table} positions")
        if self.init_generator_from and not self.init_from:
            raise ValueError("init_generator_from continues a generator beside --init-from's encoder; pass --init-from")
        if self.batch_size < 1 or self.grad_accum < 1 or self.batch_size % self.grad_accum:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a positive multiple of grad_accum ({self.grad_accum})"
            )
        if self.disc_bias_init not in ("prior", "zero"):
            raise ValueError(f"disc_bias_init must be prior or zero, got {self.disc_bias_init!r}")
        if self.min_warmup_steps < 0 or self.warmup_steps < 0:
            raise ValueError(f"warmup steps must be >= 0, got warmup_steps {self.warmup_steps}, "
                             f"min_warmup_steps {self.min_warmup_steps}")
        if self.temperature <= 0 or self.temperature_start < 0:
            raise ValueError(f"temperature must be > 0 and temperature_start >= 0, got {self.temperature}, "
                             f"{self.temperature_start}")
        if not 0.0 <= self.warm_start < 1.0:
            raise ValueError(f"warm_start is a fraction of the run in [0, 1), got {self.warm_start}")
        if self.warm_start and self.objective == "mlm":
            raise ValueError("warm_start trains MLM before a discriminator objective; objective mlm has none")
        if self.warm_start and self.init_from:
            raise ValueError("warm_start and init_from both give the discriminator its first weights; pass one")
        if self.generator_mode not in ("joint", "frozen"):
            raise ValueError(f"generator_mode must be joint or frozen, got {self.generator_mode!r}")
        if self.generator_mode == "frozen" and self.objective != "electra":
            raise ValueError(f"generator_mode frozen needs objective electra, got {self.objective}: Electric's noise "
                             "model is the two-tower cloze model, which the MLM warm start does not train")
        if self.embedding_sharing not in ("shared", "separate", "gdes"):
            raise ValueError(f"embedding_sharing must be shared, separate or gdes, got {self.embedding_sharing!r}")
        if self.embedding_sharing == "gdes" and self.generator_mode == "frozen":
            raise ValueError("embedding_sharing gdes trains a delta on the generator's embeddings; a frozen "
                             "generator trains nothing (it keeps its own embeddings)")
        if self.layer_norm not in ("post", "pre"):
            raise ValueError(f"layer_norm must be post or pre, got {self.layer_norm!r}")
        if self.disc_head_lr_scale < 0:
            raise ValueError(f"disc_head_lr_scale must be >= 0 (0 = auto), got {self.disc_head_lr_scale}")
        if self.gen_lr < 0 or self.warm_start_lr < 0:
            raise ValueError(f"gen_lr and warm_start_lr must be >= 0, got {self.gen_lr}, {self.warm_start_lr}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PretrainConfig:
        check_keys(cls, values, "config")
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> PretrainConfig:
        """A saved config (a run's config.json: its "run" section is left out), with `overrides` applied;
        fields it predates take the behaviour it was trained with, not today's default."""
        saved = read_json(path)
        saved.pop(RUN_SECTION, None)
        return cls.from_dict({**LEGACY_DEFAULTS, **saved, **(overrides or {})})


# A fresh discriminator head on a trained encoder (--init-from, --warm-start) trains at 30x the lr: from
# all-MiniLM-L6-v2 it kept Electric's token cosine at 0.48 where 1x went to 0.97, and lifted ELECTRA's AUC faster;
# after a 400-step MLM warm start, ELECTRA ended at cosine 0.54 against 0.89 (BENCHMARKS.md, "The warm start's switch").
HEAD_LR_SCALE_ON_TRAINED_ENCODER = 30.0

# Values for fields added after a config was saved: what runs saved before them did.
LEGACY_DEFAULTS: dict[str, Any] = {"disc_bias_init": "zero", "min_warmup_steps": 0, "disc_head_lr_scale": 1.0}

PRESETS: dict[str, dict[str, Any]] = {
    # Trains in seconds on a CPU; used by tests and CI.
    "debug": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        embedding_size=32, max_seq_length=64, lr=1e-3, batch_size=8, warmup_steps=10, min_warmup_steps=10,
        max_steps=50, log_every=5, eval_every=25, save_every=25, eval_batches=2, val_sequences=16,
    ),
    # A CPU-sized model (about 1.5M non-embedding parameters): minutes to learn something.
    # lr: ELECTRA-Small's 5e-4 at batch 128 scaled linearly to batch 32 is 1.25e-4; a sweep kept 1e-4 healthy
    # where 2.5e-4 drifted towards collapse and 5e-4 collapsed (BENCHMARKS.md). Warmup 500 steps, never
    # cut below 300 by a short run.
    "tiny": dict(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=2, intermediate_size=512,
        embedding_size=128, max_seq_length=128, lr=1e-4, batch_size=32, warmup_steps=500, min_warmup_steps=300,
        max_steps=100_000, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        eval_every=100, save_every=250,
    ),
    # ELECTRA paper, table 6.
    "small": dict(
        hidden_size=256, num_hidden_layers=12, num_attention_heads=4, intermediate_size=1024,
        embedding_size=128, lr=5e-4, batch_size=128, max_steps=1_000_000,
    ),
    "base": dict(
        hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        embedding_size=768, max_seq_length=512, lr=2e-4, batch_size=256, max_steps=766_000,
    ),
    "large": dict(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
        embedding_size=1024, max_seq_length=512, lr=2e-4, batch_size=2048, max_steps=400_000,
        mask_prob=0.25,
    ),
}


# Where a preset's value does not suit one objective. MLM has no discriminator to keep healthy, and at `tiny`
# it reaches at 3.8M tokens with lr 1e-3 the NLL that the discriminators' 1e-4 gives it at 30M (BENCHMARKS.md,
# "three diagnostics"). ELECTRA at `tiny` (CPU budgets) warm-starts from MLM: in the v3 study (90 minutes, side by
# side) 40% MLM then ELECTRA with its generator at 1e-3 was never flagged collapsed and beat ELECTRA from scratch
# on every measure (BENCHMARKS.md, "Equal compute v3"); --warm-start 0 trains from scratch. It samples its
# replacements at temperature 2: at 1 the generator, on the warm shared embeddings, catches up within ~50 steps
# of the switch and the discriminator never tells its samples apart again (AUC 0.55 against them at the end of
# the v4 study, BLiMP-12 50.8%); at 2 it stays ahead (AUC 0.77, token cosine 0.38) and scores BLiMP-12 at 61.8%,
# +11.0 points [8.8, 13.1] (BENCHMARKS.md, "The warm start's switch"). A run --init-from a checkpoint keeps 1.
# Electric from a checkpoint with a fresh cloze model draws its noise at temperature 4 at first, falling to 1 at
# the end of the run (`resolve_config` sets it where --init-from's source brings no cloze model). A fresh cloze
# model's log q climbs from uniform by several nats in its first ten steps; at temperature 1 the noise and the correction move with it, faster than an energy on a trained encoder can follow:
# the loss rose 1.8x, gradient norms reached ~250, and the energy AUC dipped below chance (0.48 at step 20) on the way
# (from all-MiniLM-L6-v2 on Wikipedia, 3 minutes on 2 CPU cores). With the noise easy first and harder as the energy
# learns, the loss rose 1.1x and the run ended at energy AUC 0.72 against 0.64, unigram-noise AUC 0.73 against 0.71
# (docs/pretraining.md, "From a checkpoint: the first steps").
CHECKPOINT_TEMPERATURE_START = 4.0
OBJECTIVE_PRESETS: dict[tuple[str, str], dict[str, Any]] = {
    ("tiny", "mlm"): dict(lr=1e-3),
    ("tiny", "electra"): dict(warm_start=0.4, gen_lr=1e-3, temperature=2.0),
    # Electric's cloze model is a likelihood model: at 1e-3 it reached NLL 5.91 in the v3 study (6.82 at the
    # energy's 1e-4 in the study before) and was the best one-pass ATIS reranker; the energy keeps 1e-4. Its noise
    # is drawn at temperature 2 (the correction uses the tempered log q): at 1 the energy's AUC against its own
    # noise fell to 0.54 by step 1,000, at 2 it held 0.79 with BLiMP-12 59.8% against 59.6% (BENCHMARKS.md,
    # "The warm start's switch").
    ("tiny", "electric"): dict(gen_lr=1e-3, temperature=2.0),
}


class InitFrom(Protocol):
    """What `resolve_config` asks of --init-from's source (`electric.pretraining.init_from.InitSource`, which reads
    the checkpoint; a config needs neither torch nor the files)."""

    @property
    def generator(self) -> Path | None:
        """The generator / cloze model it continues, or None (a fresh one)."""

    def keeps_head(self, objective: str) -> bool: ...

    def architecture(self, objective: str, max_seq_length: int) -> dict[str, Any]: ...


INIT_FROM_LR_SCALE = 0.2  # continued pretraining of a head the source has: 1/5 of the preset's peak lr


def resolve_config(preset: str, objective: str, overrides: dict[str, Any] | None = None,
                   source: InitFrom | None = None) -> PretrainConfig:
    """The one place a config is derived: defaults -> preset -> the preset's values for this objective -> what
    --init-from's `source` implies -> overrides (flags; None = unset, ignored) -> the source's architecture, which no
    flag changes. From a source (`electric.pretraining.init_from.resolve_init(overrides["init_from"])`): no warm
    start, temperature 1; continuing the head it has (not a fresh one), the lr at INIT_FROM_LR_SCALE of the preset's
    and the head at the rest's lr; Electric with a fresh cloze model, noise from CHECKPOINT_TEMPERATURE_START."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    values: dict[str, Any] = {"objective": objective, "preset": preset, **PRESETS[preset],
                              **OBJECTIVE_PRESETS.get((preset, objective), {})}
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if given.get("init_from"):  # --init-from gives the first weights instead, and was measured at temperature 1
        values.update(warm_start=0.0, temperature=PretrainConfig.temperature)
    if source is not None:
        if source.keeps_head(objective):  # continuing a trained head: a lower lr, the head no faster than the rest
            values.update(lr=values.get("lr", PretrainConfig.lr) * INIT_FROM_LR_SCALE, disc_head_lr_scale=1.0)
        if objective == "electric" and source.generator is None:  # a fresh cloze model beside a trained encoder
            values.update(temperature_start=CHECKPOINT_TEMPERATURE_START)
    values.update(given)
    if source is not None:
        values.update(source.architecture(objective, values.get("max_seq_length", PretrainConfig.max_seq_length)))
    return PretrainConfig.from_dict(values)


@dataclass(frozen=True)
class RunConfig:
    """One pretraining run: the model and the recipe, and how and where it runs. Built once from the command
    line (`training.pretrain.resolve_run`), never changed after, saved whole to OUT/config.json (a resume saves
    its own settings there: those of the latest invocation)."""

    pretrain: PretrainConfig  # the model and the recipe (the top level of config.json)
    out: str  # the run directory
    data: tuple[str, ...] = ()  # training text: files, directories or globs, as given
    data_from_nbest: tuple[str, ...] = ()  # n-best files whose references are trained on too
    nbest_text: str | None = None  # derived: the text file those references were written to
    tokenizer: str = ""  # tokenizer directory: the one given, else the resumed run's, else --init-from's
    cache_dir: str | None = None  # datasets cache directory (None = datasets' own)
    device: str | None = None  # cpu, cuda, cuda:1 ... (None = cuda if available, else cpu)
    threads: int | None = None  # CPU threads for torch (None or 0 = torch's default)
    stop_at: int | None = None  # checkpoint and stop at this step, the schedule unchanged
    stop_on_collapse: bool = False  # end the run (exit status 3) when the discriminator is found collapsed
    resume: bool = False  # continue the run in `out` from its last checkpoint
    overwrite: bool = False  # replace a run already in `out`
    extended: tuple[str, ...] = ()  # resume only: the RESUME_FLAGS fields this resume set anew

    def __post_init__(self) -> None:
        self.validate()

    @property
    def train_files(self) -> tuple[str, ...]:
        """What is trained on: the data given, then the n-best references."""
        return (*self.data, *([self.nbest_text] if self.nbest_text else []))

    def validate(self) -> None:
        if not self.out:
            raise ValueError("a run needs an output directory")
        if self.threads is not None and self.threads < 0:
            raise ValueError(f"threads must be >= 0 (0 = torch's default), got {self.threads}")
        if self.stop_at is not None and self.stop_at < 1:
            raise ValueError(f"stop_at must be a step >= 1, got {self.stop_at}")
        if set(self.extended) - set(RESUME_FLAGS) or (self.extended and not self.resume):
            raise ValueError(f"only a resumed run is extended, and only in {RESUME_FLAGS}; got {self.extended}")

    def to_dict(self) -> dict[str, Any]:
        settings = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "pretrain"}
        settings = {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()}  # as JSON has them
        return {**self.pretrain.to_dict(), RUN_SECTION: settings}

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        """A saved run. A config.json written before the run section gets the default settings (its
        directory as `out`)."""
        settings = read_json(path).get(RUN_SECTION, {"out": str(Path(path).parent)})
        check_keys(cls, settings, "run setting", not_saved=("pretrain",))
        settings = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()}
        return cls(pretrain=PretrainConfig.load(path), **settings)


def check_keys(cls: type, values: dict[str, Any], what: str, not_saved: tuple[str, ...] = ()) -> None:
    """ValueError naming the keys of `values` that are not fields of the dataclass `cls` (or are `not_saved`)."""
    unknown = set(values) - ({f.name for f in dataclasses.fields(cls)} - set(not_saved))
    if unknown:
        raise ValueError(f"unknown {what} keys: {sorted(unknown)}")


def write_json(path: str | Path, values: dict[str, Any]) -> None:
    """Whole or not at all (a kill mid-write leaves the old config.json, which --resume reads)."""
    atomic_write_text(path, json.dumps(values, indent=2) + "\n")


def read_json(path: str | Path) -> dict[str, Any]:
    """A saved config; CheckpointError naming the file when it is missing or not a JSON object."""
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{str(path)!r} is not a readable JSON config: {e}") from None
    if not isinstance(values, dict):
        raise CheckpointError(f"{str(path)!r} is not a JSON object")
    return values
