"""`electric serve` and `python -m server`: flags generated from `Settings`, so every flag has an
`ELECTRIC_<NAME>` environment variable and the same default."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
import typing
from collections.abc import Iterator

from pydantic import ValidationError

from server.settings import Settings

DESCRIPTION = "Serve Electric scores, reranking, detections and classifications over HTTP and gRPC (one process)."
EPILOG = """Every flag can also be set by an environment variable: --max-batch-tokens -> ELECTRIC_MAX_BATCH_TOKENS,
--classifier -> ELECTRIC_CLASSIFIERS="name=dir,name2=dir2". Flags win over the environment.
A page to look at what the model sees: http://HOST:HTTP_PORT/. HTTP docs: http://HOST:HTTP_PORT/docs.
gRPC: proto/electric/v1/electric.proto."""

# flags whose name differs from the field's
FLAG_NAMES = {"classifiers": "--classifier", "api_key": "--api-key"}


def _is_bool(annotation) -> bool:
    return annotation is bool


def add_arguments(ap: argparse.ArgumentParser) -> None:
    for name, field in Settings.model_fields.items():
        flag = FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
        default = field.get_default(call_default_factory=True)
        env = f"ELECTRIC_{name.upper()}"
        help_ = f"{field.description} [env {env}; default {default!r}]" if default not in (None, {}, []) else \
            f"{field.description} [env {env}]"
        if name == "classifiers":
            ap.add_argument(flag, dest=name, action="append", metavar="NAME=DIR", help=help_)
        elif _is_bool(field.annotation):
            ap.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_)
        else:
            choices = typing.get_args(field.annotation) if typing.get_origin(field.annotation) is typing.Literal \
                else None
            ap.add_argument(flag, dest=name, default=None, choices=choices, metavar=None if choices else name.upper(),
                            help=help_)


def settings_from_args(args: argparse.Namespace) -> Settings:
    given = {k: v for k, v in vars(args).items() if k in Settings.model_fields and v is not None}
    return Settings(**given)


class _StderrHandler(logging.StreamHandler):
    """A StreamHandler that writes to whatever sys.stderr is when a record is emitted (as logging's last resort
    does), so that a handler outliving a replaced stderr (a test's capture) never writes to a closed stream."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # StreamHandler.__init__ sets it; sys.stderr is read at each emit instead
        pass


SERVER_LOGGERS = ("electric", "uvicorn", "uvicorn.error", "electric.access")


@contextlib.contextmanager
def configure_logging(level: str) -> Iterator[None]:
    """Plain lines for the server's own messages; the access logger writes bare JSON lines. On exit the loggers
    (handlers, level, propagation) and the time converter are as they were: no global state outlives a run."""
    saved = {name: (lg.handlers[:], lg.level, lg.propagate)
             for name, lg in ((n, logging.getLogger(n)) for n in SERVER_LOGGERS)}
    converter = logging.Formatter.converter
    fmt = logging.Formatter('{"ts":%(created).3f,"level":"%(levelname)s","logger":"%(name)s","msg":%(json_msg)s}')

    class JsonMessage(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.json_msg = json.dumps(record.getMessage())
            return True

    handler = _StderrHandler()
    handler.setFormatter(fmt)
    handler.addFilter(JsonMessage())
    for name in ("electric", "uvicorn", "uvicorn.error"):
        lg = logging.getLogger(name)
        lg.handlers[:] = [handler]
        lg.setLevel(level.upper())
        lg.propagate = False
    access = logging.getLogger("electric.access")
    raw = _StderrHandler()
    raw.setFormatter(logging.Formatter("%(message)s"))
    access.handlers[:] = [raw]
    access.setLevel(logging.INFO)
    access.propagate = False
    logging.Formatter.converter = time.gmtime
    try:
        yield
    finally:
        for name, (handlers, lvl, propagate) in saved.items():
            lg = logging.getLogger(name)
            lg.handlers[:], lg.propagate = handlers, propagate
            lg.setLevel(lvl)
        logging.Formatter.converter = converter


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except ValidationError as e:
        for err in e.errors():
            where = ".".join(str(x) for x in err["loc"]) or "settings"
            why = err.get("ctx", {}).get("error") if err["type"] == "value_error" else None  # without "Value error, "
            print(f"error: {where}: {why or err['msg']}", file=sys.stderr)
        return 2
    from server.app import check_start, event_loop_factory, run_server  # noqa: PLC0415 - keep `electric --help` fast

    try:
        loop_factory = event_loop_factory(settings.event_loop)
        check_start(settings)
    except ValueError as e:  # uvloop asked for and not installed; a model that is not there (CheckpointError)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a port another process holds
        print(f"error: {e}", file=sys.stderr)
        return 1
    with configure_logging(settings.log_level):
        try:
            return run_server(settings, loop_factory)
        except KeyboardInterrupt:
            return 130


def add_parser(subparsers) -> argparse.ArgumentParser:
    ap = subparsers.add_parser("serve", help="serve scores, detections and classifications over HTTP and gRPC",
                               description=DESCRIPTION, epilog=EPILOG,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    ap.set_defaults(func=run)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m server", description=DESCRIPTION, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    return run(ap.parse_args(argv))
