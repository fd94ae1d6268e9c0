"""`electric score`: score each line of a file (one JSON object a line).

    electric score --model runs/electric-tiny [--method electric|electra|cloze|mlm-pll|mlm-pll-word-l2r] \\
        [--per-token] [FILE|-] > scores.jsonl
    electric score --server http://127.0.0.1:8000 [--api-key KEY] FILE > scores.jsonl     # a running server

`--model` is a model directory or a pretraining run directory (RUN/discriminator is used for electric and
electra, RUN/generator for cloze and the mlm-pll methods); `--server URL` scores with a running `electric serve`
instead, writing the same records (electric/cli/server_scorer.py). Errors in inputs print one line naming the file
and item and exit 2 (set ELECTRIC_DEBUG=1 for a traceback). `--ray` scores the same records on a Ray cluster
(electric/cli/ray_score.py). `electric rerank` and `electric eval` live in electric/cli/rerank.py and
electric/cli/evaluate.py; the model options, loading and one-line errors they share, in electric/cli/common.py.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import IO

from electric.cli.common import (
    InputError,
    check_not_ray,
    check_output,
    chunks,
    model_options,
    one_ahead,
    positive,
    progress_disable,
    run_command,
    scorer_dir,
    scorer_from_args,
)


def _score_output(out: str | None) -> contextlib.AbstractContextManager[IO[str]]:
    """Where `electric score` writes its lines as it goes: stdout; a FIFO or a device (/dev/stdout) in place; else a
    file complete or absent (`atomic_file`): a failed run leaves no empty or partial --out, and an earlier one whole."""
    from electric.textio import atomic_file

    if out in (None, "-"):
        return contextlib.nullcontext(sys.stdout)
    if Path(out).exists() and not Path(out).is_file():
        return open(out, "w", encoding="utf-8")  # noqa: SIM115 - the caller's `with` closes it
    return atomic_file(out)


def cmd_score(args) -> int:
    check_not_ray(args)
    if args.ray is not None:  # the same records, scored on a Ray cluster
        from electric.cli.ray_score import cmd_score_ray

        return cmd_score_ray(args)
    from electric.textio import check_text_file, iter_lines

    # arguments and files first, then the model (scorer_from_args checks its directory first): a typo costs well
    # under a second
    positive("--chunk-size", args.chunk_size)
    check_output(args.out, "--out")
    if args.out not in (None, "-") and not Path(args.out).parent.is_dir():  # a typo must not make folders
        raise InputError(f"--out {args.out}: the folder {Path(args.out).parent} does not exist; create it first")
    src = args.input
    total = check_text_file(src) if src != "-" else None
    from tqdm.auto import tqdm

    from electric.client import RejectedInput
    from electric.inference.encoding import InputTooLongError
    from electric.inference.records import score_records

    scorer = scorer_from_args(args)
    where = "stdin" if src == "-" else src
    fin = getattr(sys.stdin, "buffer", sys.stdin) if src == "-" else open(src, "rb")  # noqa: SIM115 - closed below
    bar = tqdm(total=total, unit="line", desc="scoring", disable=progress_disable(args), dynamic_ncols=True,
               file=sys.stderr)
    n = 0
    blank: list[int] = []  # line numbers of blank lines (not scored)
    no_token: list[int] = []  # line numbers of lines the tokenizer keeps nothing of (not scored)

    def records(chunk: list[str]) -> tuple[list[dict], list[int], list[int]]:
        return score_records(scorer, chunk, args.method, args.per_token)

    lines = chunks(iter_lines(fin, where), args.chunk_size)
    # a --server scores the next chunk while this one is written; a local model has the cores to itself
    scored = one_ahead(records, lines) if args.server is not None else \
        ((chunk, lambda chunk=chunk: records(chunk)) for chunk in lines)
    encode = json.JSONEncoder(ensure_ascii=False).encode
    try:
        with _score_output(args.out) as fout:
            for chunk, result in scored:
                try:
                    rows, chunk_blank, chunk_no_token = result()
                except InputTooLongError as e:
                    raise InputError(f"{where}: line {n + e.index + 1} has {e.describe()}; pass --truncate"
                                     + (" or --sliding-window" if args.server is None else "")) from e
                except RejectedInput as e:  # by the --server; its index is among the lines that are not blank
                    if e.index is None:
                        raise
                    line = n + [i for i, t in enumerate(chunk) if t.strip()][e.index] + 1
                    raise InputError(f"{where}: line {line} {e.reason} ({e.where})") from e
                blank += [n + i + 1 for i in chunk_blank]
                no_token += [n + i + 1 for i in chunk_no_token]
                fout.write("".join(encode(r) + "\n" for r in rows))
                fout.flush()
                n += len(chunk)
                bar.update(len(chunk))
    finally:
        scored.close()
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
    if not args.quiet:
        scored_lines = n - len(blank) - len(no_token)
        print(f"scored {scored_lines} line{'s' if scored_lines != 1 else ''} with {args.method} "
              f"({_scored_by(args, scorer)})", file=sys.stderr)
    return 0


def _scored_by(args, scorer) -> str:
    if args.server is not None:
        return f"the server at {args.server}"
    from electric.inference.scoring import MaskedLMScorer

    kind = "masked LM" if isinstance(scorer, MaskedLMScorer) else f"{scorer.backend.kind} model"
    return f"{kind} {scorer_dir(args)}"


def add_parser(subparsers) -> None:
    from electric.cli.ray_score import add_ray_options

    p = subparsers.add_parser("score", help="score each line of a file (one JSON object a line)",
                              description="Score each input line: one JSON object a line with text, score (higher "
                                          "= more likely), mean, num_tokens and, with --per-token, per-token scores "
                                          "with character offsets. Reads lazily and writes as it goes.")
    p.add_argument("input", nargs="?", default="-", help="text file, one text a line (default: stdin)")
    model_options(p)
    p.add_argument("--per-token", action="store_true",
                   help="per-token scores (electra: replaced probabilities per token and per word)")
    p.add_argument("--out", help="write JSON lines here (default: stdout)")
    p.add_argument("--chunk-size", type=int, default=1024, help="lines read and scored at a time (default 1024)")
    add_ray_options(p, score=True)
    p.set_defaults(func=lambda a: run_command(cmd_score, a))
