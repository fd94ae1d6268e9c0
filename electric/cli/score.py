"""`electric score`, `electric rerank`, `electric eval blimp`, `electric eval nbest`.

    electric score --model runs/electric-tiny [--method electric|electra|cloze|mlm-pll|mlm-pll-word-l2r] \\
        [--per-token] [FILE|-] > scores.jsonl
    electric rerank --model runs/electric-tiny --nbest lists.json --out reranked.json [--dev dev.json |
        --dev-fraction 0.5 --seed 0] [--report report.json]
    electric eval blimp --model runs/electric-tiny --data ../shared/data/blimp
    electric eval nbest --model runs/electric-tiny --nbest lists.json

`--model` is a model directory or a pretraining run directory (RUN/discriminator is used for electric and
electra, RUN/generator for cloze and mlm-pll). Errors in inputs print one line naming the file and item and exit 2
(set ELECTRIC_DEBUG=1 for a traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import IO

from electric.evaluation.blimp import blimp_accuracy, read_blimp  # noqa: F401 - benchmarks/equal_compute.py imports them from here

EXIT_USAGE = 2
# modules that add a task to `electric eval` with add_eval_parser(eval_subparsers)
EVAL_PLUGINS = ("electric.cli.eval_detect",)


class InputError(ValueError):
    """A bad input file or argument, reported in one line."""


# ---- shared options and helpers -----------------------------------------------------------------------


def _model_options(p: argparse.ArgumentParser, default_method: str = "electric") -> None:
    from electric.batching import DEFAULT_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS
    from electric.inference.scoring import METHODS

    g = p.add_argument_group("model")
    g.add_argument("--model", required=True, help="model directory, or a pretraining run directory")
    g.add_argument("--method", choices=METHODS, default=default_method,
                   help="electric: Electric PLL, one pass (sum of -s_t); electra: sum of log(1 - p_t), p_t the "
                        "replaced probability (calibrated for an export); cloze: sum of log q(x_t | x without t) from "
                        "an Electric run's two-tower cloze model (RUN/generator or its export), one pass; mlm-pll: "
                        "classic masked-LM PLL, one pass per token; mlm-pll-word-l2r: also masks the "
                        f"rest of the word (Kauf & Ivanova 2023). Default {default_method}")
    g.add_argument("--backend", choices=("auto", "torch", "onnx"), default="auto",
                   help="auto: onnx for an `electric export` directory, torch otherwise (mlm-pll: torch only)")
    g.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    g.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                   help=f"most rows per forward pass (default {DEFAULT_BATCH_SIZE})")
    g.add_argument("--max-batch-tokens", type=int, default=DEFAULT_MAX_BATCH_TOKENS,
                   help=f"most padded tokens per forward pass (default {DEFAULT_MAX_BATCH_TOKENS})")
    long = g.add_mutually_exclusive_group()
    long.add_argument("--truncate", action="store_true", help="score only the first tokens of too-long inputs")
    long.add_argument("--sliding-window", action="store_true",
                      help="score too-long inputs with overlapping windows (each token once, most context)")
    g.add_argument("--quiet", action="store_true", help="no progress bars")


def _progress_disable(args) -> bool | None:
    """tqdm's `disable`: True with --quiet, else None (bars only when stderr is a terminal)."""
    return True if args.quiet else None


def _load_scorer(args):
    model_dir = _check_model(args)  # before the slow imports
    from electric.cli import quiet_progress_bars
    from electric.inference.backend import resolve_backend
    from electric.inference.scoring import MLM_METHODS, load_scorer

    if args.method in MLM_METHODS or resolve_backend(model_dir, args.backend) == "torch":
        # transformers loads the model: no weight-loading bar. (An ONNX export needs no transformers at all; without
        # it installed, loading a checkpoint says which extra to install.)
        with contextlib.suppress(ImportError):
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
    if args.quiet:
        quiet_progress_bars()
    return load_scorer(args.model, args.method, backend=args.backend, device=args.device,
                       max_batch_tokens=args.max_batch_tokens, batch_size=args.batch_size,
                       truncate=args.truncate, sliding_window=args.sliding_window)


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise InputError(f"{name} must be at least 1, got {value}")


