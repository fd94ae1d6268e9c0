"""`electric rerank` and `electric eval nbest`: n-best lists reranked by one library call
(`electric.evaluation.nbest.rerank_nbest`), the reranked lists written (rerank) and the report (`RerankReport`)
printed.

    electric rerank --model runs/electric-tiny --nbest lists.json --out reranked.json [--dev dev.json |
        --dev-fraction 0.5 --seed 0] [--report report.json]
    electric eval nbest --model runs/electric-tiny --nbest lists.json
    electric eval nbest --server http://127.0.0.1:8000 --nbest lists.json     # scored by a running server
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from electric.cli.common import (
    InputError,
    check_not_ray,
    check_output,
    model_options,
    positive,
    run_command,
    scored_by,
    scorer_from_args,
    write_json,
)


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
    from electric.evaluation.nbest.report import ReportInput, ReportOutput

    # every report needs the metric (the score extra): say so before reading, loading or scoring anything
    require_metric(args.metric, f"electric {'rerank' if write else 'eval nbest'}")
    check_not_ray(args)
    positive("--chunk-size", args.chunk_size)
    for path, flag in ((getattr(args, "out", None), "--out"), (args.report, "--report")):
        check_output(path, flag)
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
    if getattr(args, "ray", None) is not None:  # every distinct hypothesis in one job, a shard per chunk
        from electric.cli.ray_score import ray_score_texts

        score_texts, chunk_size = ray_score_texts(args), sys.maxsize
    else:
        from electric.inference.records import text_scores

        scorer = scorer_from_args(args)

        def score_texts(texts):  # as the Ray actors score a shard: the same batches, so the same scores
            return text_scores(scorer, texts, args.method)

    result = rerank_nbest(lists, score_texts, options, dev_lists=dev_lists, path=args.nbest, dev_path=args.dev,
                          chunk_size=chunk_size, progress=not args.quiet and sys.stderr.isatty())
    if result.unscored:
        n = len(result.unscored)
        print(f"note: {n} distinct hypothes{'es' if n != 1 else 'is'} had no token to score (blank, or only "
              f"characters the tokenizer drops, e.g. {result.unscored[0]!r}): LM score null, ranked last, never "
              "chosen", file=sys.stderr)
    output = None
    if write:
        dropped = unreorderable_fields(lists)  # one entry per hypothesis in some lists only: cannot follow them
        write_nbest([reranked_nbest(nb, r, dropped) for nb, r in zip(lists, result.reranked, strict=True)],
                    args.out, args.out_format or fmt)
        output = ReportOutput(str(args.out), sum(r.tied for r in result.reranked), dropped)
    report = replace(result.report, source=ReportInput(scored_by(args), args.method, str(args.nbest), fmt),
                     output=output)
    if args.report:
        write_json(args.report, report.to_dict())
    if args.json:
        print(json.dumps(report.to_dict(), indent=1, ensure_ascii=False))
    else:
        _print_nbest_summary(args, report, len(lists))
    return 0


def _print_nbest_summary(args, report, num_lists: int) -> None:
    print(report.text())
    if "test" not in report.tuning and "dev" not in report.tuning:
        print("no references, so no error rates")
    out = report.output
    if out is not None:
        ties = f"; {out.ties} tied choices (the earlier position won)" if out.ties else ""
        print(f"reranked lists ({num_lists} utterances, {args.out_format or report.source.format}) -> {out.out}{ties}")
        if out.dropped_fields:
            print(f"note: dropped from {out.out}: {', '.join(out.dropped_fields)} (one entry per "
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


def add_parser(subparsers) -> None:
    from electric.cli.ray_score import add_ray_options

    p = subparsers.add_parser("rerank", help="rerank n-best lists with an LM score, tuning the weights on dev",
                              description="Rerank n-best lists by a(h) + lm*LM(h) + length*words(h); tune the weights "
                                          "on a dev split, write the reranked lists and print the report.")
    model_options(p)
    _nbest_options(p, write=True)
    add_ray_options(p, score=False)
    p.set_defaults(func=lambda a: run_command(cmd_rerank, a))


def add_eval_parser(eval_subparsers) -> None:
    """`electric eval nbest`."""
    n = eval_subparsers.add_parser("nbest", help="the rerank report (first-hypothesis, oracle, reranked) without "
                                                 "writing lists")
    model_options(n)
    _nbest_options(n, write=False)
    n.set_defaults(func=lambda a: run_command(cmd_eval_nbest, a))
