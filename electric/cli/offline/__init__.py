"""Offline scoring on Ray Data (`electric score --ray`, `electric rerank --ray`; docs/scale.md).

It joins the inference layer (the scorer, `electric score`'s records) and the n-best evaluation (readers, the rerank
combination), so it sits in the CLI layer: `files` (input -> shards, parts, the output; no Ray), `outputs` (n-best
records and Parquet schemas), `ray_job` (the Ray Data pipeline and its actor); electric.cli.ray_score holds the flags.
"""
