"""`electric eval`: evaluate a scorer. BLiMP minimal pairs here; the other tasks (`nbest`, `detect`) live in
their own modules and add themselves with `add_eval_parser` (EVAL_TASKS).

    electric eval blimp --model runs/electric-tiny --data ../shared/data/blimp
    electric eval blimp --server http://127.0.0.1:8000 --data ../shared/data/blimp     # a running server
"""

from __future__ import annotations

import importlib
import json
import sys

from electric.cli.common import (
    EXIT_USAGE,
    model_options,
    positive,
    run_command,
    scored_by,
    scorer_from_args,
    write_json,
)

# modules that add a task to `electric eval` with add_eval_parser(eval_subparsers)
EVAL_TASKS = ("electric.cli.rerank", "electric.cli.eval_detect")



def cmd_eval_blimp(args) -> int:
    from electric.evaluation.blimp import blimp_accuracy, read_blimp

    if args.limit is not None:
        positive("--limit", args.limit)
    sets = read_blimp(args.data, args.limit)
    scorer = scorer_from_args(args)

    def score_fn(texts):
        return [s.score for s in scorer.score(texts, method=args.method)]

    res = blimp_accuracy(sets, score_fn, progress=not args.quiet and sys.stderr.isatty())
    report = {"model": scored_by(args), "method": args.method, "data": str(args.data), "limit": args.limit, **res}
    if args.report:
        write_json(args.report, report)
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


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("eval", help="evaluate a scorer: BLiMP minimal pairs or n-best reranking")
    sub = p.add_subparsers(dest="eval_command", metavar="TASK")
    b = sub.add_parser("blimp", help="accuracy on BLiMP minimal pairs (good sentence must score higher)")
    model_options(b)
    b.add_argument("--data", required=True, help="directory of BLiMP .jsonl sets (or one file)")
    b.add_argument("--limit", type=int, help="first N pairs of each set")
    b.add_argument("--report", help="write the JSON report here")
    b.add_argument("--json", action="store_true", help="print the JSON report")
    b.set_defaults(func=lambda a: run_command(cmd_eval_blimp, a))
    for name in EVAL_TASKS:  # other `electric eval` tasks living in their own modules
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and (e.name == name or name.startswith(e.name + ".")):
                continue
            raise
        module.add_eval_parser(sub)
    p.set_defaults(func=lambda a: (p.print_help(), EXIT_USAGE)[1])