def _run(fn, args) -> int:
    """Run a subcommand; input errors become one line on stderr and exit status 2."""
    from electric.checkpoint import CheckpointError, MissingExtra
    from electric.evaluation.nbest import NBestError
    from electric.inference.encoding import InputTooLongError

    prog = f"electric {args.command}" + (f" {args.eval_command}" if getattr(args, "eval_command", None) else "")
    try:
        return fn(args)
    except (InputError, NBestError, CheckpointError, MissingExtra, InputTooLongError, OSError, ValueError) as e:
        if os.environ.get("ELECTRIC_DEBUG"):
            raise
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _chunks(it: Iterable, size: int) -> Iterator[list]:
    it = iter(it)
    while chunk := list(islice(it, size)):
        yield chunk


def _write_json(path: str, obj) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(p)


def scorer_dir(args) -> str:
    from electric.inference.scoring import model_dir_for_method

    return str(model_dir_for_method(args.model, args.method))


# ---- electric score -----------------------------------------------------------------------------------


def _check_model(args) -> Path:
    """The --model directory for --method, checked (cheap: no model is loaded, torch is not imported)."""
    from electric.inference.scoring import check_model_dir

    for name in ("batch_size", "max_batch_tokens"):
        _positive(f"--{name.replace('_', '-')}", getattr(args, name))
    return check_model_dir(args.model, args.method, args.backend)


def _check_output(path: str | None, flag: str) -> None:
    if path not in (None, "-") and Path(path).is_dir():
        raise InputError(f"{flag} {path}: is a directory, expected a file name")


def _score_output(out: str | None) -> contextlib.AbstractContextManager[IO[str]]:
    """Where `electric score` writes its lines as it goes: stdout; a FIFO or a device (/dev/stdout) in place; else a
    file complete or absent (`atomic_file`): a failed run leaves no empty or partial --out, and an earlier one whole."""
    from electric.checkpoint import atomic_file

    if out in (None, "-"):
        return contextlib.nullcontext(sys.stdout)
    if Path(out).exists() and not Path(out).is_file():
        return open(out, "w", encoding="utf-8")  # noqa: SIM115 - the caller's `with` closes it
    return atomic_file(out)


def cmd_score(args) -> int:
    if args.ray is not None:  # the same records, scored on a Ray cluster
        from electric.cli.ray_score import cmd_score_ray

        return cmd_score_ray(args)
    from electric.textio import check_text_file, iter_lines

    # arguments and files first, then the model (_load_scorer checks its directory first): a typo costs well
    # under a second
    _positive("--chunk-size", args.chunk_size)
    _check_output(args.out, "--out")
    if args.out not in (None, "-") and not Path(args.out).parent.is_dir():  # a typo must not make folders
        raise InputError(f"--out {args.out}: the folder {Path(args.out).parent} does not exist; create it first")
    src = args.input
    total = check_text_file(src) if src != "-" else None
    from tqdm.auto import tqdm

    from electric.inference.encoding import InputTooLongError
    from electric.inference.records import score_records
    from electric.inference.scoring import MaskedLMScorer

    scorer = _load_scorer(args)
    where = "stdin" if src == "-" else src
    fin = getattr(sys.stdin, "buffer", sys.stdin) if src == "-" else open(src, "rb")  # noqa: SIM115 - closed below
    bar = tqdm(total=total, unit="line", desc="scoring", disable=_progress_disable(args), dynamic_ncols=True,
               file=sys.stderr)
    n = 0
    blank: list[int] = []  # line numbers of blank lines (not scored)
    no_token: list[int] = []  # line numbers of lines the tokenizer keeps nothing of (not scored)
    try:
        with _score_output(args.out) as fout:
            for chunk in _chunks(iter_lines(fin, where), args.chunk_size):
                try:
                    rows, chunk_blank, chunk_no_token = score_records(scorer, chunk, args.method, args.per_token)
                except InputTooLongError as e:
                    raise InputError(f"{where}: line {n + e.index + 1} has {e.count()} tokens ([CLS] and [SEP] "
                                     f"included), more than the model's maximum of {e.max_length}; pass --truncate "
                                     "or --sliding-window") from e
                blank += [n + i + 1 for i in chunk_blank]
                no_token += [n + i + 1 for i in chunk_no_token]
                fout.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
                fout.flush()
                n += len(chunk)
                bar.update(len(chunk))
    finally:
        bar.close()
        if fin is not sys.stdin and src != "-":
            fin.close()
    if blank:
        shown = ", ".join(map(str, blank[:10])) + (", ..." if len(blank) > 10 else "")
        print(f"note: {len(blank)} blank line{'s' if len(blank) != 1 else ''} of {where} got no score (\"score\": null, "
              f"with an \"error\"): line{'s' if len(blank) != 1 else ''} {shown}", file=sys.stderr)
    if no_token:
        shown = ", ".join(map(str, no_token[:10])) + (", ..." if len(no_token) > 10 else "")
        print(f"note: {len(no_token)} line{'s' if len(no_token) != 1 else ''} of {where} had no token to score (only "
              f"characters the tokenizer drops) and got no score (\"score\": null, with an \"error\"): "
              f"line{'s' if len(no_token) != 1 else ''} {shown}", file=sys.stderr)
    kind = "masked LM" if isinstance(scorer, MaskedLMScorer) else f"{scorer.backend.kind} model"
    if not args.quiet:
        scored_lines = n - len(blank) - len(no_token)
        print(f"scored {scored_lines} line{'s' if scored_lines != 1 else ''} with {args.method} ({kind} "
              f"{scorer_dir(args)})", file=sys.stderr)
    return 0


