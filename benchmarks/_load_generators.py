"""The load generators' outputs, read for the serving benchmarks (bench_efficiency and its peer rows,
_efficiency_peer): wrk's closing line (wrk_post_bodies.lua) and h2load's summary and request log."""

from __future__ import annotations

import json
import re

import numpy as np


def parse_wrk(stdout: str) -> dict:
    """wrk_post_bodies.lua's closing line: requests, duration, latency percentiles (µs) and socket/status errors."""
    for line in stdout.splitlines():
        if line.startswith("WRK_JSON "):
            return json.loads(line[len("WRK_JSON "):])
    raise ValueError(f"no WRK_JSON line in wrk's output: {stdout[-500:]!r}")


def h2load_p99_ms(log: str) -> float:
    """p99 latency (ms) from h2load's --log-file: one line per request, tab-separated start time (µs since the
    epoch), status, microseconds until the end of the response."""
    us = [float(line.split("\t")[2]) for line in log.splitlines() if line.count("\t") >= 2]
    return float(np.percentile(us, 99)) / 1e3 if us else float("nan")


def parse_h2load(stdout: str) -> dict:
    """h2load's req/s over its run (`finished in ...`) and the failed / errored / timeout counts of `requests:`."""
    rate = re.search(r"finished in [\d.]+\w*, ([\d.]+) req/s", stdout)
    m = re.search(r"requests: .*?(\d+) failed, (\d+) errored, (\d+) timeout", stdout)
    return {"req_s": float(rate.group(1)) if rate else float("nan"),
            "errors": dict(zip(("failed", "errored", "timeout"), map(int, m.groups()), strict=True)) if m else {}}
