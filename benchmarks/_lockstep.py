"""Training processes in lockstep: one optimizer step of each in turn (the order alternating), so that every pair of
steps sees the same machine load and their ratio is robust to it. Used by `bench_train_loop.py --paired`.

As a script it is the child: `python _lockstep.py DONE_FIFO GO_FIFO TRAINING.PRETRAIN ARGS...` runs
`training.pretrain` from the current directory and, after every gradient clip (once per optimizer step), writes
"s MINOR_FAULTS" to DONE_FIFO and waits for a line on GO_FIFO.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(done_path: str, go_path: str, argv: list[str]) -> None:
    import resource
    import runpy

    import torch

    clip = torch.nn.utils.clip_grad_norm_
    done, go = open(done_path, "w", buffering=1), open(go_path)  # noqa: SIM115 - open for the whole run

    def clip_then_wait(*args, **kwargs):
        out = clip(*args, **kwargs)
        done.write(f"s {resource.getrusage(resource.RUSAGE_SELF).ru_minflt}\n")
        go.readline()
        return out

    torch.nn.utils.clip_grad_norm_ = clip_then_wait
    sys.argv = ["training.pretrain", *argv]
    sys.path.insert(0, os.getcwd())
    runpy.run_module("training.pretrain", run_name="__main__")
    done.write("end\n")


def run_in_lockstep(jobs: list[tuple[str, list[str], Path, dict]], skip: int = 10) -> list[dict]:
    """Each job (label, training.pretrain args, code directory, environment) stepped in turn until one ends.
    Returns per job: the median ms per step and minor page faults per step after the first `skip` steps, and for
    every job after the first the median of its per-step time over the first job's ("paired_ratio")."""
    with tempfile.TemporaryDirectory(prefix="lockstep-") as tmp:
        procs, dones, gos, faults = [], [], [], []
        for i, (_, argv, code, env) in enumerate(jobs):
            done, go = f"{tmp}/done{i}", f"{tmp}/go{i}"
            os.mkfifo(done)
            os.mkfifo(go)
            procs.append(subprocess.Popen([sys.executable, str(Path(__file__).resolve()), done, go, *argv], cwd=code,
                                          env={**env, "PYTHONPATH": str(code)}, stdout=subprocess.DEVNULL,
                                          stderr=open(f"{tmp}/err{i}", "w")))  # noqa: SIM115
            dones.append(open(done))  # noqa: SIM115 - blocks until the child opens its end
            gos.append(open(go, "w", buffering=1))  # noqa: SIM115
            first = dones[i].readline()  # it waits after its first step; setups (and data caches) one at a time
            if not first.startswith("s "):
                raise SystemExit(f"{jobs[i][0]} ended before its first step:\n{Path(tmp, f'err{i}').read_text()[-2000:]}")
            faults.append([int(first.split()[1])])
        times: list[list[float]] = [[] for _ in jobs]
        rounds, running = 0, True
        while running:
            for i in (range(len(jobs)) if rounds % 2 == 0 else reversed(range(len(jobs)))):
                t0 = time.perf_counter()
                gos[i].write("g\n")
                line = dones[i].readline()
                if not line.startswith("s "):
                    running = False
                    break
                times[i].append(time.perf_counter() - t0)
                faults[i].append(int(line.split()[1]))
            rounds += 1
        for g in gos:  # closed: the children's waits return at once and they finish their runs
            g.close()
        for p in procs:
            p.wait()
        for d in dones:
            d.close()
    n = min(len(t) for t in times)
    if n <= skip:
        raise SystemExit(f"only {n} steps in lockstep; ask for more than --skip {skip}")
    out = []
    for (label, *_), t, f in zip(jobs, times, faults, strict=True):
        row = {"label": label, "steps": n - skip, "ms_per_step": 1e3 * statistics.median(t[skip:n]),
               "faults_per_step": (f[n] - f[skip]) / (n - skip)}
        if out:
            row["paired_ratio"] = statistics.median(b / a for a, b in zip(times[0][skip:n], t[skip:n], strict=True))
        out.append(row)
    return out


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], sys.argv[3:])
