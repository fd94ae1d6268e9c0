"""`electric score --ray` / `electric rerank --ray`: the same scores as `electric score` on a Ray cluster.

The files (shards, parts, resume) are tested without Ray; the jobs run on a local Ray instance this module starts
with num_cpus=2, and on a two-process cluster (`ray start --head` plus a second `ray start --address`) that the
test starts and stops by process group.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from electric.cli import main
from electric.cli.offline import files

pytestmark = pytest.mark.timeout(600)  # a bound even on a loaded machine (the module builds and exports a model)

SENTENCES = [
    "the cat sat on the mat .", "show me flights from boston to denver", "", "a short one",
    "the committee will meet again next week to discuss the new budget proposal", "\u200b",
    "he hoped there would be stew for dinner", "Aaron breaks the glass.", "what is the cheapest fare to dallas",
    "i would like a morning flight", "they said it could not be done", "the music played all night long",
]


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def same_records(ray_rows: list[dict], rows: list[dict]) -> None:
    """Equal fields, scores to ONNX Runtime's determinism (other batch shapes: float32 sums in another order)."""
    assert len(ray_rows) == len(rows)
    for k, (a, b) in enumerate(zip(ray_rows, rows, strict=True)):
        assert a.pop("line") == k + 1
        assert a.keys() == b.keys()
        for key, v in b.items():
            if key == "tokens":
                assert [t["token"] for t in a[key]] == [t["token"] for t in v]
                assert [t["score"] for t in a[key]] == pytest.approx([t["score"] for t in v], abs=1e-4)
            elif isinstance(v, float):
                assert a[key] == pytest.approx(v, abs=1e-4)
            else:
                assert a[key] == v


# ---- files, without Ray ------------------------------------------------------------------------------


def test_shards_cover_every_line_once_with_its_number(tmp_path):
    p = tmp_path / "in.txt"
    p.write_bytes(b"\xef\xbb\xbfone\ntwo\n\nfour\nfive")  # a BOM, a blank line, no line end at the end
    shards = files.plan_shards(p, "text", 2)
    assert [(s["first"], s["count"]) for s in shards] == [(1, 2), (3, 2), (5, 1)]
    read = [r for s in shards for r in files.read_shard(s)]
    assert read == [(1, "one", None), (2, "two", None), (3, "", None), (4, "four", None), (5, "five", None)]


