"""The `electric` command: score, rerank, eval, export, serve.

The CLI is the layer above the library: nothing in electric.inference, evaluation, export or pretraining
imports it.

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
import os
import sys

from electric import __version__

# subcommand -> the module that provides it (add_parser(subparsers))
SUBCOMMANDS = {
    "score": "electric.cli.score",
    "rerank": "electric.cli.rerank",
    "eval": "electric.cli.evaluate",  # blimp, and the tasks of electric.cli.evaluate.EVAL_TASKS: nbest, detect
    "export": "electric.cli.export",
}
PLUGINS = "electric.commands"  # entry point group: name -> add_parser(subparsers) of another package (serve)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `electric` parser with every subcommand; given a `command` it knows, with that one alone: `electric
    score ...` imports what score's options need, not every command's (a third of the start's imports)."""
    ap = argparse.ArgumentParser(prog="electric", description=__doc__.split("\n")[0])
    ap.add_argument("--version", action="version", version=f"electric {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    if command in SUBCOMMANDS:
        importlib.import_module(SUBCOMMANDS[command]).add_parser(sub)
        return ap
    from importlib.metadata import entry_points

    # one parser per entry point, though metadata may list it twice: a checkout installed before the distribution
    # was renamed `electric-scoring` keeps the old `electric` metadata (its dist-info, or electric.egg-info in the
    # working directory) until `pip uninstall electric` or removing it
    plugins = sorted({(ep.name, ep.value): ep for ep in entry_points(group=PLUGINS)}.values(), key=lambda e: e.name)
    if any(ep.name == command for ep in plugins):
        plugins = [ep for ep in plugins if ep.name == command]
    else:
        for module in SUBCOMMANDS.values():
            importlib.import_module(module).add_parser(sub)
    for ep in plugins:
        try:
            add_parser = ep.load()
        except ModuleNotFoundError as e:
            if e.name and (ep.module == e.name or ep.module.startswith(e.name + ".")):
                continue  # installed metadata names a package that is not there
            raise
        add_parser(sub)
    return ap


def quiet_progress_bars() -> None:
    """Silence every progress bar of this process (`--quiet`): ours, transformers' weight loading, the hub's
    and datasets' bars, and any other tqdm bar (TQDM_DISABLE, read by every tqdm created from now on)."""
    os.environ["TQDM_DISABLE"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # transformers reads it when imported
    os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    # imported before the variables were set: tell them (not imported: nothing to import - an ONNX export needs
    # neither, and a serving install has no transformers)
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = build_parser(argv[0] if argv and not argv[0].startswith("-") else None)
    args = ap.parse_args(argv)
    if not getattr(args, "func", None):
        ap.print_help()
        return 2
    return int(args.func(args) or 0)