# ---- electric rerank / eval nbest ---------------------------------------------------------------------


def _grid(text: str | None, default, name: str):
    if text is None:
        return default
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise InputError(f"{name}: expected comma-separated numbers, got {text!r}") from e
    if not vals:
        raise InputError(f"{name} is empty")
    return vals


def _nbest_job(args, *, write: bool) -> int:
    from electric.evaluation.nbest import (
        DEFAULT_LENGTH_GRID,
        DEFAULT_LM_GRID,
        RerankOptions,
        Weights,
        read_nbest,
        require_metric,
        require_refs,
        rerank_nbest,
        reranked_nbest,
        unreorderable_fields,
        write_nbest,
    )

    # every report needs the metric (the score extra): say so before reading, loading or scoring anything
    require_metric(args.metric, f"electric {'rerank' if write else 'eval nbest'}")
    _positive("--chunk-size", args.chunk_size)
    for path, flag in ((getattr(args, "out", None), "--out"), (args.report, "--report")):
        _check_output(path, flag)
    lists, fmt = read_nbest(args.nbest, args.format, refs=args.refs)
    fixed = [args.lm_weight, args.length_weight]
    if any(v is not None for v in fixed) and (args.dev or args.dev_fraction is not None):
        raise InputError("give either fixed weights (--lm-weight/--length-weight) or a dev split to tune on, not both")
    if args.beta is not None and args.prior != "rank":
        raise InputError("--beta weighs the rank prior, which only --prior rank applies (say so when the lists' "
                         "order is a first-pass order)")
    beta = 1.0 if args.beta is None else args.beta
    weights = None
    if any(v is not None for v in fixed):  # given weights use the sum unless --lm-score mean says otherwise
        weights = Weights(lm=args.lm_weight or 0.0, length=args.length_weight or 0.0, beta=beta, prior=args.prior,
                          lm_score="mean" if args.lm_score == "mean" else "sum")
    dev_lists = None
    if weights is None:
        if args.dev:
            dev_lists, dev_fmt = read_nbest(args.dev, args.format, refs=args.dev_refs)
            require_refs(dev_lists, args.dev, dev_fmt)
        require_refs(lists, args.nbest, fmt)
    elif not write:
        require_refs(lists, args.nbest, fmt)
    options = RerankOptions(
        metric=args.metric, weights=weights, lm_score=args.lm_score,
        dev_fraction=args.dev_fraction if args.dev_fraction is not None else 0.5, seed=args.seed,
        lm_grid=_grid(args.lm_grid, DEFAULT_LM_GRID, "--lm-grid"),
        length_grid=_grid(args.length_grid, DEFAULT_LENGTH_GRID, "--length-grid"), beta=beta, prior=args.prior,
        need_refs=not write)

    chunk_size = args.chunk_size
    if getattr(args, "ray", None) is not None:  # every distinct hypothesis in one job on a Ray cluster
        from electric.cli.ray_score import ray_score_texts

        score_texts, chunk_size = ray_score_texts(args), sys.maxsize
    else:
        scorer = _load_scorer(args)

        def score_texts(texts):
            return scorer.score(texts, method=args.method)

    result = rerank_nbest(lists, score_texts, options, dev_lists=dev_lists, path=args.nbest, dev_path=args.dev,
                          chunk_size=chunk_size, progress=not args.quiet and sys.stderr.isatty())
    if result.unscored:
        n = len(result.unscored)
        print(f"note: {n} distinct hypothes{'es' if n != 1 else 'is'} had no token to score (blank, or only "
              f"characters the tokenizer drops, e.g. {result.unscored[0]!r}): LM score null, ranked last, never "
              "chosen", file=sys.stderr)
    report = {"model": str(args.model), "method": args.method, "nbest": str(args.nbest), "format": fmt,
              **result.report}
    if write:
        dropped = unreorderable_fields(lists)  # one entry per hypothesis in some lists only: cannot follow them
        write_nbest([reranked_nbest(nb, r, dropped) for nb, r in zip(lists, result.reranked, strict=True)],
                    args.out, args.out_format or fmt)
        report.update(out=str(args.out), out_ties=sum(r.tied for r in result.reranked), out_dropped_fields=dropped)
    if args.report:
        _write_json(args.report, report)
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        _print_nbest_summary(args, report, len(lists), fmt, write)
    return 0


