"""The `electric` command: score, rerank, eval, export, serve.

Each subcommand lives in its own module, which provides `add_parser(subparsers)`; the parser's
`func(args) -> int` runs it. Modules are imported only when their subcommand exists, so a missing
optional dependency breaks only that subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from electric import __version__

# subcommand module -> what it provides; each defines add_parser(subparsers)
SUBCOMMANDS = (
    "electric.commands.score",   # score, rerank, eval
    "electric.commands.export",  # export
    "server.cli",                # serve
)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="electric", description=__doc__.split("\n")[0])
    ap.add_argument("--version", action="version", version=f"electric {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and (e.name == name or name.startswith(e.name + ".")):
                continue  # not built yet
            raise
        module.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if not getattr(args, "func", None):
        ap.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
