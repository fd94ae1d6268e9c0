"""A benchmark's JSON of figures, rewritten whole after each figure (`electric.checkpoint.atomic_write_text`), so
that a run cut short keeps every figure before it: the GPU run's reports (gpu_pretrain_report.py,
bench_gpu_serve.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from electric.checkpoint import atomic_write_text


def set_in(report: dict[str, Any], keys: Sequence[str], value: Any) -> dict[str, Any]:
    """report[keys[0]][keys[1]]... = value, making the dicts on the way; returns `report`."""
    node = report
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return report


def write_figures(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(report, indent=1) + "\n")