def _print_nbest_summary(args, report: dict, num_lists: int, fmt: str, write: bool) -> None:
    from electric.evaluation.nbest import format_report

    print(format_report(report))
    if "test" not in report and "dev" not in report:
        print("no references, so no error rates")
    if write:
        ties = f"; {report['out_ties']} tied choices (the earlier position won)" if report["out_ties"] else ""
        print(f"reranked lists ({num_lists} utterances, {args.out_format or fmt}) -> {args.out}{ties}")
        if report["out_dropped_fields"]:
            print(f"note: dropped from {args.out}: {', '.join(report['out_dropped_fields'])} (one entry per "
                  "hypothesis in some lists only, so they cannot be reordered with the hypotheses)")
    if args.report:
        print(f"report -> {args.report}")


def cmd_rerank(args) -> int:
    return _nbest_job(args, write=True)


def cmd_eval_nbest(args) -> int:
    return _nbest_job(args, write=False)


def _nbest_options(p: argparse.ArgumentParser, write: bool) -> None:
    from electric.evaluation.nbest import FORMATS, METRICS

    g = p.add_argument_group("n-best lists")
    g.add_argument("--nbest", required=True, help="n-best file (HyPoradise JSON, ESPnet/mlm-scoring JSON or text)")
    g.add_argument("--format", choices=("auto", *FORMATS), default="auto", help="input format (default: detect)")
    g.add_argument("--refs", help="references, one a line per utterance (for plain text lists)")
    if write:
        g.add_argument("--out", required=True, help="where to write the reranked lists")
        g.add_argument("--out-format", choices=FORMATS, help="output format (default: the input's)")
    g.add_argument("--metric", choices=METRICS, default="wer", help="tuning and report metric (default wer; "
                                                                  "bleu or chrf for translation)")
    t = p.add_argument_group("weights: total = a + lm*LM + length*words, a = first-pass score, -beta*rank "
                             "(--prior rank) or 0")
    split = t.add_mutually_exclusive_group()
    split.add_argument("--dev", help="tune on this n-best file (same format) and report on all of --nbest")
    split.add_argument("--dev-fraction", type=float,
                       help="tune on this seeded fraction of --nbest, report on the rest (default 0.5)")
    t.add_argument("--dev-refs", help="references for a plain text --dev file")
    t.add_argument("--seed", type=int, default=0, help="seed of the dev split and of the bootstrap that decides "
                                                      "whether the LM is used (default 0)")
    t.add_argument("--lm-weight", type=float, help="fixed LM weight: no tuning")
    t.add_argument("--length-weight", type=float, help="fixed per-word bonus: no tuning")
    t.add_argument("--prior", choices=("none", "rank"), default="none",
                   help="lists without first-pass scores: 'rank' when their order is a first-pass order (best "
                        "first; a = -beta*rank), 'none' (default) when it means nothing (LM + word bonus alone)")
    t.add_argument("--beta", type=float, help="weight of the rank prior of --prior rank (default 1)")
    t.add_argument("--lm-score", choices=("auto", "sum", "mean"), default="auto",
                   help="LM score: sum over tokens (the PLL), or its mean per token (length-normalised); auto "
                        "(default) tunes both and keeps the one better on dev; with fixed weights auto = sum")
    t.add_argument("--lm-grid", help="LM weights to try, comma-separated (default 0 and 1e-4 .. 1e3, 4 a decade)")
    t.add_argument("--length-grid", help="per-word bonus to try, in LM-score units (length = lm * g), "
                                         "comma-separated (default -4 .. 16)")
    o = p.add_argument_group("output")
    o.add_argument("--report", help="write the full JSON report (with the dev/test utterance ids) here")
    o.add_argument("--json", action="store_true", help="print the JSON report instead of the summary")
    o.add_argument("--chunk-size", type=int, default=2048, help="hypotheses scored per chunk (default 2048)")


