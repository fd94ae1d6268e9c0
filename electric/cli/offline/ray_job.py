"""Offline scoring on Ray Data: `electric score --ray` and the scoring step of `electric rerank --ray`.

    job = OfflineJob(model=..., method="electric", per_token=True, actors=2, threads=1)
    summary = run_job(job, shards, parts_dir)      # one Ray Data row per shard (electric.cli.offline.files)

The shards form a Ray Dataset (`ray.data.from_items`, one block each) that `map_batches` sends through an actor
pool (`ActorPoolStrategy`): each actor loads the ONNX export once (one ONNX Runtime session with `threads`
intra-op threads, `num_cpus=threads` reserved for it) and, per shard, reads its records, scores them with the same
code as `electric score` (electric.inference.records, or the n-best combination for lists) and writes the shard's
part file. A shard whose part is already on disk (an interrupted run of the same job) is not scored again. The
driver sees one small summary row per shard: records, tokens, bad records and where they are, which node and
process scored it. Ray is imported only here, when a job runs; without it `MissingExtra` names the `ray` extra.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from electric.checkpoint import require_extra
from electric.cli.offline import files

ON_BAD = ("fail", "skip")


def require_ray() -> None:
    require_extra("offline scoring on Ray (--ray)", ("ray", "pyarrow"), "ray")


@dataclass(frozen=True)
class OfflineJob:
    model: str  # an `electric export` directory (or a run directory holding one for the method)
    method: str = "electric"
    per_token: bool = False
    out_format: str = "jsonl"  # of the part files: "parquet" or "jsonl"
    max_batch_tokens: int = 8192
    batch_size: int = 64
    truncate: bool = False
    sliding_window: bool = False
    on_bad: str = "fail"  # a bad record fails the job, or is written with its error and skipped
    weights: dict | None = None  # n-best input: Weights.to_dict() of a tuned rerank (its LM score included), adds
    #                              the reranked choice
    actors: int = 1  # actors in the pool, each with one ONNX Runtime session
    threads: int = 1  # intra-op threads (and CPUs reserved) per actor

    def plan(self) -> dict:
        """What makes two runs the same job (with the input's fingerprint): a rerun may reuse its parts. Not
        on_bad: a job failed on a bad record is rerun with skip, its finished parts kept."""
        keep = ("model", "method", "per_token", "out_format", "truncate", "sliding_window", "weights")
        return {k: v for k, v in asdict(self).items() if k in keep}


@dataclass
class Summary:
    records: int = 0  # records in the input
    scored: int = 0  # records that got a score
    tokens: int = 0  # candidate tokens scored
    skipped_shards: int = 0  # finished by an earlier run
    bad: list[str] = field(default_factory=list)  # location and reason of each bad record
    blank: int = 0  # blank or tokenless texts (no score, an "error" in their record, as `electric score`)
    seconds: float = 0.0
    workers: Counter = field(default_factory=Counter)  # (node id, pid) -> shards scored

    def lines(self) -> list[str]:
        rate = f"{self.records / self.seconds:,.1f} records/s, {self.tokens / self.seconds:,.0f} tokens/s" \
            if self.seconds > 0 else "n/a"
        out = [f"{self.records:,} records ({self.scored:,} scored, {self.blank:,} blank or without tokens, "
               f"{len(self.bad):,} bad), {self.tokens:,} tokens in {self.seconds:.1f} s: {rate}"]
        if self.skipped_shards:
            out.append(f"{self.skipped_shards} shards were finished by an earlier run and not scored again")
        nodes: Counter[str] = Counter()
        for (node, _pid), n in self.workers.items():
            nodes[node] += n
        if nodes:
            out.append("shards by node: " + ", ".join(f"{node[:12]} {n}" for node, n in sorted(nodes.items())) +
                       f" ({len(self.workers)} actor process{'es' if len(self.workers) != 1 else ''})")
        return out


# ---- the actor -------------------------------------------------------------------------------------------


class ShardScorer:
    """One actor of the pool: one ONNX Runtime session; per shard, records in, part file out, summary row back."""

    def __init__(self, job: OfflineJob, parts: str):
        from electric.inference.backend import load_backend
        from electric.inference.scoring import Scorer, check_model_dir

        self.job, self.parts = job, Path(parts)
        d = check_model_dir(job.model, job.method, "onnx")
        self.scorer = Scorer(load_backend(d, "onnx", threads=job.threads), max_batch_tokens=job.max_batch_tokens,
                             batch_size=job.batch_size, truncate=job.truncate, sliding_window=job.sliding_window)
        import ray

        self.node = ray.get_runtime_context().get_node_id()

    def __call__(self, batch: dict) -> dict:
        rows: dict[str, list] = {k: [] for k in ("shard", "records", "scored", "tokens", "blank", "bad", "seconds",
                                                 "node", "pid")}
        for spec in batch["spec"]:
            shard = json.loads(spec)
            t0 = time.perf_counter()
            records, stats = self.score_shard(shard)
            if not stats["bad"] or self.job.on_bad == "skip":  # a failing shard leaves no part
                files.write_part(self.parts, shard["shard"], records, self.job.out_format, self.schema(shard))
            for k in ("records", "scored", "tokens", "blank"):
                rows[k].append(stats[k])
            rows["bad"].append(json.dumps(stats["bad"]))
            rows["shard"].append(shard["shard"])
            rows["seconds"].append(time.perf_counter() - t0)
            rows["node"].append(self.node)
            rows["pid"].append(os.getpid())
        return rows

    def schema(self, shard: dict):
        from electric.cli.offline.outputs import record_schema

        return record_schema(shard["kind"], self.job) if self.job.out_format == "parquet" else None

    def score_shard(self, shard: dict) -> tuple[list[dict], dict]:
        read = files.read_shard(shard)
        if shard["kind"] in ("nbest", "nbest-jsonl"):
            from electric.cli.offline.outputs import score_nbest_records

            unit = "line" if shard["kind"] == "nbest-jsonl" else "utterance"
            return score_nbest_records(self.scorer, read, self.job, f"{shard['path']}: {unit}")
        unit = "row" if shard["kind"] == "parquet" else "line"
        return score_text_records(self.scorer, read, self.job, f"{shard['path']}: {unit}")


def score_text_records(scorer, read: list[tuple[int, str | None, str | None]], job: OfflineJob,
                       where: str) -> tuple[list[dict], dict]:
    """The records of `electric score` (with "line") for one shard's texts; a text too long for the model (without
    --truncate or --sliding-window) is a bad record, as are the records `read_shard` could not read (`where`:
    "PATH: line", or "PATH: row" for Parquet)."""
    from electric.inference.encoding import InputTooLongError
    from electric.inference.records import blank_record, score_records

    bad = {i: err for i, (_, _, err) in enumerate(read) if err is not None}
    while True:
        todo = [i for i in range(len(read)) if i not in bad]
        try:
            texts = [read[i][1] or "" for i in todo]  # read without error: each a text
            scored, blank, no_token = score_records(scorer, texts, job.method, job.per_token)
            break
        except InputTooLongError as e:
            line = read[todo[e.index]][0]
            bad[todo[e.index]] = f"{where} {line}: {e.describe()}; pass --truncate or --sliding-window"
    by_index: dict[int, dict] = {i: blank_record(read[i][1] or "", job.method, job.per_token, error=err)
                                 for i, err in bad.items()}
    by_index.update(zip(todo, scored, strict=True))
    records = [{"line": line, **by_index[i]} for i, (line, _, _) in enumerate(read)]
    stats = {"records": len(read), "scored": len(todo) - len(blank) - len(no_token), "blank": len(blank) + len(no_token),
             "tokens": sum(r["num_tokens"] for r in records), "bad": [bad[i] for i in sorted(bad)]}
    return records, stats


# ---- the job -----------------------------------------------------------------------------------------------


def connect(address: str | None, num_cpus: int | None = None) -> bool:
    """Join the Ray cluster at `address`, or start a local instance (address None or "local"); returns whether
    this call started it (then the caller shuts it down). An already connected driver (a test) is kept."""
    require_ray()
    import ray

    console_to_current_stderr()
    if ray.is_initialized():
        return False
    if address in (None, "local"):
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=True)
    else:
        ray.init(address=address, include_dashboard=False, log_to_driver=True)
    return True


def console_to_current_stderr() -> None:
    """Point Ray's console log handlers (on the "ray" and "ray.data" loggers) at the current sys.stderr. They keep
    the stream of their creation (the first `import ray` / `import ray.data`), though written to follow it: a
    caller that swaps stderr (pytest's capsys, once per test) would get "--- Logging error ---" with a traceback
    on every Ray line once the swapped-in stream is closed. Handlers others added (pytest's) are left alone."""
    import logging

    for name in ("ray", "ray.data"):
        for h in logging.getLogger(name).handlers:
            if type(h).__module__.startswith("ray.") and isinstance(h, logging.StreamHandler) \
                    and not isinstance(h, logging.FileHandler):
                h.stream = sys.stderr  # not setStream: it flushes the old stream, which may be closed


def default_actors(threads: int) -> int:
    """As many actors of `threads` threads as the cluster's CPUs hold."""
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(1, cpus // max(1, threads))


class BadRecords(ValueError):
    """A bad record with --on-bad-record fail; the message names where it is."""


def run_job(job: OfflineJob, shards: list[dict], parts: Path, progress: bool = True) -> Summary:
    """Score the shards whose parts are not finished yet on the connected Ray cluster; return the summary (of the
    shards scored now; records of the finished ones are counted too). Raises BadRecords on the first shard (in
    input order) with a bad record under on_bad="fail" (the parts of the other finished shards stay for a rerun)."""
    import ray
    import ray.data

    console_to_current_stderr()  # ray.data's handler is made at its first import
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = progress
    ctx.execution_options.preserve_order = True  # rows in shard order: the bad record reported is the input's first
    ctx.wait_for_min_actors_s = 600  # the whole pool up before the first shard: the work is shared from the start
    summary = Summary()
    todo = [s for s in shards if not files.finished_part(parts, s, job.out_format)]
    summary.skipped_shards = len(shards) - len(todo)
    summary.records = sum(s["count"] for s in shards) - sum(s["count"] for s in todo)  # counted again below
    t0 = time.perf_counter()
    if todo:
        specs = ray.data.from_items([{"spec": json.dumps(s)} for s in todo], override_num_blocks=len(todo))
        pool = ray.data.ActorPoolStrategy(size=min(job.actors, len(todo)))
        ds = specs.map_batches(ShardScorer, batch_size=1, compute=pool, num_cpus=job.threads,
                               fn_constructor_kwargs={"job": job, "parts": str(parts)})
        for row in ds.iter_rows():
            bad = json.loads(row["bad"])
            if bad and job.on_bad == "fail":
                raise BadRecords(bad[0] +
                                 (f" (and {len(bad) - 1} more bad records in that shard)" if len(bad) > 1 else "") +
                                 "; fix the input, or pass --on-bad-record skip to write them with their error")
            summary.records += int(row["records"])
            summary.scored += int(row["scored"])
            summary.tokens += int(row["tokens"])
            summary.blank += int(row["blank"])
            summary.bad += bad
            summary.workers[(row["node"], int(row["pid"]))] += 1
    summary.seconds = time.perf_counter() - t0
    return summary
