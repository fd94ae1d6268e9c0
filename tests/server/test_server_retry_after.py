"""Issue 59, item 0b: a refusal for now says when to come back. A server loading its models (503 / UNAVAILABLE
`not_ready`) and one at its `max_concurrent_requests` (429 / RESOURCE_EXHAUSTED `overloaded`) answer with
Retry-After and retry-after-ms (HTTP) and grpc-retry-pushback-ms (gRPC); the limit's wait is admission's estimate of
when the request in flight is done. (The refusals by work: tests/server/test_server_stalls.py; after the shutdown
grace: test_server_hardening.py; every error type in both transports: test_server_layers.py.)"""

from __future__ import annotations

import math
import threading

import grpc
import httpx
import pytest

from electric.grpc_gen.electric.v1 import electric_pb2 as pb
from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc
from server.app import BackgroundServer
from server.settings import Settings
from tests.server.helpers import controlled_loader, wait_until

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.integration]

SMALL = {"texts": ["show me flights from boston to denver"]}


def grpc_refusal(target: str) -> tuple[grpc.StatusCode, dict]:
    with grpc.insecure_channel(target) as ch, pytest.raises(grpc.RpcError) as e:
        pb_grpc.ScoringStub(ch).Score(pb.ScoreRequest(texts=SMALL["texts"]), timeout=60)
    return e.value.code(), dict(e.value.trailing_metadata() or ())


def test_loading_and_the_request_limit_say_when_to_retry(disc_dir):
    gate = threading.Event()
    s = Settings(model=disc_dir, http_port=0, grpc_port=0, threads=1, max_concurrent_requests=1, access_log=False)
    srv = BackgroundServer(s, loader=controlled_loader(gate), wait_ready=False).start()
    held = None
    try:
        r = httpx.post(f"{srv.url}/v1/score", json=SMALL, timeout=60)  # loading
        assert r.status_code == 503 and r.json()["error_type"] == "not_ready", r.text
        assert (r.headers["retry-after"], r.headers["retry-after-ms"]) == ("1", "1000")
        r = httpx.get(f"{srv.url}/ready", timeout=60)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        code, metadata = grpc_refusal(srv.grpc_target)
        assert code == grpc.StatusCode.UNAVAILABLE and metadata["grpc-retry-pushback-ms"] == "1000", metadata

        gate.set()
        wait_until(lambda: srv.app.state.lifecycle.ready, "the models to load and warm up")
        backend = srv.engine.models["scorer"].model.backend
        backend.hold()
        held = threading.Thread(target=lambda: httpx.post(f"{srv.url}/v1/score", json=SMALL, timeout=60))
        held.start()
        assert backend.running.wait(60)  # the one request the limit admits is in the model
        r = httpx.post(f"{srv.url}/v1/score", json=SMALL, timeout=60)
        assert r.status_code == 429 and r.json()["error_type"] == "overloaded", r.text
        expected = srv.engine._place_frees_s()  # the warm-up timed the model: admission's estimate, not a default
        assert expected is not None and expected < 1.0
        ms = int(r.headers["retry-after-ms"])
        assert ms == round(expected * 1e3) and r.headers["retry-after"] == str(max(1, math.ceil(ms / 1e3)))
        code, metadata = grpc_refusal(srv.grpc_target)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and metadata["error-type"] == "overloaded"
        assert metadata["grpc-retry-pushback-ms"] == str(ms)
    finally:
        gate.set()
        if held is not None:
            srv.engine.models["scorer"].model.backend.release()
            held.join(60)
        srv.stop()
