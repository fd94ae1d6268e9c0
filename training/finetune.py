"""Fine-tune a pretrained ELECTRA-family encoder for classification, sentence pairs, regression or tagging.

    python -m training.finetune --task sst2 --model runs/electric-tiny --data ../shared/data/glue/sst2 \\
        --out runs/ft/sst2
    python -m training.finetune --task-type classification --train my/train.csv --dev my/dev.csv \\
        --text-column text --label-column label --model runs/electric-tiny --out runs/ft/mine

--model is a pretraining run directory (its discriminator/, else generator/ for an MLM run) or any ELECTRA
model directory with its tokenizer. Heads: ElectraForSequenceClassification (classification, pairs,
regression) and ElectraForTokenClassification (each word's label on its first piece). Optimisation follows
ELECTRA's fine-tuning recipe: AdamW (eps 1e-6, weight decay 0.01 off LayerNorm/bias), layer-wise lr decay 0.8
(0.9 for 24-layer models), linear warmup over 10% of the steps then linear decay (pretraining's schedule and
AdamW builder, training/schedule.py), 3 epochs (10 for RTE and STS-B). The dev set is scored after each epoch;
the best epoch's weights are kept and training stops after --patience epochs without improvement.

Writes OUT/ (atomically: nothing is left half-written): a transformers model directory with label names
in config.json (id2label / label2id, problem_type "regression" for regression), the tokenizer,
eval.json (dev metrics of the kept epoch, test metrics where the task has a labelled test file, and the
per-epoch history) and finetune_config.json.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from electric import checkpoint
from electric.batching import pad_rows, pad_values, plan_batches
from electric.checkpoint import FINETUNE_CONFIG, CheckpointError, atomic_dir, check_out_dir
from electric.finetuning.config import FinetuneConfig
from electric.finetuning.tasks import (
    FORMATS,
    TASK_TYPES,
    TASKS,
    Example,
    Task,
    TaskData,
    TaskDataError,
    generic_task,
    load_task_data,
    task_metrics,
)
from electric.modeling.pre_layer_norm import require_post_layer_norm
from electric.tokenization import load_tokenizer
from electric.words import IGNORE_INDEX, align_word_labels, pieces_to_words
from training.schedule import adamw, set_lr, warmup_then_decay

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# ---- setup ---------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m training.finetune", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_argument_group("task (one of --task or --task-type)")
    what.add_argument("--task", choices=sorted(TASKS), help="a benchmark task read from --data DIR")
    what.add_argument("--task-type", choices=TASK_TYPES, help="a task over your own files (--train, --dev)")
    what.add_argument("--data", help="the task's folder, e.g. ../shared/data/glue/sst2 (default file names)")
    what.add_argument("--train", help="training file (CSV, TSV, JSONL, or CoNLL columns for tagging)")
    what.add_argument("--dev", help="dev file; default: the task's, or a fixed seeded 10%% of --train")
    what.add_argument("--test", help="a labelled test file scored once with the kept model")
    what.add_argument("--text-column", help="column (header name, JSON key, or 0-based index) of the text; "
                                            "tagging: the words (whitespace-separated, or a JSON list)")
    what.add_argument("--text-pair-column", help="column of the second text of a pair")
    what.add_argument("--label-column", help="column of the label (tagging: the tags, one per word)")
    what.add_argument("--format", choices=FORMATS, help="file format (default: from the extension)")
    what.add_argument("--no-header", action="store_true", help="CSV/TSV files have no header row; "
                                                               "columns are 0-based indices")
    ap.add_argument("--model", required=True, help="pretraining run directory or ELECTRA model directory")
    ap.add_argument("--out", required=True, help="directory to write the fine-tuned model and eval.json to")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    ap.add_argument("--random-init", action="store_true",
                    help="same architecture and tokenizer as --model but random weights (no-pretraining baseline)")
    ap.add_argument("--epochs", type=int, help="passes over the training data (3; 10 for RTE and STS-B)")
    ap.add_argument("--lr", type=float, help="peak learning rate of the head (3e-4 small, 1e-4 base, 5e-5 large)")
    ap.add_argument("--layer-decay", type=float, help="layer-wise lr decay (0.8; 0.9 for 24+ layers)")
    ap.add_argument("--batch-size", type=int, help="examples per step (32)")
    ap.add_argument("--warmup-fraction", type=float, help="share of steps with linear warmup (0.1)")
    ap.add_argument("--weight-decay", type=float, help="AdamW weight decay (0.01)")
    ap.add_argument("--dropout", type=float, help="hidden and attention dropout while fine-tuning (0.1)")
    ap.add_argument("--patience", type=int, help="epochs without dev improvement before stopping (3; 0 = off)")
    ap.add_argument("--max-seq-length", type=int, help="tokens per example (128)")
    ap.add_argument("--max-train-examples", type=int, help="train on a fixed seeded sample of this size")
    ap.add_argument("--max-eval-examples", type=int, help="score only the first N dev/test examples")
    ap.add_argument("--seed", type=int, help="seed for the head's init, dropout and data order (0)")
    ap.add_argument("--precision", choices=("fp32", "bf16"), help="bf16 = autocast (CPU and CUDA)")
    ap.add_argument("--eval-batch-size", type=int, help="examples per forward pass when predicting (64)")
    ap.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    ap.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's; 1 is faster on a "
                                                "machine whose cores are busy with other work)")
    return ap.parse_args(argv)


CONFIG_FLAGS = ("random_init", "lr", "layer_decay", "epochs", "batch_size", "warmup_fraction", "weight_decay",
                "dropout", "patience", "max_seq_length", "max_train_examples", "max_eval_examples", "seed",
                "precision", "eval_batch_size")


def encoder_dir(path: str) -> Path:
    """The encoder directory behind --model: a run's discriminator/ (else generator/), or the dir itself, checked to
    hold an ELECTRA encoder (`electric.checkpoint.resolve_model_dir`, then its config). Any other BERT-family
    checkpoint that --init-from takes (BertModel, a sentence-transformers folder, ...) is converted once into a
    temporary ELECTRA directory (`electric.modeling.pretrained.save_as_electra`)."""
    d = checkpoint.resolve_model_dir(path, ("discriminator", "generator"), what="--model")
    cfg_file = d / "config.json"
    if not cfg_file.is_file() and not (d / "modules.json").is_file():
        raise CheckpointError(f"--model {path!r} is neither a pretraining run (no discriminator/ or generator/) nor "
                              "a model directory (no config.json)")
    cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
    if cfg.get("model_type") == "electric-cloze":
        raise CheckpointError(f"--model {str(d)!r} holds the two-tower cloze generator of an Electric run, which "
                              "cannot be fine-tuned; use the run's discriminator")
    if cfg.get("model_type") != "electra":
        import atexit
        import shutil
        import tempfile

        from electric.modeling.pretrained import read_pretrained, save_as_electra

        src = read_pretrained(d, "--model")  # a one-line CheckpointError for another family
        tmp = Path(tempfile.mkdtemp(prefix="electric-encoder-"))
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        return save_as_electra(src, tmp)
    return d


def build_task(args: argparse.Namespace) -> tuple[Task, TaskData]:
    if (args.task is None) == (args.task_type is None):
        raise ValueError("pass either --task NAME (a benchmark task) or --task-type TYPE (your own files)")
    common = dict(max_train_examples=args.max_train_examples, max_eval_examples=args.max_eval_examples)
    if args.task is not None:
        task = TASKS[args.task]
        if args.data is None and args.train is None:
            raise ValueError(f"--task {args.task} needs --data DIR (the task's folder, holding {task.train})")
        return task, load_task_data(task, args.data, train=args.train, dev=args.dev, test=args.test, **common)
    if args.train is None:
        raise ValueError("--task-type needs --train FILE (and usually --dev FILE)")
    task = generic_task(args.task_type, text_column=args.text_column, label_column=args.label_column,
                        text_pair_column=args.text_pair_column, fmt=args.format, header=not args.no_header,
                        train_file=args.train)
    return task, load_task_data(task, None, train=args.train, dev=args.dev, test=args.test, **common)


def finetuning_model(cfg: FinetuneConfig, model_dir: Path, labels: list[str]) -> PreTrainedModel:
    """The task head on the pretrained encoder, label names in its config."""
    import transformers
    from transformers import AutoConfig, ElectraForSequenceClassification, ElectraForTokenClassification

    cls = ElectraForTokenClassification if cfg.task_type == "tagging" else ElectraForSequenceClassification
    names = labels if cfg.task_type != "regression" else ["score"]
    overrides: dict[str, Any] = dict(num_labels=len(names), id2label=dict(enumerate(names)),
                                     label2id={n: i for i, n in enumerate(names)}, hidden_dropout_prob=cfg.dropout,
                                     attention_probs_dropout_prob=cfg.dropout, classifier_dropout=None,
                                     problem_type="regression" if cfg.task_type == "regression" else
                                     None if cfg.task_type == "tagging" else "single_label_classification")
    require_post_layer_norm(model_dir, "fine-tuning")
    torch.manual_seed(cfg.seed)  # the new head's init depends on --seed
    if cfg.random_init:
        config = AutoConfig.from_pretrained(model_dir, **overrides)
        config.architectures = [cls.__name__]
        return cls(config)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # we report what was (not) loaded ourselves
    transformers.utils.logging.disable_progress_bar()
    try:
        # transformers' stub types from_pretrained as returning the model, not (model, info) with output_loading_info
        model, info = cls.from_pretrained(model_dir, ignore_mismatched_sizes=True,  # type: ignore[misc]
                                          output_loading_info=True, **overrides)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"could not load {str(model_dir)!r}: {e}") from e
    finally:
        transformers.logging.set_verbosity(verbosity)
    missing_encoder = sorted(k for k in info["missing_keys"] if k.startswith("electra."))
    if missing_encoder:
        raise CheckpointError(f"{str(model_dir)!r} lacks ELECTRA encoder weights ({len(missing_encoder)} missing, "
                              f"e.g. {missing_encoder[0]}); is it an encoder checkpoint?")
    return model


def param_groups(model: PreTrainedModel, cfg: FinetuneConfig) -> list[dict]:
    """Layer-wise lr decay as in ELECTRA's _get_layer_lrs: depth 0 = embeddings, i+1 = encoder layer i,
    n+2 = the task head; lr = cfg.lr * layer_decay ** (n + 2 - depth). No weight decay on LayerNorm/bias."""
    n = model.config.num_hidden_layers
    groups: dict[tuple[int, bool], dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if name.startswith("electra.embeddings"):  # embeddings and embeddings_project
            depth = 0
        elif m := re.match(r"electra\.encoder\.layer\.(\d+)\.", name):
            depth = int(m.group(1)) + 1
        else:
            depth = n + 2
        decay = not (p.dim() < 2 or "LayerNorm" in name or name.endswith("bias"))
        g = groups.setdefault((depth, decay), {"params": [], "weight_decay": cfg.weight_decay if decay else 0.0,
                                               "lr_scale": cfg.layer_decay ** (n + 2 - depth)})
        g["params"].append(p)
    return list(groups.values())


# ---- tokenising ----------------------------------------------------------------------------------

@dataclass
class EncodedSplit:
    """One split, tokenised. labels: class ids, floats, or per-piece tag ids (IGNORE_INDEX off first pieces)."""
    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    labels: list
    word_ids: list[list[int | None]] | None = None  # tagging: piece -> word index
    n_words: list[int] | None = None

    def __len__(self) -> int:
        return len(self.input_ids)


def encode(examples: list[Example], tokenizer, task_type: str, label2id: dict[str, int], max_len: int) -> EncodedSplit:
    """Token ids of a split; a "[SEP]" in an example is text, as the server tokenises it (split_special_tokens)."""
    if task_type == "tagging":
        enc = tokenizer([e.text for e in examples], is_split_into_words=True, truncation=True, max_length=max_len,
                        split_special_tokens=True)
        word_ids = [enc.word_ids(i) for i in range(len(examples))]
        tags = [align_word_labels(w, [label2id[t] for t in tags_of(e)]) for w, e in zip(word_ids, examples, strict=True)]
        return EncodedSplit(enc["input_ids"], enc["token_type_ids"], tags, word_ids, [len(e.text) for e in examples])
    pairs = [e.text_pair for e in examples] if any(e.text_pair is not None for e in examples) else None
    enc = tokenizer([e.text for e in examples], pairs, truncation=True, max_length=max_len, split_special_tokens=True)
    labels = [target_of(e) if task_type == "regression" else label2id[class_of(e)] for e in examples]
    return EncodedSplit(enc["input_ids"], enc["token_type_ids"], labels)


def tags_of(e: Example) -> list[str]:
    """A tagging example's label: one tag per word."""
    assert isinstance(e.label, list), f"{e.source}: a tagging example's label is a list of tags"
    return e.label


