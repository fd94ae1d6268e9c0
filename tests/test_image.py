"""The serving image, built and run: scripts/build_image.sh builds the Dockerfile with podman on a Debian base made
by debootstrap (CPU onnxruntime), and the container serves a debug-preset Electric model exported here. From the
host: /ready, /v1/score over HTTP and gRPC with the scores `electric score` gives on the host, the HEALTHCHECK,
a non-root user, and a clean exit (status 0) on SIGTERM.

Skipped, saying why, without root or without what building and running need (podman, runc, conmon, debootstrap,
netavark, aardvark-dns, iptables: Debian's packages; the reason is the one line `scripts/build_image.sh --check`
gives); CI installs none of them. The first build takes minutes (debootstrap, then pip from PyPI); later ones reuse
the base and the layers."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.server.helpers import assert_close, free_port

REPO = Path(__file__).resolve().parents[1]
TAG = "localhost/electric-serve:cpu"
USER_ID = "10001"  # the Dockerfile's USER


def why_not() -> str | None:
    """Why this test cannot run here, in one line, or None. What the image needs to build and run (podman, runc,
    conmon, debootstrap, netavark, aardvark-dns, iptables) is checked by the build script itself, so that the skip
    reason is the line `scripts/build_image.sh` stops with."""
    if os.geteuid() != 0:
        return "not root: scripts/build_image.sh needs root for debootstrap and rootful podman"
    p = subprocess.run(["bash", str(REPO / "scripts/build_image.sh"), "--check"], capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0:
        return p.stderr.strip()
    return None


WHY_NOT = why_not()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]

PODMAN_ENV = {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(REPO / "scripts/containers.conf"))}
TEXTS = ["show me flights from boston to denver", "the cat sat on the mat ."]


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    p = subprocess.run(["podman", *args], env=PODMAN_ENV, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p


@pytest.fixture(scope="module")
def image() -> str:
    p = subprocess.run([str(REPO / "scripts/build_image.sh"), "--tag", TAG], env=PODMAN_ENV, capture_output=True,
                       text=True, timeout=3600)
    assert p.returncode == 0, f"scripts/build_image.sh exited {p.returncode}:\n{(p.stdout + p.stderr)[-4000:]}"
    return TAG


@pytest.fixture(scope="module")
def model(trained_run, tmp_path_factory) -> Path:
    """The debug-preset run's discriminator exported by `electric export` (fp32, so that the container's
    onnxruntime and the host's agree to float tolerance), readable by the container's non-root user."""
    from electric.cli import main as cli

    out = tmp_path_factory.mktemp("image-model") / "scorer"
    assert cli(["export", "--model", str(trained_run / "discriminator"), "--out", str(out)]) == 0
    for p in [out, *out.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return out


def host_scores(model: Path) -> list[dict]:
    """What `electric score` gives on the host for TEXTS (per token)."""
    from electric.inference.backend import load_backend
    from electric.inference.scoring import Scorer

    return [s.to_dict() for s in Scorer(load_backend(model)).score(TEXTS, per_token=True)]


@pytest.mark.timeout(3900)
def test_image_serves_http_and_grpc_as_non_root_and_stops_on_sigterm(image, model):
    import grpc
    import httpx

    from electric.grpc_gen.electric.v1 import electric_pb2 as pb
    from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc

    name = f"electric-test-{os.getpid()}"
    http_port, grpc_port = free_port(), free_port()
    podman("run", "-d", "--name", name, "-p", f"127.0.0.1:{http_port}:8000", "-p", f"127.0.0.1:{grpc_port}:50051",
           "-v", f"{model}:/models:ro", "-e", "ELECTRIC_THREADS=1", image)
    try:
        start, deadline, status = time.monotonic(), time.monotonic() + 300, None
        while time.monotonic() < deadline:
            if podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip() != "true":
                break
            try:
                status = httpx.get(f"http://127.0.0.1:{http_port}/ready", timeout=2).status_code
            except httpx.TransportError:
                status = None
            if status == 200:
                break
            time.sleep(0.5)
        logs = podman("logs", name).stderr
        assert status == 200, f"/ready never answered 200 (last: {status}); container logs:\n{logs[-4000:]}"
        print(f"\ncontainer ready {time.monotonic() - start:.1f} s after `podman run`")

        expected = host_scores(model)
        r = httpx.post(f"http://127.0.0.1:{http_port}/v1/score", json={"texts": TEXTS, "per_token": True}, timeout=30)
        assert r.status_code == 200, r.text
        got = r.json()["results"]
        assert_close([{k: g[k] for k in e} for g, e in zip(got, expected, strict=True)], expected, tol=1e-4)

        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
            reply = pb_grpc.ScoringStub(ch).Score(pb.ScoreRequest(texts=TEXTS), timeout=30)
        assert_close([res.score for res in reply.results], [e["score"] for e in expected], tol=1e-4)

        # the server (the container's PID 1, seen from the host: rootful podman maps no user ids) runs as the
        # Dockerfile's user, not root; so does a command run in the container
        pid = podman("inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
        uids = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:"))
        assert uids.split()[1:] == [USER_ID] * 4, uids
        assert podman("exec", name, "id", "-u").stdout.strip() == USER_ID
        # the HEALTHCHECK survived the build (--format docker) and passes
        assert "/health" in podman("inspect", "--format", "{{.Config.Healthcheck.Test}}", name).stdout
        assert podman("healthcheck", "run", name, check=False).returncode == 0

        # SIGTERM (the image's STOPSIGNAL): a drained shutdown, status 0, well within podman's 60 s before SIGKILL
        podman("stop", "--time", "60", name, timeout=120)
        state = podman("inspect", "--format", "{{.State.ExitCode}} {{.State.Status}}", name).stdout.split()
        logs = podman("logs", name).stderr
        assert state == ["0", "exited"], f"state {state}; logs:\n{logs[-4000:]}"
        assert "stopped" in logs
    finally:
        podman("rm", "--force", name, check=False)
