"""The peer rows of bench_efficiency.py: infinity-emb 0.0.78 serving the same checkpoint, the same texts, the same
load generator.

Our server scores with the checkpoint's encoder and a scorer head; infinity serves the encoder itself as an
embedding model (POST /embeddings, one text a request, mean pooling), so both run the same encoder forward pass a
request. Each of infinity's engines (`optimum`: ONNX Runtime through optimum, on the checkpoint's encoder exported
to ONNX; `torch`) runs in its own process,
installed into its own virtual environment by benchmarks/peer_infinity.py; for each concurrency, wrk runs a warm-up,
then the measured window, whose req/s and p99 come from wrk and the peer's CPU per request from /proc.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import peer_infinity
from _load_generators import parse_wrk
from _server_harness import ServerProcess, cpu_seconds, free_port

ENGINES = ("optimum", "torch")
SERVED_NAME = "peer"


def peer_command(exe: Path, checkpoint: Path, engine: str, port: int, batch_size: int) -> list[str]:
    """infinity's v2 CLI serving `checkpoint` with `engine` on the CPU, no answer cache."""
    return [str(exe.resolve()), "v2", "--model-id", str(checkpoint), "--served-model-name", SERVED_NAME,
            "--port", str(port), "--host", "127.0.0.1", "--engine", engine, "--device", "cpu",
            "--batch-size", str(batch_size), "--no-vector-disk-cache"]


def optimum_model_dir(checkpoint: Path, work: Path) -> Path:
    """WORK/peer-onnx: what infinity's optimum engine loads (it looks for a .onnx file in the model directory and
    does not export one itself): the checkpoint's encoder exported as optimum's feature-extraction graph does
    (inputs input_ids, attention_mask, token_type_ids; output last_hidden_state), with its config, tokenizer and
    sentence-transformers pooling files. Exported here with this project's torch: the peer venv's optimum 1.x
    exporter does not import with torch 2.13, and its 2.x cannot be served by infinity 0.0.78."""
    out = work / "peer-onnx"
    if (out / "model.onnx").is_file():
        return out
    import torch
    from transformers import AutoModel

    tmp = work / "peer-onnx.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    model = AutoModel.from_pretrained(checkpoint).eval()
    model.config.save_pretrained(tmp)
    ids = torch.ones(2, 16, dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    class Encoder(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    torch.onnx.export(Encoder(model), (ids, torch.ones_like(ids), torch.zeros_like(ids)), tmp / "model.onnx", dynamo=False,
                      input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["last_hidden_state"], opset_version=17,
                      dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes,
                                    "last_hidden_state": axes})
    for src in checkpoint.iterdir():
        if src.name in ("config.json", "model.safetensors", "pytorch_model.bin"):
            continue
        if src.is_dir():
            shutil.copytree(src, tmp / src.name, dirs_exist_ok=True)
        else:
            shutil.copy(src, tmp / src.name)
    tmp.rename(out)
    return out


def wrk(url: str, c: int, seconds: float, bodies: Path, script: Path) -> dict:
    """One wrk run POSTing `bodies` to /embeddings: its WRK_JSON figures."""
    out = subprocess.run(["wrk", "-t1", f"-c{c}", f"-d{seconds:g}s", "--timeout", "120s", "-s", str(script), url,
                          "--", str(bodies), "/embeddings"], capture_output=True, text=True, check=True)
    return parse_wrk(out.stdout)


def peer_rows(checkpoint: Path, engines: list[str], concurrency: list[int], texts: list[str], work: Path,
              warmup: float, seconds: float, script: Path, batch_size: int = 32, log=print,
              one_core: bool = True) -> list[dict]:
    """[{"engine", "concurrency", "req_s", "p99_ms", "server_cpu_ms_per_req", "errors"}] for each engine and
    concurrency, the engine with its own thread defaults (all cores) and, with `one_core`, again pinned to one core
    (`taskset -c 0`, OMP_NUM_THREADS=1: "infinity ENGINE, 1 core"); an engine that does not start gets one row with
    its "error"."""
    exe = peer_infinity.install(work / "peer-infinity", log=log)
    bodies = work / "peer.jsonl"
    bodies.write_text("".join(json.dumps({"model": SERVED_NAME, "input": [t]}) + "\n" for t in texts))
    rows = []
    pinned = [False, True] if one_core and shutil.which("taskset") else [False]
    for engine, pin in ((e, p) for e in engines for p in pinned):
        port = free_port()
        name = f"infinity {engine}" + (", 1 core" if pin else "")
        if engine == "optimum":  # started in the model's directory as ".": infinity 0.0.78 hands optimum the .onnx
            model = optimum_model_dir(checkpoint, work).resolve()  # file's path as found there, which must be bare
            cmd, cwd = peer_command(exe, Path("."), engine, port, batch_size), model
        else:
            cmd, cwd = peer_command(exe, checkpoint.resolve(), engine, port, batch_size), Path.cwd()
        env = dict(peer_infinity.ENV)
        if pin:
            cmd, env["OMP_NUM_THREADS"] = ["taskset", "-c", "0", *cmd], "1"
        server = ServerProcess(cmd, port, work.resolve() / f"peer-{engine}{'-1core' if pin else ''}.log",
                               ready_path="/health", env=env, cwd=cwd)
        try:
            server.wait_ready(timeout=600)
        except (RuntimeError, TimeoutError) as e:
            server.stop()
            log(f"[{name}] did not start: {e}")
            rows.append({"engine": name, "error": str(e)})
            continue
        try:
            for c in concurrency:
                wrk(server.url, c, warmup, bodies, script)
                cpu0 = cpu_seconds(server.proc.pid)
                t0 = time.perf_counter()
                res = wrk(server.url, c, seconds, bodies, script)
                cpu = cpu_seconds(server.proc.pid) - cpu0
                n = res["requests"]
                row = {"engine": name, "concurrency": c,
                       "req_s": round(n / (res["duration_us"] / 1e6), 2),
                       "p99_ms": round(res["p99_us"] / 1e3, 3) if n else None,
                       "server_cpu_ms_per_req": round(cpu * 1e3 / n, 3) if n else None,
                       "errors": res["errors"], "wall_s": round(time.perf_counter() - t0, 1)}
                rows.append(row)
                log(f"[{name}] c={c}: {row['req_s']} req/s, p99 {row['p99_ms']} ms, "
                    f"server {row['server_cpu_ms_per_req']} CPU ms/req")
        finally:
            server.stop()
    return rows