def target_of(e: Example) -> float:
    """A regression example's label: its target, as a float."""
    assert not isinstance(e.label, list), f"{e.source}: a regression example's label is one number"
    return float(e.label)


def class_of(e: Example) -> str:
    """A classification example's label: its class name (not a tagging example's tags, nor a regression target)."""
    assert not isinstance(e.label, (list, float)), f"{e.source}: {e.label!r} is not a class name"
    return e.label


def collate(enc: EncodedSplit, rows: list[int], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    ids, mask = pad_rows([enc.input_ids[i] for i in rows], pad_id)  # (B, T)
    types = pad_values([enc.token_type_ids[i] for i in rows], 0)  # (B, T)
    if enc.word_ids is not None:  # tagging: per-piece labels, IGNORE_INDEX on padding
        labels = torch.from_numpy(pad_values([enc.labels[i] for i in rows], IGNORE_INDEX))  # (B, T)
    else:
        labels = torch.tensor([enc.labels[i] for i in rows])  # (B,)
    batch = {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(types),
             "attention_mask": torch.from_numpy(mask), "labels": labels}
    return {k: v.to(device) for k, v in batch.items()}  # ids (B, T); labels (B,) or (B, T)


# ---- predicting and scoring ----------------------------------------------------------------------

@torch.no_grad()
def predict(model, enc: EncodedSplit, cfg: FinetuneConfig, pad_id: int, device, autocast, fallback: int = 0
            ) -> tuple[list, int]:
    """Per-example predictions (class id, float, or one tag id per word) and the number of words that got
    no prediction because truncation cut them (they are given `fallback`)."""
    model.eval()
    batches = plan_batches([len(x) for x in enc.input_ids], batch_size=cfg.eval_batch_size,
                           max_batch_tokens=sys.maxsize)  # similar lengths batch together
    preds: list = [None] * len(enc)
    cut = 0
    for rows in batches:
        batch = collate(enc, rows, pad_id, device)
        with autocast():
            logits = model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                           attention_mask=batch["attention_mask"]).logits.float()  # (B, C) or (B, T, C)
        if cfg.task_type == "regression":
            values = logits[:, 0].tolist()
        else:
            values = logits.argmax(-1).tolist()
        for b, i in enumerate(rows):
            if enc.word_ids is None:
                preds[i] = values[b]
                continue
            assert enc.n_words is not None  # a tagging split has both
            words = pieces_to_words(enc.word_ids[i], values[b], enc.n_words[i], reduce="first")
            cut += sum(w is None for w in words)
            preds[i] = [fallback if w is None else w for w in words]
    model.train()
    return preds, cut


