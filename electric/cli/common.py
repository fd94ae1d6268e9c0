"""What every scoring command of `electric` shares: the model options (a local --model, or a running --server),
loading the scorer, running a command with input errors as one line (exit 2), and small helpers (chunks, JSON
reports, output checks)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Generator, Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

EXIT_USAGE = 2


class InputError(ValueError):
    """A bad input file or argument, reported in one line."""



def model_options(p: argparse.ArgumentParser, default_method: str = "electric") -> None:
    from electric.batching import DEFAULT_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS
    from electric.client.client import API_KEY_ENV, DEFAULT_CONCURRENCY
    from electric.inference.methods import METHODS

    g = p.add_argument_group("model: a local --model, or a running --server")
    where = g.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", help="model directory, or a pretraining run directory")
    where.add_argument("--server", metavar="URL",
                       help="score with a running `electric serve` instead: http://HOST:PORT or grpc://HOST:PORT "
                            "(the same outputs as --model on the model it serves)")
    g.add_argument("--api-key", help=f"the server's API key (default ${API_KEY_ENV})")
    g.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY,
                   help=f"--server: requests in flight at once (default {DEFAULT_CONCURRENCY})")
    g.add_argument("--method", choices=METHODS,
                   help="electric: Electric PLL, one pass (sum of -s_t); electra: sum of log(1 - p_t), p_t the "
                        "replaced probability (calibrated for an export); cloze: sum of log q(x_t | x without t) from "
                        "an Electric run's two-tower cloze model (RUN/generator or its export), one pass; mlm-pll: "
                        "classic masked-LM PLL, one pass per token; mlm-pll-word-l2r: also masks the "
                        "rest of the word (Kauf & Ivanova 2023). Default: the model's only method when it has one "
                        f"(cloze for a cloze model or its export), else {default_method}; with --server, the one it "
                        "serves")
    p.set_defaults(default_method=default_method)
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


def progress_disable(args) -> bool | None:
    """tqdm's `disable`: True with --quiet, else None (bars only when stderr is a terminal)."""
    return True if args.quiet else None


def scorer_from_args(args):
    """The scorer of the model options (`model_options`): `electric.inference.scoring.load_scorer` after the
    cheap checks, with progress bars quiet as asked; with --server, the server's (`server_scorer`)."""
    if args.server is not None:
        return server_scorer(args)
    model_dir = check_model(args)  # before the slow imports
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


def server_scorer(args):
    """The --server's scorer (electric.cli.server_scorer), its method checked: --method, or the one it serves."""
    from electric.batching import DEFAULT_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS

    local = {"backend": "auto", "device": None, "batch_size": DEFAULT_BATCH_SIZE,
             "max_batch_tokens": DEFAULT_MAX_BATCH_TOKENS, "sliding_window": False}  # model_options' defaults
    given = [f"--{name.replace('_', '-')}" for name, default in local.items() if getattr(args, name) != default]
    if given:
        raise InputError(f"{', '.join(given)}: for a local --model; a --server batches and runs its model by its "
                         "own settings")
    positive("--concurrency", args.concurrency)
    from electric.cli.server_scorer import ServerScorer
    from electric.client import Client

    client = Client(args.server, args.api_key, concurrency=args.concurrency)
    scorer = ServerScorer(client, client.info(), args.truncate)
    if args.method is None:
        args.method = scorer.methods[0]
    elif args.method not in scorer.methods:
        raise InputError(f"--method {args.method}: {args.server} scores with {' or '.join(scorer.methods)}"
                         + (" (the mlm-pll methods need a local --model)" if args.method.startswith("mlm") else ""))
    return scorer


def scored_by(args) -> str:
    """What scored, as the reports name it: the --model directory, or the --server URL."""
    return str(args.model if args.server is None else args.server)


def check_not_ray(args) -> None:
    if args.server is not None and getattr(args, "ray", None) is not None:
        raise InputError("--ray scores with a local export on a Ray cluster; --server scores with a running server: "
                         "give one")


def positive(name: str, value: int) -> None:
    if value < 1:
        raise InputError(f"{name} must be at least 1, got {value}")


def run_command(fn, args) -> int:
    """Run a subcommand; input errors become one line on stderr and exit status 2."""
    from electric import CheckpointError, MissingExtra
    from electric.client import ClientError
    from electric.evaluation.nbest import NBestError
    from electric.inference.encoding import InputTooLongError

    prog = f"electric {args.command}" + (f" {args.eval_command}" if getattr(args, "eval_command", None) else "")
    try:
        if getattr(args, "method", "") is None and args.server is None:  # --method not given (model_options)
            from electric.inference.scoring import only_method

            args.method = only_method(args.model) or args.default_method
        return fn(args)
    except (InputError, NBestError, CheckpointError, MissingExtra, InputTooLongError, ClientError, OSError,
            ValueError) as e:
        if os.environ.get("ELECTRIC_DEBUG"):
            raise
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def chunks(it: Iterable, size: int) -> Iterator[list]:
    it = iter(it)
    while chunk := list(islice(it, size)):
        yield chunk


Item = TypeVar("Item")


def one_ahead(work: Callable[[Item], Any], items: Iterable[Item]) -> Generator[tuple[Item, Callable[[], Any]]]:
    """(item, its result's getter) for each of `items` in order, the next item's `work` running beside this one's
    while the caller uses it: a --server has the next chunk's requests queued behind this chunk's, and the records of
    one chunk are written while the next is scored. The getter returns `work(item)` or raises its error; an error,
    or the caller stopping, leaves the next item's work to finish unread (it writes nothing)."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(2, thread_name_prefix="electric-ahead")
    try:
        held = None
        for item in items:
            running = pool.submit(work, item)
            if held is not None:
                yield held
            held = (item, running.result)
        if held is not None:
            yield held
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def write_json(path: str, obj) -> None:
    """`obj` as indented JSON at `path` (its folder made), whole or not at all (`atomic_write_text`)."""
    from electric.textio import atomic_write_text

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(obj, indent=1, ensure_ascii=False) + "\n")


def scorer_dir(args) -> str:
    from electric.inference.scoring import model_dir_for_method

    return str(model_dir_for_method(args.model, args.method))


def check_model(args) -> Path:
    """The --model directory for --method, checked (cheap: no model is loaded, torch is not imported)."""
    from electric.inference.scoring import check_model_dir

    for name in ("batch_size", "max_batch_tokens"):
        positive(f"--{name.replace('_', '-')}", getattr(args, name))
    return check_model_dir(args.model, args.method, args.backend)


def check_output(path: str | None, flag: str) -> None:
    if path not in (None, "-") and Path(path).is_dir():
        raise InputError(f"{flag} {path}: is a directory, expected a file name")
