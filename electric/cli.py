"""The `electric` command: score, rerank, eval, export, serve.

Each subcommand lives in its own module, which provides `add_parser(subparsers)`; the parser's
`func(args) -> int` runs it. The library's own modules are listed here; other packages add theirs through
the `electric.commands` entry point group (pyproject.toml: `serve = "server.cli:add_parser"`, registered when
the project is installed), so the library never names the server. Modules are imported only when the parser
is built, and each keeps its heavy imports inside its `func`, so a missing optional dependency breaks only
that subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import entry_points

from electric import __version__

# subcommand module -> what it provides; each defines add_parser(subparsers)
SUBCOMMANDS = (
    "electric.commands.score",   # score, rerank, eval
    "electric.commands.export",  # export
)
PLUGINS = "electric.commands"  # entry point group: name -> add_parser(subparsers) of another package (serve)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="electric", description=__doc__.split("\n")[0])
    ap.add_argument("--version", action="version", version=f"electric {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).add_parser(sub)
    for ep in sorted(entry_points(group=PLUGINS), key=lambda e: e.name):
        try:
            add_parser = ep.load()
        except ModuleNotFoundError as e:
            if e.name and (ep.module == e.name or ep.module.startswith(e.name + ".")):
                continue  # installed metadata names a package that is not there
            raise
        add_parser(sub)
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