def score(task: Task, examples: list[Example], preds: list, labels: list[str]) -> dict[str, float]:
    if task.task_type == "regression":
        return task_metrics(task, [target_of(e) for e in examples], preds)
    if task.task_type == "tagging":
        return task_metrics(task, [e.label for e in examples], [[labels[t] for t in p] for p in preds])
    return task_metrics(task, [e.label for e in examples], [labels[p] for p in preds])


# ---- the loop ------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        check_out_dir(out, args.overwrite)
        task, data = build_task(args)
        model_dir = encoder_dir(args.model)
        tokenizer = load_tokenizer(model_dir)
        if task.task_type == "tagging" and not getattr(tokenizer, "is_fast", False):
            raise CheckpointError(f"tagging needs a fast tokenizer (tokenizer.json) in {str(model_dir)!r}")
        overrides = {k: getattr(args, k) for k in CONFIG_FLAGS if getattr(args, k) is not None}
        enc_cfg = json.loads((model_dir / "config.json").read_text())
        cfg = FinetuneConfig(task=task.name, task_type=task.task_type, model=str(model_dir), **overrides).resolved(
            enc_cfg["num_hidden_layers"], enc_cfg["hidden_size"])
        max_pos = int(enc_cfg.get("max_position_embeddings", 512))
        if cfg.max_seq_length > max_pos:
            raise ValueError(f"--max-seq-length {cfg.max_seq_length} exceeds the model's {max_pos} positions")
        model = finetuning_model(cfg, model_dir, data.labels)
    except (CheckpointError, TaskDataError, FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return train(cfg, data, model, tokenizer, out, args.device)


def train(cfg: FinetuneConfig, data: TaskData, model, tokenizer, out: Path, device: str | None = None) -> int:
    """Set up, run the epochs (keeping the best on dev), finish: exit status 0, or 1 when every dev score was NaN."""
    parts = setup(cfg, data, model, tokenizer, device)
    start = time.time()
    best, history = run_epochs(cfg, parts)
    if best["state"] is None:
        print(f"error: the dev {primary_metric(parts.task)} was NaN after every epoch (did training diverge? try a "
              "lower --lr)", file=sys.stderr)
        return 1
    finish(cfg, parts, best, history, out, time.time() - start)
    return 0


@dataclass(frozen=True)
class Parts:
    """What the epochs work on, built once by `setup`."""

    data: TaskData
    task: Task
    labels: list[str]
    label2id: dict[str, int]
    tokenizer: Any
    model: PreTrainedModel
    optimizer: torch.optim.Optimizer
    device: torch.device
    train_enc: EncodedSplit
    dev_enc: EncodedSplit
    total_steps: int
    warmup: int
    fallback: int  # tagging: the label of a word cut off by truncation (O, or the most frequent training tag)
    autocast: Callable[[], contextlib.AbstractContextManager]  # bf16 autocast, or nothing


def primary_metric(task: Task) -> str:
    """The dev metric that selects the best epoch: the task's first (`load_task_data` resolves them)."""
    assert task.metrics is not None, f"task {task.name}'s metrics are not resolved"
    return task.metrics[0]


def setup(cfg: FinetuneConfig, data: TaskData, model, tokenizer, device: str | None) -> Parts:
    """Encode the splits, put the model on its device, build the optimizer and the schedule's length."""
    task, labels = data.task, data.labels
    label2id = {n: i for i, n in enumerate(labels)}
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    train_enc = encode(data.train, tokenizer, cfg.task_type, label2id, cfg.max_seq_length)
    dev_enc = encode(data.dev, tokenizer, cfg.task_type, label2id, cfg.max_seq_length)
    fallback = 0
    if cfg.task_type == "tagging":
        counts = Counter(t for e in data.train for t in tags_of(e))
        fallback = label2id["O"] if "O" in label2id else label2id[counts.most_common(1)[0][0]]
    model.to(dev).train()
    optimizer = adamw(param_groups(model, cfg), cfg, fused=False)
    steps_per_epoch = math.ceil(len(train_enc) / cfg.batch_size)
    total_steps = cfg.epochs * steps_per_epoch
    autocast = (lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if cfg.precision == "bf16" \
        else contextlib.nullcontext
    print(f"{task.name}: {len(data.train)} train / {len(data.dev)} dev examples, {len(labels) or 'regression'} "
          f"labels, {total_steps} steps ({cfg.epochs} epochs x {steps_per_epoch}), lr {cfg.lr:g}, layer decay "
          f"{cfg.layer_decay}, selecting on dev {primary_metric(task)}", file=sys.stderr)
    return Parts(data, task, labels, label2id, tokenizer, model, optimizer, dev, train_enc, dev_enc, total_steps,
                 int(cfg.warmup_fraction * total_steps), fallback, autocast)


def run_epochs(cfg: FinetuneConfig, parts: Parts) -> tuple[dict, list[dict]]:
    """Train epoch by epoch, scoring dev after each: (the best epoch's score, weights and dev metrics; the
    per-epoch history). Stops after cfg.patience epochs without a better dev score."""
    model, optimizer, primary = parts.model, parts.optimizer, primary_metric(parts.task)
    pad_id, total_steps, warmup = parts.tokenizer.pad_token_id, parts.total_steps, parts.warmup
    generator = torch.Generator().manual_seed(cfg.seed)
    best: dict = {"score": -math.inf, "epoch": 0, "state": None, "dev": {}}
    history: list[dict] = []
    step = 0
    bar = tqdm(total=total_steps, desc=parts.task.name, unit="step", dynamic_ncols=True, disable=None)  # no TTY: off
    try:
        for epoch in range(1, cfg.epochs + 1):
            order = torch.randperm(len(parts.train_enc), generator=generator).tolist()
            loss_sum = 0.0
            for s in range(0, len(order), cfg.batch_size):
                # pretraining's schedule over warmup_fraction of the steps; each group keeps its layer's scale
                set_lr(optimizer, warmup_then_decay(step, cfg.lr, warmup, total_steps))
                batch = collate(parts.train_enc, order[s: s + cfg.batch_size], pad_id, parts.device)
                with parts.autocast():
                    loss = model(**batch).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                loss_sum += float(loss.detach())
                bar.update(1)
                bar.set_postfix(epoch=epoch, loss=f"{float(loss.detach()):.4f}")

            preds, cut = predict(model, parts.dev_enc, cfg, pad_id, parts.device, parts.autocast, parts.fallback)
            dev = score(parts.task, parts.data.dev, preds, parts.labels)
            n_batches = math.ceil(len(order) / cfg.batch_size)
            history.append({"epoch": epoch, "step": step, "train_loss": round(loss_sum / n_batches, 5),
                            "dev": {k: round(v, 5) for k, v in dev.items()}})
            improved = dev[primary] > best["score"]
            bar.write(f"epoch {epoch}: train loss {loss_sum / n_batches:.4f}, dev "
                      + ", ".join(f"{k} {v:.4f}" for k, v in dev.items()) + (" *" if improved else ""))
            if improved:
                best = {"score": dev[primary], "epoch": epoch, "dev": dev, "cut": cut,
                        "state": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}}
            elif cfg.patience and epoch - best["epoch"] >= cfg.patience:
                bar.write(f"no dev improvement for {cfg.patience} epochs; stopping (keeping epoch {best['epoch']})")
                break
    finally:
        bar.close()
    return best, history


def finish(cfg: FinetuneConfig, parts: Parts, best: dict, history: list[dict], out: Path, elapsed: float) -> None:
    """Keep the best epoch's weights, score the test split where there is one, write OUT/ atomically."""
    model, data, labels, task = parts.model, parts.data, parts.labels, parts.task
    model.load_state_dict(best["state"])
    result = {"task": task.name, "task_type": cfg.task_type, "model": cfg.model, "random_init": cfg.random_init,
              "labels": labels, "metric": primary_metric(task), "best_epoch": best["epoch"],
              "epochs_run": len(history), "train_examples": len(data.train), "dev_examples": len(data.dev),
              "files": data.files,
              "dev": {k: round(v, 5) for k, v in best["dev"].items()}, "history": history}
    if cfg.task_type == "tagging":
        result["dev_words_truncated"] = best["cut"]
    if data.test is not None:
        test_enc = encode(data.test, parts.tokenizer, cfg.task_type, parts.label2id, cfg.max_seq_length)
        preds, cut = predict(model, test_enc, cfg, parts.tokenizer.pad_token_id, parts.device, parts.autocast,
                             parts.fallback)
        result["test"] = {k: round(v, 5) for k, v in score(task, data.test, preds, labels).items()}
        result["test_examples"] = len(data.test)
        if cfg.task_type == "tagging":
            result["test_words_truncated"] = cut
    result["elapsed_s"] = round(elapsed, 1)

    model.config.architectures = [type(model).__name__]
    model.config.finetuning_task = task.name
    with atomic_dir(out) as tmp:
        model.to("cpu").save_pretrained(tmp)  # type: ignore[arg-type]  # transformers' stub of PreTrainedModel.to
        parts.tokenizer.save_pretrained(tmp)
        (tmp / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
        (tmp / FINETUNE_CONFIG).write_text(json.dumps(dataclasses.asdict(cfg), indent=2) + "\n")
    print(f"kept epoch {best['epoch']}: dev " + ", ".join(f"{k} {v:.4f}" for k, v in best["dev"].items())
          + (("; test " + ", ".join(f"{k} {v:.4f}" for k, v in result["test"].items())) if "test" in result else "")
          + f"\nwrote {out}")


if __name__ == "__main__":
    sys.exit(main())
