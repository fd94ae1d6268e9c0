"""The one way tests import a script that is not part of a package (benchmarks/, research/): `load_script(path)`
imports it as `python PATH` runs it - its folder first on sys.path, the module named after its file - so its own
imports (`from _bench_models import ...`, `from research.equal_compute... import ...`) resolve as they do when it
runs. A script already loaded is returned as it is."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(path: str) -> ModuleType:
    """The module of the script at `path`, relative to the repository (e.g. "benchmarks/bench_efficiency.py")."""
    file = REPO / path
    if not file.is_file():
        raise FileNotFoundError(f"no script at {file}")
    for folder in (str(REPO), str(file.parent)):  # the script's folder ends up first, as `python PATH` puts it
        if folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)
    return importlib.import_module(file.stem)
