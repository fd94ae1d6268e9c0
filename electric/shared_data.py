"""Where the project's shared data lives (corpora, GLUE, BLiMP, n-best lists: ../shared/data/README.md).

One rule for every command, script, benchmark and test: `$ELECTRIC_SHARED_DATA` when set; else, from a
checkout of this repository, `shared/data` beside it (the repository's `../shared/data`); else, for an
installed package, `../shared/data` from the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "ELECTRIC_SHARED_DATA"


def shared_data_dir() -> Path:
    """The shared data folder (it need not exist: callers say what they miss)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    repo = Path(__file__).resolve().parents[1]
    if (repo / "pyproject.toml").is_file() and (repo / "electric").is_dir():  # a checkout, not site-packages
        return repo.parent / "shared" / "data"
    return Path.cwd().parent / "shared" / "data"
