"""The serving-efficiency benchmark's pure parts (benchmarks/bench_efficiency.py): /proc CPU parsing, the steady
window from two hand-made readings, raw CPU per request, the generators' outputs, the report's shape, and the one
line it stops with when a load generator is missing. Nothing here times anything."""

import json
import os
import time
from collections import Counter

import pytest
from script_loader import load_script

be = load_script("benchmarks/bench_efficiency.py")
generators = load_script("benchmarks/_load_generators.py")
harness = load_script("benchmarks/_server_harness.py")


def test_stat_cpu_seconds_reads_utime_and_stime_after_the_command_name():
    # fields 14 (utime) and 15 (stime) in ticks; the command name holds a space and a ')'
    stat = "4242 (py thon) x) S 1 4242 4242 0 -1 4194560 1500 0 0 0 250 50 7 9 20 0 5 0 100 1000 2000"
    assert harness.stat_cpu_seconds(stat, 100) == pytest.approx(3.0)
    assert harness.stat_cpu_seconds(stat, 250) == pytest.approx(1.2)


def test_cpu_seconds_of_this_process_agrees_with_its_cpu_clock():
    assert abs(harness.cpu_seconds(os.getpid()) - time.process_time()) < 0.05  # clock ticks against the precise clock


METRICS = """# HELP electric_requests_total Requests answered, by route and transport
# TYPE electric_requests_total counter
electric_requests_total{{route="/v1/score",transport="http"}} {score}
electric_requests_total{{route="/v1/rerank",transport="http"}} 7.0
electric_requests_total{{route="/electric.v1.Scoring/Score",transport="grpc"}} 99.0
electric_request_failures_total{{route="/v1/score",transport="http",status="422",error_type="validation_error"}} {fail}
electric_request_failures_total{{route="/v1/score",transport="http",status="429",error_type="overloaded"}} 1.0
electric_batch_shapes_total{{model="scorer",size="1",length="16"}} {b1}
electric_batch_shapes_total{{model="scorer",size="4",length="24"}} {b4}
electric_batch_shapes_total{{model="other",size="4",length="24"}} 500.0
electric_batch_shapes_created{{model="scorer",size="1",length="16"}} 1.7e9
"""


def test_read_counters_takes_the_route_and_the_scorers_shapes():
    text = METRICS.format(score=120.0, fail=2.0, b1=10.0, b4=5.0)
    requests, failures, shapes = be.read_counters(text, be.ROUTES["score"])
    assert (requests, failures) == (120.0, 3.0)
    assert shapes == Counter({(1, 16): 10.0, (4, 24): 5.0})
    assert be.read_counters(text, be.ROUTES["grpc-score"])[0] == 99.0


def test_window_divides_cpu_by_the_requests_whose_inputs_were_batched_between_the_readings():
    r = be.ROUTES["score"]
    start = be.Sample(10.0, 5.0, 1.0, *be.read_counters(METRICS.format(score=100.0, fail=0.0, b1=10.0, b4=0.0), r))
    end = be.Sample(12.0, 5.9, 1.012, *be.read_counters(METRICS.format(score=158.0, fail=1.0, b1=30.0, b4=10.0), r))
    w = be.window(start, end, 1)
    assert w["requests"] == 60 and w["answered"] == 58 and w["req_s"] == pytest.approx(30.0)
    assert w["server_cpu_ms_per_req"] == pytest.approx(900 / 60)
    assert w["client_cpu_ms_per_req"] == pytest.approx(12 / 60)
    assert w["server_cores"] == pytest.approx(0.45) and w["client_cores"] == pytest.approx(0.006)
    assert w["errors"] == 1
    assert w["shapes"] == Counter({(1, 16): 20.0, (4, 24): 10.0})
    assert w["mean_batch"] == pytest.approx((20 + 40) / 30)
    assert be.window(start, end, 20)["server_cpu_ms_per_req"] == pytest.approx(900 / 3)  # 60 inputs, 3 lists of 20
    with pytest.raises(ValueError, match="no forward pass"):
        be.window(end, end, 1)


def test_raw_cpu_per_request_weighs_each_shape_by_its_passes_per_input():
    shapes = Counter({(1, 16): 20, (4, 24): 10})
    per_pass = {(1, 16): 0.002, (4, 24): 0.005}  # seconds
    # 20 * 2 ms + 10 * 5 ms = 90 ms over 60 inputs: 1.5 ms an input; a request of 100 inputs: 150 ms
    assert be.raw_ms_per_request(shapes, per_pass, 1) == pytest.approx(1.5)
    assert be.raw_ms_per_request(shapes, per_pass, 100) == pytest.approx(150.0)


def test_generator_outputs_are_read():
    wrk = ("Running 20s test @ http://127.0.0.1:8000\n  1 threads and 8 connections\n"
           'WRK_JSON {"requests": 4000, "duration_us": 20000000, "p50_us": 1800.0, "p99_us": 5250.5, '
           '"mean_us": 2000.0, "errors": {"connect": 0, "read": 0, "write": 0, "status": 2, "timeout": 0}}\n')
    res = generators.parse_wrk(wrk)
    assert res["p99_us"] == 5250.5 and res["errors"]["status"] == 2
    with pytest.raises(ValueError, match="WRK_JSON"):
        generators.parse_wrk("Running 20s test\n")
    log = "".join(f"1795710146{i:06d}\t200\t{1000 * (i + 1)}\n" for i in range(100))  # 1..100 ms
    assert generators.h2load_p99_ms(log) == pytest.approx(99.01)
    out = ("finished in 4.01s, 172.75 req/s, 60.19KB/s\n"
           "requests: 691 total, 699 started, 691 done, 680 succeeded, 11 failed, 3 errored, 1 timeout\n")
    assert generators.parse_h2load(out) == {"req_s": 172.75, "errors": {"failed": 11, "errored": 3, "timeout": 1}}


