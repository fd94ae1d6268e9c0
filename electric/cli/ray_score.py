"""`electric score --ray [ADDRESS]` and `electric rerank --ray [ADDRESS]`: the same scores on a Ray cluster.

    electric score --ray --model runs/electric-tiny/onnx big.txt --out scores.parquet [--per-token]
    electric score --ray HEAD:6379 --model /nfs/onnx /nfs/lists.jsonl --out /nfs/choices.jsonl --weights report.json
    electric rerank --ray --model runs/electric-tiny/onnx --nbest lists.json --out reranked.json

Without ADDRESS a local Ray instance is started (and stopped at the end); with one the job joins that cluster
(`ray start --head` on one machine, `ray start --address HEAD:6379` on the others, or a KubeRay cluster). The
library side is electric.cli.offline.ray_job; this module turns flags into an `OfflineJob` and prints the
summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Below this many texts `--ray` is slower than the same command without it, however many nodes score: a local
# Ray instance cost about 30 s of start-up and per-job overhead (809 ATIS n-best lists, 1,656 distinct hypotheses:
# `electric rerank --ray` 42 s, plain 11.6 s, on 2 shared cores), in which the plain command scores ~4,300 texts
# (~140 a second there). An estimate from those two runs, not a measured break-even (docs/scale.md).
SMALL_INPUT = 5000


def note_small_input(count: int, what: str) -> None:
    """One line on stderr when `count` texts are too few for Ray to pay (SMALL_INPUT)."""
    if count < SMALL_INPUT:
        print(f"note: {count:,} {what} is a small input for --ray: its start-up and per-job overhead (about 30 s "
              f"for a local instance) outweighs the scoring below roughly {SMALL_INPUT:,} texts, so the same "
              "command without --ray is faster here (docs/scale.md)", file=sys.stderr)


def add_ray_options(p: argparse.ArgumentParser, score: bool) -> None:
    from electric import install_hint
    from electric.cli.offline.files import INPUT_KINDS

    g = p.add_argument_group(f"offline scoring on Ray Data (the ray extra: {install_hint('ray')}; docs/scale.md)")
    g.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="score on Ray: a local instance without ADDRESS, else the cluster at ADDRESS (e.g. "
                        "HEAD:6379, or auto on a node of it); --model must be an `electric export` directory that every "
                        "node reads at the same path")
    g.add_argument("--actors", type=int, help="actors in the pool, each with one ONNX Runtime session (default: "
                                              "the cluster's CPUs / --threads-per-actor)")
    g.add_argument("--threads-per-actor", type=int, default=1,
                   help="ONNX Runtime intra-op threads (and CPUs reserved) per actor (default 1)")
    g.add_argument("--shard-size", type=int,
                   help="records per shard: the unit of work and of resuming an interrupted job (default: "
                        "--chunk-size, so that a shard is batched as the plain command batches a chunk: an int8 "
                        "export's scores depend on the batch, docs/scale.md)")
    g.add_argument("--on-bad-record", choices=("fail", "skip"), default="fail",
                   help="a record that cannot be read or scored (not UTF-8, not JSON, too long): fail the job "
                        "naming it (default), or write it with its \"error\" and go on (listed in the summary)")
    g.add_argument("--keep-parts", action="store_true", help="keep OUT.parts/ (one file per shard) at the end")
    if score:
        g.add_argument("--input-kind", choices=("auto", *INPUT_KINDS), default="auto",
                       help="text (a line each), jsonl (objects with --text-field), parquet (a --text-field column), "
                            "nbest (HyPoradise or ESPnet JSON) or nbest-jsonl (a HyPoradise item a line); default: "
                            "detect")
        g.add_argument("--text-field", default="text", help="the text's field or column (default text)")
        g.add_argument("--weights", metavar="REPORT",
                       help="n-best input: the --report of an `electric rerank` run, whose tuned weights add each "
                            "hypothesis's combined score and the reranked choice")


def shard_size(args) -> int:
    """--shard-size, by default --chunk-size: each shard then holds the records the plain command scores together
    (a chunk), so the actors send the model the same batches, and an int8 export gives the same scores."""
    return args.chunk_size if args.shard_size is None else args.shard_size


def _check_args(args) -> Path:
    """The export --model names for --method, and the numbers, checked before Ray starts."""
    from electric.inference.scoring import check_model_dir

    for name in ("threads_per_actor", "chunk_size") + (("actors",) if args.actors is not None else ()) + \
            (("shard_size",) if args.shard_size is not None else ()):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.method not in ("electric", "electra", "cloze"):
        raise ValueError(f"--ray scores one-pass methods (electric, electra, cloze), not {args.method}")
    model = check_model_dir(args.model, args.method, "onnx")
    if not (model / "electric.json").is_file():
        raise ValueError(f"--ray runs ONNX Runtime: --model {args.model} is not an `electric export` directory "
                         f"(export it first: electric export --model {args.model} --out ONNX_DIR)")
    return model.resolve()


def _job(args, model: Path, out_format: str, weights: dict | None = None):
    """The job of these flags on the connected cluster (the default number of actors comes from its CPUs)."""
    from electric.cli.offline.ray_job import OfflineJob, default_actors

    actors = args.actors or default_actors(args.threads_per_actor)
    return OfflineJob(model=str(model), method=args.method, per_token=getattr(args, "per_token", False),
                      out_format=out_format, max_batch_tokens=args.max_batch_tokens, batch_size=args.batch_size,
                      truncate=args.truncate, sliding_window=args.sliding_window, on_bad=args.on_bad_record,
                      weights=weights, actors=actors, threads=args.threads_per_actor)


def _report(summary, job, quiet: bool) -> None:
    for b in summary.bad[:10]:
        print(f"bad record (skipped, written with its error): {b}", file=sys.stderr)
    if len(summary.bad) > 10:
        print(f"... and {len(summary.bad) - 10} more bad records", file=sys.stderr)
    if not quiet:
        print(f"ray: {job.actors} actor{'s' if job.actors != 1 else ''} x {job.threads} thread"
              f"{'s' if job.threads != 1 else ''}; " + "\n".join(summary.lines()), file=sys.stderr)


def _read_weights(path: str) -> dict:
    """The applied weights of an `electric rerank --report`, their LM score included (`Weights.to_dict()`)."""
    from electric.evaluation.nbest import Weights
    from electric.evaluation.nbest.combination import weights_in_report

    report = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(report, dict) or not isinstance(report.get("weights"), dict):
        raise ValueError(f"--weights {path}: not the --report of `electric rerank` (no \"weights\")")
    try:
        return Weights.from_dict(weights_in_report(report)).to_dict()
    except ValueError as e:
        raise ValueError(f"--weights {path}: {e}") from None


def cmd_score_ray(args) -> int:
    """`electric score --ray`: the input -> shards -> Ray Data actor pool -> parts -> --out."""
    from electric.cli.offline import files, ray_job

    ray_job.require_ray()
    if args.input == "-" or not args.out or args.out == "-":
        raise ValueError("--ray reads a file (not stdin) and writes --out FILE.parquet or FILE.jsonl")
    src, out = Path(args.input), Path(args.out)
    if not src.is_file():
        raise ValueError(f"{src}: no such file")
    fmt = files.out_format(out)
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: the folder {out.parent} does not exist; create it first")
    kind = files.detect_kind(src, args.input_kind)
    weights = _read_weights(args.weights) if args.weights else None
    if weights and kind not in ("nbest", "nbest-jsonl"):
        raise ValueError(f"--weights reranks n-best lists; {src} is read as {kind}")
    model = _check_args(args)
    shards = files.plan_shards(src, kind, shard_size(args), args.text_field)
    if not shards:
        raise ValueError(f"{src}: no records")
    if not kind.startswith("nbest"):  # a record is a text (lists hold several, counted by no one before the job)
        note_small_input(sum(s["count"] for s in shards), "texts")
    started = ray_job.connect(args.ray)
    try:
        job = _job(args, model, fmt, weights)
        parts = files.parts_dir(out)
        files.open_parts(parts, {**job.plan(), "input": files.fingerprint(src), "kind": kind,
                                 "shard_size": shard_size(args), "text_field": args.text_field})
        summary = ray_job.run_job(job, shards, parts, progress=not args.quiet)
    finally:
        if started:
            import ray

            ray.shutdown()
    files.assemble(parts, shards, out, fmt, keep_parts=args.keep_parts)
    _report(summary, job, args.quiet)
    if not args.quiet:
        print(f"{kind} {src} -> {out} ({fmt})", file=sys.stderr)
    return 0


def ray_score_texts(args):
    """`electric rerank --ray`: a `score_texts` for `rerank_nbest` that scores all its texts in one Ray job and
    returns a `TextScore` per text (0 tokens for a text without a score: no token, or a bad record under skip)."""
    from electric.cli.offline import files, ray_job
    from electric.inference.records import record_text_score
    from electric.results import TextScore

    ray_job.require_ray()
    model = _check_args(args)

    def score_texts(texts: list[str]) -> list[TextScore]:
        note_small_input(len(texts), "distinct hypotheses")
        shards = files.text_shards(texts, shard_size(args))
        started = ray_job.connect(args.ray)
        try:
            job = _job(args, model, "jsonl")
            parts = files.parts_dir(Path(args.out).with_name(Path(args.out).name + ".scores"))
            files.open_parts(parts, {**job.plan(), "texts": files.texts_fingerprint(texts),
                                     "shard_size": shard_size(args)})
            summary = ray_job.run_job(job, shards, parts, progress=not args.quiet)
        finally:
            if started:
                import ray

                ray.shutdown()
        records = files.read_parts(parts, shards, "jsonl")
        _report(summary, job, args.quiet)
        if not args.keep_parts:
            import shutil

            shutil.rmtree(parts)
        return [record_text_score(t, r, args.method) for t, r in zip(texts, records, strict=True)]

    return score_texts