def test_bad_records_are_named_by_file_and_line(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9"}\nnot json\n{"other": 1}\n')
    assert files.detect_kind(p) == "jsonl"
    read = files.read_shard(files.plan_shards(p, "jsonl", 10)[0])
    assert read[0] == (1, "fine", None)
    assert [r[0] for r in read] == [1, 2, 3, 4] and all(r[1] is None for r in read[1:])
    assert f"{p}: line 2: byte 0xe9" in read[1][2] and "line 3: not JSON" in read[2][2]
    assert "line 4: expected a JSON object with a string 'text'" in read[3][2]


def test_nbest_lines_become_lists_and_bad_ones_are_named(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text('{"input": ["show flights", "show flight"], "output": "show flights"}\n{"input": "one"}\n')
    (first, nb, err), (_, bad, why) = files.read_shard(files.plan_shards(p, "nbest-jsonl", 10)[0])
    assert (first, err, nb.utt_id, nb.hyps, nb.ref) == (1, None, "1", ["show flights", "show flight"], "show flights")
    assert bad is None and why.startswith(f"{p}: line 2: ")


def test_a_part_counts_as_finished_only_when_complete(tmp_path):
    shard = {"shard": 3, "count": 2}
    assert not files.finished_part(tmp_path, shard, "jsonl")
    files.write_part(tmp_path, 3, [{"line": 1}, {"line": 2}], "jsonl")
    assert files.finished_part(tmp_path, shard, "jsonl")
    files.part_path(tmp_path, 3, "jsonl").write_text('{"line": 1}\n')  # cut short by a crash
    assert not files.finished_part(tmp_path, shard, "jsonl")
    files.open_parts(tmp_path / "p", {"model": "a"})
    files.open_parts(tmp_path / "p", {"model": "a"})  # the same job again: kept
    with pytest.raises(ValueError, match="parts of another job .* differs in model"):
        files.open_parts(tmp_path / "p", {"model": "b"})


def test_without_ray_the_error_names_the_extra(monkeypatch):
    import importlib.util

    from electric.checkpoint import MissingExtra
    from electric.cli.offline.ray_job import require_ray

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(MissingExtra, match=r"pip install 'electric-scoring\[ray\]'"):
        require_ray()


def test_ray_log_lines_go_to_the_stderr_of_the_moment(capsys):
    pytest.importorskip("ray.data")
    import io
    import logging

    from electric.cli.offline import ray_job

    console = [h for name in ("ray", "ray.data") for h in logging.getLogger(name).handlers
               if type(h).__name__ == "PlainRayHandler"]
    kept = [h.stream for h in console]
    gone = io.StringIO()  # the stderr of an earlier test (its capture), closed since
    gone.close()
    try:
        for h in console:
            h.stream = gone
        ray_job.console_to_current_stderr()  # as a job does when it starts
        logging.getLogger("ray.data").warning("a Ray Data line")
        logging.getLogger("ray").warning("a Ray line")
    finally:
        for h, stream in zip(console, kept, strict=True):
            h.stream = stream
    err = capsys.readouterr().err
    assert len(console) == 2 and "Logging error" not in err
    assert "a Ray Data line" in err and "a Ray line" in err


def test_wrong_arguments_are_one_line_before_ray_starts(capsys, disc_dir, tmp_path):
    pytest.importorskip("ray")
    src = tmp_path / "in.txt"
    src.write_text("the cat sat\n")
    rc, _, err = run(capsys, "score", "--ray", "--model", disc_dir, "--out", tmp_path / "o.jsonl", src)
    assert rc == 2 and "is not an `electric export` directory" in err
    rc, _, err = run(capsys, "score", "--ray", "--model", disc_dir, "--out", tmp_path / "o.csv", src)
    assert rc == 2 and "the extension says the format: .parquet, or .jsonl" in err
    rc, _, err = run(capsys, "score", "--ray", "--model", disc_dir, src)
    assert rc == 2 and "--ray reads a file (not stdin) and writes --out" in err


# ---- jobs on a local Ray instance ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_dir(disc_dir, tmp_path_factory) -> Path:
    pytest.importorskip("onnx")
    from electric.export.exporter import ExportOptions, export_model

    out = tmp_path_factory.mktemp("ray-onnx") / "onnx"
    export_model(disc_dir, out, ExportOptions(calibrate=False), log=lambda _: None)
    return out


@pytest.fixture(scope="module")
def int8_onnx_dir(disc_dir, tmp_path_factory) -> Path:
    """The same model exported with the dynamic int8 graph (`--int8-method dynamic`), whose scores depend on the
    batch: the case where --ray's shards must be the plain run's chunks (the default static int8 scores a text the
    same in any batch). Random weights miss the int8 parity gate; kept anyway (force): only its batch dependence
    matters here."""
    pytest.importorskip("onnx")
    from electric.export.exporter import ExportOptions, export_model

    out = tmp_path_factory.mktemp("ray-onnx-int8") / "onnx"
    export_model(disc_dir, out, ExportOptions(quantize="int8", int8_method="dynamic", force=True, calibrate=False),
                 log=lambda _: None)
    return out


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture
def text_file(tmp_path) -> Path:
    p = tmp_path / "in.txt"
    p.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    return p


@pytest.mark.integration
def test_ray_scores_equal_electric_score(capsys, local_ray, onnx_dir, text_file, tmp_path):
    rc, _, err = run(capsys, "score", "--model", onnx_dir, "--per-token", "--quiet", "--out", tmp_path / "a.jsonl",
                     text_file)
    assert rc == 0, err
    expected = jsonl(tmp_path / "a.jsonl")
    rc, _, err = run(capsys, "score", "--ray", "--model", onnx_dir, "--per-token", "--shard-size", "5",
                     "--actors", "2", "--out", tmp_path / "b.jsonl", text_file)
    assert rc == 0, err
    assert err.count(f"note: {len(SENTENCES)} texts is a small input for --ray") == 1
    assert f"{len(SENTENCES)} records (10 scored, 2 blank or without tokens, 0 bad)" in err
    assert "tokens/s" in err and not (tmp_path / "b.jsonl.parts").exists()
    same_records(jsonl(tmp_path / "b.jsonl"), expected)
    # Parquet: the same values, one column each
    import pyarrow.parquet as pq

    rc, _, err = run(capsys, "score", "--ray", "--model", onnx_dir, "--per-token", "--shard-size", "4", "--quiet",
                     "--out", tmp_path / "c.parquet", text_file)
    assert rc == 0, err
    rows = pq.read_table(tmp_path / "c.parquet").to_pylist()
    for r in rows:  # Parquet has every column: nulls where a JSON line has no such field
        for k in [k for k, v in r.items() if v is None and k in ("truncated", "error")]:
            del r[k]
        r.pop("truncated", None) if r.get("truncated") is False else None
    same_records(rows, expected)


@pytest.mark.integration
def test_bad_records_fail_the_job_or_are_written_with_their_error(capsys, local_ray, onnx_dir, tmp_path):
    p = tmp_path / "in.txt"
    p.write_bytes(b"the cat sat\ncaf\xe9 au lait\n" + b" ".join([b"word"] * 300) + b"\na dog ran\n")
    rc, _, err = run(capsys, "score", "--ray", "--model", onnx_dir, "--quiet", "--shard-size", "2", "--out",
                     tmp_path / "o.jsonl", p)
    assert rc == 2 and f"{p}: line 2: byte 0xe9" in err and "--on-bad-record skip" in err
    assert "Logging error" not in err  # Ray's lines go to this test's stderr, not an earlier test's (closed)
    assert not (tmp_path / "o.jsonl").exists()  # rerun with skip: the finished parts are kept
    rc, _, err = run(capsys, "score", "--ray", "--model", onnx_dir, "--on-bad-record", "skip", "--shard-size", "2",
                     "--out", tmp_path / "o.jsonl", p)
    assert rc == 0, err
    rows = jsonl(tmp_path / "o.jsonl")
    assert [r["line"] for r in rows] == [1, 2, 3, 4]
    assert [r["score"] is None for r in rows] == [False, True, True, False]
    assert "line 3: more than the model's maximum of" in rows[2]["error"]
    assert f"bad record (skipped, written with its error): {p}: line 3" in err
    assert "4 records (2 scored, 0 blank or without tokens, 2 bad)" in err


@pytest.mark.integration
def test_the_bad_record_reported_is_the_inputs_first(capsys, local_ray, onnx_dir, tmp_path):
    # shard 0 has many long lines to score and its bad record last; shard 1 its bad record first and nothing to
    # score: shard 1 is done first, the error still names line 200
    p = tmp_path / "in.txt"
    long = " ".join(SENTENCES[4].split() * 4).encode()
    p.write_bytes(b"\n".join([long] * 199 + [b"caf\xe9"] * 2 + [b""] * 199) + b"\n")
    rc, _, err = run(capsys, "score", "--ray", "--model", onnx_dir, "--quiet", "--shard-size", "200", "--actors",
                     "2", "--out", tmp_path / "o.jsonl", p)
    assert rc == 2 and f"{p}: line 200: byte 0xe9" in err and "line 201" not in err


@pytest.mark.integration
def test_a_rerun_does_not_score_finished_parts_again(capsys, local_ray, onnx_dir, text_file, tmp_path):
    out = tmp_path / "o.jsonl"
    args = ["score", "--ray", "--model", onnx_dir, "--shard-size", "5", "--keep-parts", "--out", out, text_file]
    assert run(capsys, *args)[0] == 0
    first = jsonl(out)
    parts = files.parts_dir(out)
    # an interrupted run: no output, shard 1's part missing, shard 0's part marked to show it is not rewritten
    out.unlink()
    files.part_path(parts, 1, "jsonl").unlink()
    p0 = files.part_path(parts, 0, "jsonl")
    rows = jsonl(p0)
    rows[0]["score"] = 12345.0
    p0.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rc, _, err = run(capsys, *args)
    assert rc == 0, err
    assert "2 shards were finished by an earlier run and not scored again" in err
    again = jsonl(out)
    assert again[0]["score"] == 12345.0 and again[5:10] == first[5:10]
    # another job (other options) never reuses those parts
    rc, _, err = run(capsys, "score", "--ray", "--model", onnx_dir, "--shard-size", "5", "--per-token", "--out", out,
                     text_file)
    assert rc == 2 and "parts of another job" in err and "per_token" in err


@pytest.fixture
def nbest_file(tmp_path) -> Path:
    lists = [{"id": f"u{i}", "input": [SENTENCES[(i + k) % 12] or "x" for k in range(4)], "output": SENTENCES[i] or "x",
              "am_score": [-1.0, -1.5, -2.0, -2.5]} for i in range(7)]
    p = tmp_path / "lists.json"
    p.write_text(json.dumps(lists))
    return p


@pytest.mark.integration
def test_rerank_on_ray_reranks_as_electric_rerank(capsys, local_ray, onnx_dir, nbest_file, tmp_path):
    pytest.importorskip("jiwer")
    common = ["--model", onnx_dir, "--nbest", nbest_file, "--lm-weight", "0.5", "--length-weight", "0.3", "--json"]
    rc, _, err = run(capsys, "rerank", *common, "--out", tmp_path / "a.json", "--report", tmp_path / "report.json")
    assert rc == 0, err
    assert "small input" not in err
    rc, _, err = run(capsys, "rerank", *common, "--out", tmp_path / "b.json", "--ray", "--shard-size", "5")
    assert rc == 0, err
    assert err.count("note: 10 distinct hypotheses is a small input for --ray") == 1  # once, before Ray starts
    a, b = json.loads((tmp_path / "a.json").read_text()), json.loads((tmp_path / "b.json").read_text())
    assert [x["input"] for x in b] == [x["input"] for x in a]
    lm = [[math.nan if v is None else v for x in out for v in x["lm_score"]] for out in (a, b)]
    assert lm[1] == pytest.approx(lm[0], abs=1e-4, nan_ok=True)  # None: a hypothesis with no token to score
    # `electric score --ray` on the lists, with the weights of that report: the same choice per list
    rc, _, err = run(capsys, "score", "--ray", "--model", onnx_dir, "--weights", tmp_path / "report.json",
                     "--shard-size", "3", "--out", tmp_path / "c.parquet", nbest_file)
    assert rc == 0, err
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "c.parquet").to_pylist()
    assert [r["utt_id"] for r in rows] == [f"u{i}" for i in range(7)]
    assert [r["best"] for r in rows] == [x["input"][0] for x in a]
    assert [r["hyps"][i] for r in rows for i in r["order"]] == [h for x in a for h in x["input"]]


@pytest.mark.integration
def test_rerank_on_ray_gives_the_plain_int8_scores_bit_for_bit(capsys, local_ray, int8_onnx_dir, tmp_path):
    """A dynamic int8 export's scores depend on the batch (one activation scale per batch tensor), so --ray's shards
    are the plain run's chunks (--chunk-size) and both leave blank texts out of the batches: then the scores are
    equal, not close."""
    pytest.importorskip("jiwer")
    texts = [t for t in SENTENCES if t != "\u200b"]  # "" stays: a blank hypothesis, never sent to the model
    lists = [{"id": f"u{i}", "input": [texts[(i + k) % len(texts)] for k in range(4)], "output": texts[i] or "x",
              "am_score": [-1.0, -1.5, -2.0, -2.5]} for i in range(len(texts))]
    nbest = tmp_path / "lists.json"
    nbest.write_text(json.dumps(lists))

    def lm_scores(name: str, *extra) -> list:
        rc, _, err = run(capsys, "rerank", "--model", int8_onnx_dir, "--nbest", nbest, "--lm-weight", "1",
                         "--length-weight", "0", "--quiet", "--out", tmp_path / name, *extra)
        assert rc == 0, err
        return [x["lm_score"] for x in json.loads((tmp_path / name).read_text())]

    plain = lm_scores("plain.json", "--chunk-size", "4")
    assert lm_scores("ray.json", "--chunk-size", "4", "--ray") == plain  # shards of 4: the plain run's chunks
    assert None in [v for x in plain for v in x]  # the blank hypothesis: no score, in both
    # the test is not vacuous: other chunks are other batches, and this export's scores move with them
    assert lm_scores("other.json", "--chunk-size", "3") != plain


# ---- a two-process cluster on this machine -----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray"))


@pytest.fixture
def two_node_cluster():
    """`ray start --head` and a second `ray start --address` (each --block, in its own process group, 1 CPU each);
    stopped by signalling those two groups, whatever the test did."""
    pytest.importorskip("ray")
    port = free_port()
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--num-cpus", "1", "--block", "--disable-usage-stats"]
    procs = [subprocess.Popen([ray_cli(), "start", "--head", "--port", str(port), "--node-ip-address", "127.0.0.1",
                               "--include-dashboard", "false", "--temp-dir", temp, *common], env=env,
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    address = f"127.0.0.1:{port}"
    try:
        wait_for_nodes(address, 1, env)
        procs.append(subprocess.Popen([ray_cli(), "start", "--address", address, "--node-ip-address", "127.0.0.1",
                                       *common], env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        wait_for_nodes(address, 2, env)
        yield address, env
    finally:
        for p in reversed(procs):
            stop_group(p)
        import shutil

        shutil.rmtree(temp, ignore_errors=True)


def wait_for_nodes(address: str, n: int, env: dict, timeout: float = 120) -> None:
    code = (f"import ray; ray.init(address={address!r}, log_to_driver=False); "
            "print(sum(x['Alive'] for x in ray.nodes()))")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        if r.returncode == 0 and int(r.stdout.split()[-1]) >= n:
            return
        time.sleep(2)
    raise TimeoutError(f"the Ray cluster at {address} did not reach {n} nodes")


def stop_group(p: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(wait)
            time.sleep(1)  # the group's other processes (raylet, gcs) exit after ray start
            os.killpg(p.pid, 0)
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


@pytest.mark.integration
def test_two_process_cluster_shares_the_work(two_node_cluster, onnx_dir, text_file, tmp_path):
    address, env = two_node_cluster
    out = tmp_path / "o.jsonl"
    r = subprocess.run([sys.executable, "-m", "electric.cli", "score", "--ray", address, "--model", str(onnx_dir),
                        "--shard-size", "1", "--actors", "2", "--out", str(out), str(text_file)],
                       env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    by_node = next(line for line in r.stderr.splitlines() if "shards by node:" in line)
    nodes = by_node.split("shards by node:")[1].split("(")[0].split(",")
    assert len(nodes) == 2 and all(int(n.split()[-1]) >= 1 for n in nodes), by_node  # both processes scored shards
    assert [x["line"] for x in jsonl(out)] == list(range(1, len(SENTENCES) + 1))