# ---- electric eval blimp ------------------------------------------------------------------------------


def cmd_eval_blimp(args) -> int:
    if args.limit is not None:
        _positive("--limit", args.limit)
    sets = read_blimp(args.data, args.limit)
    scorer = _load_scorer(args)

    def score_fn(texts):
        return [s.score for s in scorer.score(texts, method=args.method)]

    res = blimp_accuracy(sets, score_fn, progress=not args.quiet and sys.stderr.isatty())
    report = {"model": str(args.model), "method": args.method, "data": str(args.data), "limit": args.limit, **res}
    if args.report:
        _write_json(args.report, report)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    width = max(len(k) for k in [*res["sets"], *res["fields"], "overall"])
    for k, v in res["sets"].items():
        ties = f", {v['ties']} ties" if v["ties"] else ""
        field = f"; {v['field']}" if "field" in v else ""
        print(f"{k:<{width}}  {v['accuracy']:6.2f}%  ({v['pairs']} pairs{ties}{field})")
    if res["fields"]:
        print("by field (pairs pooled over its sets):")
    for k, v in res["fields"].items():
        ties = f", {v['ties']} ties" if v["ties"] else ""
        print(f"{k:<{width}}  {v['accuracy']:6.2f}%  ({v['pairs']} pairs, {v['sets']} set{'s' if v['sets'] != 1 else ''}"
              f"{ties})")
    o = res["overall"]
    print(f"{'overall':<{width}}  {o['accuracy']:6.2f}%  ({o['pairs']} pairs; mean over {len(res['sets'])} sets "
          f"{o['macro_accuracy']:.2f}%)")
    return 0


# ---- parsers -----------------------------------------------------------------------------------------


def add_parser(subparsers) -> None:
    from electric.cli.ray_score import add_ray_options

    p = subparsers.add_parser("score", help="score each line of a file (one JSON object a line)",
                              description="Score each input line: one JSON object a line with text, score (higher "
                                          "= more likely), mean, num_tokens and, with --per-token, per-token scores "
                                          "with character offsets. Reads lazily and writes as it goes.")
    p.add_argument("input", nargs="?", default="-", help="text file, one text a line (default: stdin)")
    _model_options(p)
    p.add_argument("--per-token", action="store_true",
                   help="per-token scores (electra: replaced probabilities per token and per word)")
    p.add_argument("--out", help="write JSON lines here (default: stdout)")
    p.add_argument("--chunk-size", type=int, default=1024, help="lines read and scored at a time (default 1024)")
    add_ray_options(p, score=True)
    p.set_defaults(func=lambda a: _run(cmd_score, a))

    p = subparsers.add_parser("rerank", help="rerank n-best lists with an LM score, tuning the weights on dev",
                              description="Rerank n-best lists by a(h) + lm*LM(h) + length*words(h); tune the weights "
                                          "on a dev split, write the reranked lists and print the report.")
    _model_options(p)
    _nbest_options(p, write=True)
    add_ray_options(p, score=False)
    p.set_defaults(func=lambda a: _run(cmd_rerank, a))

    p = subparsers.add_parser("eval", help="evaluate a scorer: BLiMP minimal pairs or n-best reranking")
    sub = p.add_subparsers(dest="eval_command", metavar="TASK")
    b = sub.add_parser("blimp", help="accuracy on BLiMP minimal pairs (good sentence must score higher)")
    _model_options(b)
    b.add_argument("--data", required=True, help="directory of BLiMP .jsonl sets (or one file)")
    b.add_argument("--limit", type=int, help="first N pairs of each set")
    b.add_argument("--report", help="write the JSON report here")
    b.add_argument("--json", action="store_true", help="print the JSON report")
    b.set_defaults(func=lambda a: _run(cmd_eval_blimp, a))
    n = sub.add_parser("nbest", help="the rerank report (first-hypothesis, oracle, reranked) without writing lists")
    _model_options(n)
    _nbest_options(n, write=False)
    n.set_defaults(func=lambda a: _run(cmd_eval_nbest, a))
    for name in EVAL_PLUGINS:  # other `electric eval` tasks living in their own modules
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and (e.name == name or name.startswith(e.name + ".")):
                continue
            raise
        module.add_eval_parser(sub)
    p.set_defaults(func=lambda a: (p.print_help(), EXIT_USAGE)[1])