def test_grpc_frame_is_a_length_prefixed_score_request():
    from electric.grpc_gen.electric.v1 import electric_pb2 as pb

    msg = pb.ScoreRequest(texts=["list all flights to dallas"]).SerializeToString()
    frame = be.grpc_frame(msg)
    assert frame[0] == 0 and int.from_bytes(frame[1:5], "big") == len(msg) == len(frame) - 5
    assert pb.ScoreRequest.FromString(frame[5:]).texts == ["list all flights to dallas"]


def fake_window(req_s=100.0, server=8.0, client=0.05, p99=12.5, client_errors=None):
    return {"requests": req_s * 20, "answered": req_s * 20, "seconds": 20.0, "req_s": req_s,
            "server_cpu_ms_per_req": server, "client_cpu_ms_per_req": client, "server_cores": 0.8,
            "client_cores": client * req_s / 1e3, "errors": 0, "mean_batch": 8.0, "shapes": Counter({(8, 32): 50}),
            "p99_ms": p99, "generator_req_s": req_s * 0.99, "client_errors": client_errors or {}}


def test_report_has_the_issues_json_shape_and_a_table():
    rows = [be.make_row("/v1/score", 64, "int8", fake_window(client_errors={"status": 0}), 6.8, 1),
            be.make_row("/v1/rerank", 64, "int8", fake_window(req_s=4, server=250.0, p99=900.0), 190.0, 100),
            be.make_row("/v1/score", 1, "fp32", fake_window(p99=9.0, client_errors={"timeout": 2}), 3.0, 1),
            be.make_row("/v1/rerank", 1, "fp32", fake_window(p99=float("nan")), 3.0, 100)]  # no answer came back
    rep = be.report("runs/x-onnx", "AMD EPYC, 2 CPUs, flags: avx2", rows, context={"command": "python b.py"})
    data = json.loads(json.dumps(rep, allow_nan=False))
    assert list(data)[:4] == ["model", "cpu", "rows", "peer"] and data["peer"] == []
    for row in data["rows"]:
        assert tuple(row)[:len(be.ROW_KEYS)] == be.ROW_KEYS
    assert data["rows"][0]["efficiency"] == pytest.approx(0.85)
    assert data["rows"][1]["efficiency"] == pytest.approx(0.76)
    assert data["rows"][2]["client_errors"] == {"timeout": 2}
    assert data["rows"][3]["p99_ms"] is None
    md = be.render_md(data)
    assert "| /v1/score | int8 | 64 | 100.0 | 99.00 | 12.50 | 8.000 | 6.800 | 85% |" in md
    assert "| efficiency ≥ 80% at c=64 | /v1/rerank int8 | 76% | no |" in md
    assert "| p99 at c=1 ≤ 2 × raw + 2 ms | /v1/score fp32 | 9.00 ms (bound 8.00) | no |" in md
    assert "| load client < 0.1 core at c=64 | /v1/score int8 | 0.005 cores | yes |" in md


def test_the_peer_table_compares_our_best_precision_with_its_best_engine():
    rows = [be.make_row("/v1/score", 8, "fp32", fake_window(req_s=300.0), 2.0, 1),
            be.make_row("/v1/score", 8, "int8", fake_window(req_s=500.0), 1.0, 1),
            be.make_row("/v1/score", 64, "int8", fake_window(req_s=520.0), 1.0, 1)]
    rep = be.report("runs/x-onnx", "AMD EPYC", rows, context={})
    errors = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    rep["peer"] = [{"engine": "infinity optimum", "concurrency": 8, "req_s": 200.0, "p99_ms": 60.0,
                    "server_cpu_ms_per_req": 9.0, "errors": errors},
                   {"engine": "infinity torch", "concurrency": 8, "req_s": 260.0, "p99_ms": 50.0,
                    "server_cpu_ms_per_req": 7.0, "errors": errors},
                   {"engine": "infinity optimum", "concurrency": 64, "req_s": 300.0, "p99_ms": 400.0,
                    "server_cpu_ms_per_req": 6.0, "errors": {**errors, "timeout": 3}},
                   {"engine": "infinity torch", "error": "the server exited with 1; see peer-torch.log"}]
    md = be.render_md(json.loads(json.dumps(rep)))
    assert "| infinity torch | 8 | 260.0 | 50.00 | 7.00 | 0 |" in md
    assert "| infinity optimum | 64 | 300.0 | 400.00 | 6.00 | 3 |" in md
    assert "did not start: the server exited with 1" in md
    assert "At c=8: ours (int8) 500.0 req/s against infinity torch 260.0: 1.92x (target ≥ 2x: missed)." in md
    assert "At c=64: ours (int8) 520.0 req/s against infinity optimum 300.0: 1.73x" in md


def test_a_missing_generator_is_one_line_saying_how_to_install_it(tmp_path, monkeypatch):
    assert be.missing_generators(["score", "rerank"], which=lambda g: f"/usr/bin/{g}") is None
    line = be.missing_generators(["score", "grpc-score"], which=lambda g: None)
    assert "\n" not in line and "wrk and h2load not found" in line
    assert line.endswith("install with `apt-get install -y wrk nghttp2-client`")
    assert "h2load" not in be.missing_generators(["score"], which=lambda g: None)
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH: main stops before touching the model
    with pytest.raises(SystemExit) as e:
        be.main(["--model", str(tmp_path / "nowhere"), "--routes", "score"])
    assert e.value.code == "bench_efficiency: wrk not found on PATH; install with `apt-get install -y wrk`"
