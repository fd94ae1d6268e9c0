"""Load test of `electric serve` on loopback, next to the raw ONNX runtime on the same sentences.

    python benchmarks/bench_server.py                       # tiny and small int8, 30 s per point
    python benchmarks/bench_server.py --sizes tiny --seconds 10 --concurrency 1 8

For each model size (random weights, `tiny` and `small` presets, exported with int8 quantisation):
1. raw runtime (OnnxBackend in this process, same thread count as the server): batch-1 latency, and the
   best throughput over batch sizes on the same sentences, sorted by length (runtime only: ids already
   tokenised), plus the library end to end (encode + run + electric_score);
2. the server in its own process (`python -m server`), driven by an asyncio httpx client (POST
   /v1/score) and a grpc.aio client (Scoring/Score), one sentence per request, at each concurrency for
   `--seconds` seconds: requests/s (= sentences/s), p50/p99 latency, errors, server RSS before/after.
Prints a table and writes benchmarks/results/server.md. It asserts nothing; the client shares the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from electric.shared_data import shared_data_dir  # noqa: E402

SHARED = shared_data_dir()
SIZES = {  # the pretraining presets' discriminator shapes (electric/pretraining/config.py)
    "tiny": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=2, intermediate_size=512, embedding_size=128),
    "small": dict(hidden_size=256, num_hidden_layers=12, num_attention_heads=4, intermediate_size=1024,
                  embedding_size=128),
}


# ---- setup -----------------------------------------------------------------------------------------

def sentences(n: int) -> list[str]:
    """Real ASR hypotheses: the first hypothesis of each ATIS test utterance."""
    data = json.loads((SHARED / "nbest" / "atis_test.whisper5best.json").read_text())
    return [u["input"][0] for u in data][:n]


def build_model(size: str, work: Path) -> Path:
    """A random-weight ElectraForPreTraining of `size` with a WordPiece tokenizer, exported with int8."""
    out = work / f"{size}-onnx"
    if (out / "electric.json").is_file():
        return out
    from electric.export.exporter import export_model

    export_model(random_checkpoint(size, work), out, quantize="int8", overwrite=True, log=lambda *_: None)
    return out


def random_checkpoint(size: str, work: Path) -> Path:
    """WORK/SIZE-checkpoint: a random-weight ElectraForPreTraining of `size` with an 8k WordPiece tokenizer."""
    ckpt = work / f"{size}-checkpoint"
    if (ckpt / "config.json").is_file():
        return ckpt
    import torch
    from transformers import ElectraConfig, ElectraForPreTraining

    from training.tokenizer import train_tokenizer

    tok_dir = work / "tokenizer"
    if not (tok_dir / "tokenizer.json").is_file():
        from itertools import islice

        sample = work / "wiki_sample.txt"
        with open(SHARED / "corpus" / "enwiki" / "wiki_00", encoding="utf-8") as f:
            sample.write_text("".join(islice(f, 2500)), encoding="utf-8")
        train_tokenizer([str(sample)], vocab_size=8000, out=tok_dir, overwrite=True)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    torch.manual_seed(0)
    cfg = ElectraConfig(vocab_size=len(tok), max_position_embeddings=128, pad_token_id=tok.pad_token_id,
                        **SIZES[size])
    ElectraForPreTraining(cfg).save_pretrained(ckpt)
    tok.model_max_length = cfg.max_position_embeddings  # what the model can take (peers pad to it)
    tok.save_pretrained(ckpt)
    return ckpt


def nbest_lists(n: int, count: int) -> list[list[str]]:
    """`count` n-best lists of `n` hypotheses: ATIS test's Whisper 5-best lists as they are for n = 5; for other n,
    the hypotheses of consecutive utterances joined (or cut) to n - the server's work depends on the
    hypotheses' number and length, not on their being alternatives of one utterance."""
    data = json.loads((SHARED / "nbest" / "atis_test.whisper5best.json").read_text())
    flat = [h for u in data for h in u["input"]]
    if n == 5:
        return [u["input"][:5] for u in data if len(u["input"]) >= 5][:count]
    return [[flat[(i * n + k) % len(flat)] for k in range(n)] for i in range(count)]


# ---- raw runtime -----------------------------------------------------------------------------------

def raw_runtime(model: Path, texts: list[str], seconds: float, threads: int | None) -> dict:
    from electric.batching import pad_rows, plan_batches
    from electric.inference.classify import classify_row
    from electric.inference.encoding import encode
    from electric.inference.runtime import OnnxBackend
    from electric.inference.scoring import electric_score

    be = OnnxBackend(model, threads=threads)
    if be.labels is None:  # a discriminator: the library's score
        finish = electric_score
    else:  # a classifier: label probabilities
        def finish(_encoded, logits):
            return classify_row(be.labels, False, logits)
    enc = encode(be.tokenizer, texts, be.max_length)
    pad = be.tokenizer.pad_token_id
    be.warmup()
    lat = []  # batch-1 latency, runtime only
    t_end = time.perf_counter() + seconds / 3
    i = 0
    while time.perf_counter() < t_end:
        e = enc[i % len(enc)]
        ids, mask = pad_rows([e.input_ids], pad)
        t0 = time.perf_counter()
        be.run(ids, mask)
        lat.append(time.perf_counter() - t0)
        i += 1
    e2e = []  # batch-1 latency: encode + run + electric_score (the library, as `electric score` runs it)
    t_end = time.perf_counter() + seconds / 6
    i = 0
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        e = encode(be.tokenizer, [texts[i % len(texts)]], be.max_length)[0]
        ids, mask = pad_rows([e.input_ids], pad)
        finish(e, be.run(ids, mask)[0])
        e2e.append(time.perf_counter() - t0)
        i += 1
    throughput = {}
    for bs in (8, 32, 64, 128):
        batches = plan_batches([x.length for x in enc], max_batch_tokens=1 << 30, batch_size=bs)
        padded = [pad_rows([enc[k].input_ids for k in b], pad) for b in batches]
        n, t0 = 0, time.perf_counter()
        t_end = t0 + seconds / 8
        while time.perf_counter() < t_end:
            for ids, mask in padded:
                be.run(ids, mask)
                n += ids.shape[0]
        throughput[bs] = n / (time.perf_counter() - t0)
    best = max(throughput, key=throughput.get)
    return {"providers": be.providers, "threads": be.threads, "precision": be.precision,
            "b1_p50_ms": 1e3 * float(np.percentile(lat, 50)), "b1_p99_ms": 1e3 * float(np.percentile(lat, 99)),
            "e2e_b1_p50_ms": 1e3 * float(np.percentile(e2e, 50)), "throughput": throughput,
            "best_batch": best, "best_throughput": throughput[best],
            "mean_tokens": float(np.mean([x.length for x in enc]))}


# ---- the server ------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class ServerProcess:
    """A server in its own process: started by `cmd`, ready when GET `ready_path` answers 200."""

    def __init__(self, cmd: list[str], http_port: int, log: Path, ready_path: str = "/ready",
                 env: dict[str, str] | None = None):
        self.cmd = " ".join(cmd[1:]) if cmd[0] == sys.executable else " ".join(cmd)
        self.ready_path = ready_path
        self.log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        self.url = f"http://127.0.0.1:{http_port}"

    def wait_ready(self, timeout: float = 300) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(f"{self.url}{self.ready_path}", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"the server did not get ready; see {self.log.name}")

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> int:
        self.proc.terminate()
        rc = self.proc.wait(60)
        self.log.close()
        return rc


class Server(ServerProcess):
    """`python -m server` serving `model` (or, with `classifier`, only that classifier, named "classifier")."""

    def __init__(self, model: Path, threads: int | None, log: Path, extra: list[str], classifier: bool = False):
        self.http, self.grpc = free_port(), free_port()
        what = ["--classifier", f"classifier={model}"] if classifier else ["--model", str(model)]
        super().__init__([sys.executable, "-m", "server", *what, "--http-port", str(self.http),
                          "--grpc-port", str(self.grpc), *(["--threads", str(threads)] if threads else []), *extra],
                         self.http, log)


def score_body(text: str) -> dict:
    return {"texts": [text]}


async def load_http(url: str, texts: list[str], concurrency: int, seconds: float, client: str = "raw",
                    path: str = "/v1/score", body: Callable[[str], dict] = score_body) -> dict:
    """`concurrency` keep-alive connections, each sending one request after the other for `seconds`: one text
    per request, as `body(text)` POSTed to `path`."""
    if client == "httpx":
        return await load_httpx(url, texts, concurrency, seconds, path, body)
    host, port = url.split("//")[1].split(":")
    bodies = [json.dumps(body(t)).encode() for t in texts]
    head = f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: "
    lat, errors = [], {}

    async def request(reader, writer, body: bytes) -> int:
        writer.write(head.encode() + str(len(body)).encode() + b"\r\n\r\n" + body)
        status_line = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        data = await reader.readexactly(length)
        status = int(status_line.split()[1])
        if status != 200:
            errors[f"http {status} {json.loads(data).get('error_type')}"] = \
                errors.get(f"http {status} {json.loads(data).get('error_type')}", 0) + 1
        return status

    async def worker(k: int):
        reader, writer = await asyncio.open_connection(host, int(port))
        await request(reader, writer, bodies[k % len(bodies)])
        await start.wait()
        i = k
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            try:
                if await request(reader, writer, bodies[i % len(bodies)]) == 200:
                    lat.append(time.perf_counter() - t0)
            except (OSError, asyncio.IncompleteReadError) as e:
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                reader, writer = await asyncio.open_connection(host, int(port))
            i += concurrency
        writer.close()

    start = asyncio.Event()
    t_end = float("inf")
    tasks = [asyncio.ensure_future(worker(k)) for k in range(concurrency)]
    await asyncio.sleep(0.5)  # connections open and warm
    t_start = time.perf_counter()
    t_end = t_start + seconds
    start.set()
    await asyncio.gather(*tasks)
    return summary(lat, errors, time.perf_counter() - t_start)


async def load_httpx(url: str, texts: list[str], concurrency: int, seconds: float, path: str = "/v1/score",
                     body: Callable[[str], dict] = score_body) -> dict:
    import httpx

    lat, errors = [], {}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        async def worker(k: int):
            i = k
            while time.perf_counter() < t_end:
                t0 = time.perf_counter()
                try:
                    r = await client.post(path, json=body(texts[i % len(texts)]))
                    ok = r.status_code == 200
                    key = None if ok else f"http {r.status_code} {r.json().get('error_type')}"
                except httpx.HTTPError as e:
                    key = type(e).__name__
                if key is None:
                    lat.append(time.perf_counter() - t0)
                else:
                    errors[key] = errors.get(key, 0) + 1
                i += concurrency

        await client.post(path, json=body(texts[0]))
        t_start = time.perf_counter()
        t_end = t_start + seconds
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        elapsed = time.perf_counter() - t_start
    return summary(lat, errors, elapsed)


async def load_grpc(target: str, texts: list[str], concurrency: int, seconds: float, classify: bool = False) -> dict:
    """As load_http, over gRPC: Scoring/Score, or Classification/Classify when `classify`."""
    import grpc

    from server.grpc_gen.electric.v1 import electric_pb2 as pb
    from server.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc

    lat, errors = [], {}
    async with grpc.aio.insecure_channel(target) as ch:
        if classify:
            call = pb_grpc.ClassificationStub(ch).Classify
            requests = [pb.ClassifyRequest(texts=[t]) for t in texts]
        else:
            call = pb_grpc.ScoringStub(ch).Score
            requests = [pb.ScoreRequest(texts=[t]) for t in texts]

        async def worker(k: int):
            i = k
            while time.perf_counter() < t_end:
                t0 = time.perf_counter()
                try:
                    await call(requests[i % len(requests)], timeout=60)
                    lat.append(time.perf_counter() - t0)
                except grpc.aio.AioRpcError as e:
                    errors[e.code().name] = errors.get(e.code().name, 0) + 1
                i += concurrency

        await call(requests[0])
        t_start = time.perf_counter()
        t_end = t_start + seconds
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        elapsed = time.perf_counter() - t_start
    return summary(lat, errors, elapsed)


def summary(lat: list[float], errors: dict, elapsed: float) -> dict:
    a = np.asarray(lat) if lat else np.asarray([np.nan])
    return {"requests": len(lat), "rps": len(lat) / elapsed, "p50_ms": 1e3 * float(np.percentile(a, 50)),
            "p99_ms": 1e3 * float(np.percentile(a, 99)), "errors": errors}


def batch_stats(url: str) -> tuple[float, float]:
    """(batches, inputs) so far, from the server's batch-size histogram."""
    import httpx

    count = total = 0.0
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("electric_batch_size_count"):
            count = float(line.rsplit(" ", 1)[1])
        elif line.startswith("electric_batch_size_sum"):
            total = float(line.rsplit(" ", 1)[1])
    return count, total


# ---- a peer server on the same classifier (--peer) -----------------------------------------------------

def build_classifier(work: Path) -> tuple[Path, Path]:
    """WORK/small-sst2, a `small` ElectraForSequenceClassification fine-tuned for one epoch on 2,000 SST-2
    examples from random init (speed does not depend on what the weights learned), and its `electric export
    --quantize int8` directory."""
    ckpt, onnx = work / "small-sst2", work / "small-sst2-onnx"
    if not (ckpt / "config.json").is_file():
        cmd = [sys.executable, "-m", "training.finetune", "--task", "sst2", "--model", str(random_checkpoint("small", work)),
               "--random-init", "--data", str(SHARED / "glue" / "sst2"), "--max-train-examples", "2000", "--epochs", "1",
               "--out", str(ckpt), "--overwrite"]
        print("+ " + " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, cwd=REPO, check=True)
    if not (onnx / "electric.json").is_file():
        from electric.export.exporter import export_model

        # force: a classifier at chance gives near-equal logits, whose int8-vs-fp32 Spearman is noise (the
        # manifest keeps the max logit difference, the report prints it)
        export_model(ckpt, onnx, quantize="int8", force=True, overwrite=True, log=lambda *_: None)
    return ckpt, onnx


def raw_torch(ckpt: Path, texts: list[str], seconds: float) -> dict:
    """The peer's engine without its server: transformers' classifier in torch eager fp32 (torch's default
    threads, as the peer runs), batch-1 latency and the best throughput over batch sizes."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForSequenceClassification.from_pretrained(ckpt).eval()
    order = sorted(texts, key=len)
    lat, throughput = [], {}
    with torch.inference_mode():
        t_end, i = time.perf_counter() + seconds / 3, 0
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            model(**tok([texts[i % len(texts)]], return_tensors="pt"))
            lat.append(time.perf_counter() - t0)
            i += 1
        for bs in (8, 32, 64):
            batches = [tok(order[k:k + bs], padding=True, return_tensors="pt") for k in range(0, len(order), bs)]
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() < t0 + seconds / 6:
                for b in batches:
                    model(**b)
                    n += b["input_ids"].shape[0]
            throughput[bs] = n / (time.perf_counter() - t0)
    best = max(throughput, key=throughput.get)
    return {"threads": torch.get_num_threads(), "b1_p50_ms": 1e3 * float(np.percentile(lat, 50)),
            "b1_p99_ms": 1e3 * float(np.percentile(lat, 99)), "throughput": throughput, "best_batch": best,
            "best_throughput": throughput[best]}


def run_peer(args, work: Path, texts: list[str]) -> str:
    """Electric's /v1/classify (HTTP and gRPC) and the peer's /classify on the same classifier and sentences, each
    concurrency level in turn for every server (interleaved), beside both raw runtimes measured in this run."""
    from benchmarks import peer_infinity as peer

    exe = peer.install(work / f"peer-{peer.NAME}")
    ckpt, onnx = build_classifier(work)
    threads = args.threads or None
    print("raw runtimes ...", flush=True)
    raws = {"electric's runtime (ONNX Runtime int8), server threads": raw_runtime(onnx, texts, args.raw_seconds, threads),
            "electric's runtime (ONNX Runtime int8), default threads": raw_runtime(onnx, texts, args.raw_seconds, None),
            f"{peer.NAME}'s engine (torch eager fp32), default threads": raw_torch(ckpt, texts, args.raw_seconds)}
    for name, r in raws.items():
        print(f"  {name}: batch-1 p50 {r['b1_p50_ms']:.2f} ms, best {r['best_throughput']:.0f} sent/s", flush=True)
    ours = Server(onnx, threads, work / "server-classifier.log", args.server_args.split(), classifier=True)
    port = free_port()
    theirs = ServerProcess(peer.command(exe, ckpt, port, args.peer_batch_size), port, work / f"peer-{peer.NAME}.log",
                           ready_path="/health", env=peer.ENV)
    rows, load_start = [], os.getloadavg()
    try:
        ours.wait_ready()
        theirs.wait_ready()
        asyncio.run(load_http(theirs.url, texts[:8], 1, 2.0, path=peer.ROUTE, body=peer.body))  # its first calls
        points = (("electric", "http", ours, lambda c: load_http(ours.url, texts, c, args.seconds, path="/v1/classify",
                                                                 body=lambda t: {"texts": [t]})),
                  ("electric", "grpc", ours, lambda c: load_grpc(f"127.0.0.1:{ours.grpc}", texts, c, args.seconds,
                                                                 classify=True)),
                  (peer.NAME, "http", theirs, lambda c: load_http(theirs.url, texts, c, args.seconds, path=peer.ROUTE,
                                                                  body=peer.body)))
        for c in args.concurrency:
            for name, transport, server, load in points:
                idle = theirs if server is ours else ours
                cpu0, idle0 = server.cpu_seconds(), idle.cpu_seconds()
                r = asyncio.run(load(c))
                r.update(server=name, transport=transport, concurrency=c, rss_mb=rss_mb(server.proc.pid),
                         cpu_s=server.cpu_seconds() - cpu0, idle_cpu_s=idle.cpu_seconds() - idle0)
                rows.append(r)
                print(f"{name:9s} {transport:4s} c={c:<3d} {r['rps']:7.0f} req/s  p50 {r['p50_ms']:7.2f} ms  "
                      f"p99 {r['p99_ms']:7.2f} ms  errors {r['errors'] or 0}  (the other server's CPU meanwhile: "
                      f"{r['idle_cpu_s']:.2f} s)", flush=True)
    finally:
        rcs = {"electric": ours.stop(), peer.NAME: theirs.stop()}
    manifest = json.loads((onnx / "electric.json").read_text())
    return render_peer(args, rows, raws, rcs, load_start, os.getloadavg(), ours.cmd, theirs.cmd, manifest, peer)


def render_peer(args, rows, raws, rcs, load_start, load_end, ours_cmd, theirs_cmd, manifest, peer) -> str:
    ort = raws["electric's runtime (ONNX Runtime int8), server threads"]
    ort_best = max(r["best_throughput"] for k, r in raws.items() if k.startswith("electric's"))
    torch_raw = raws[f"{peer.NAME}'s engine (torch eager fp32), default threads"]
    out = [f"# `electric serve` beside {peer.NAME} on the same classifier", "",
           f"Command: `python benchmarks/bench_server.py --peer {peer.NAME} --concurrency "
           f"{' '.join(map(str, args.concurrency))} --seconds {args.seconds:g} --threads {args.threads}`  ",
           f"Electric: `python {ours_cmd.replace(str(REPO) + '/', '')}`  ",
           f"Peer: `{theirs_cmd.replace(str(REPO) + '/', '')}` ({peer.SPEC}, torch {peer.TORCH_SPEC.split('==')[1]}, "
           "in its own virtual environment)  ",
           f"Machine: {machine()}; load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end "
           "(the load generator runs on the same 2 cores; nothing else was meant to run).", "",
           "The classifier: a `small` ElectraForSequenceClassification (12 layers, 256 wide) fine-tuned on SST-2 for "
           "one epoch from random init — the speed, not the accuracy, is measured. Electric serves its `electric "
           f"export --quantize int8` graph (int8 vs fp32 max logit difference "
           f"{manifest.get('parity', {}).get('int8', {}).get('max_abs_diff', float('nan')):.4f}); the peer serves the "
           "transformers directory with its torch engine (fp32). Sentences: the first hypothesis of each of "
           f"{args.sentences} ATIS test utterances, one per request, the same for both servers. Each concurrency "
           "level ran for every server in turn (interleaved); both servers stayed up, and the idle one's CPU time "
           "during each point is in the last column.", "",
           "## Raw runtimes (no server, one process)", "",
           "| runtime | threads | batch-1 p50 / p99 (ms) | sentences/s at batch 8 / 32 / 64 | best |",
           "|---|---|---|---|---|"]
    for name, r in raws.items():
        t = r["throughput"]
        out.append(f"| {name} | {r['threads']} | {r['b1_p50_ms']:.2f} / {r['b1_p99_ms']:.2f} | {t[8]:.0f} / {t[32]:.0f} / "
                   f"{t[64]:.0f} | {r['best_throughput']:.0f} (batch {r['best_batch']}) |")
    out += ["", "## Servers", "",
            "| server | transport | concurrency | requests/s | p50 (ms) | p99 (ms) | requests/s ÷ ORT raw best | "
            "requests/s ÷ torch raw best | p99 ÷ ORT batch-1 p50 | errors | server CPU (s) | idle server CPU (s) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['server']} | {r['transport']} | {r['concurrency']} | {r['rps']:.0f} | {r['p50_ms']:.2f} | "
                   f"{r['p99_ms']:.2f} | {r['rps'] / ort_best:.0%} | {r['rps'] / torch_raw['best_throughput']:.0%} | "
                   f"{r['p99_ms'] / ort['b1_p50_ms']:.1f}× | {sum(r['errors'].values()) if r['errors'] else 0} | "
                   f"{r['cpu_s']:.1f} | {r['idle_cpu_s']:.2f} |")

    def point(name, transport, c):
        return next((r for r in rows if r["server"] == name and r["transport"] == transport and r["concurrency"] == c),
                    None)

    out += ["", "## Targets (issue 14)", ""]
    hi, lo = max(args.concurrency), min(args.concurrency)
    theirs_hi, theirs_lo = point(peer.NAME, "http", hi), point(peer.NAME, "http", lo)
    for transport in ("http", "grpc"):
        mine_hi, mine_lo = point("electric", transport, hi), point("electric", transport, lo)
        if None in (mine_hi, mine_lo, theirs_hi, theirs_lo):
            continue
        out.append(f"- electric {transport} vs {peer.NAME} http: requests/s at c={hi} {mine_hi['rps']:.0f} vs "
                   f"{theirs_hi['rps']:.0f} ({mine_hi['rps'] / theirs_hi['rps']:.1f}×: "
                   f"{'ahead' if mine_hi['rps'] > theirs_hi['rps'] else 'behind'}); p99 at c={lo} {mine_lo['p99_ms']:.2f} "
                   f"vs {theirs_lo['p99_ms']:.2f} ms ({'ahead' if mine_lo['p99_ms'] < theirs_lo['p99_ms'] else 'behind'})")
    out += ["", "Exit status after SIGTERM: " + ", ".join(f"{k} {v}" for k, v in rcs.items()) + ".", "",
            f"What {peer.NAME} needed here:", *[f"- {w}" for w in peer.WORKAROUNDS], ""]
    return "\n".join(out)


def machine() -> str:
    from electric.hardware import cpu_description

    return f"{cpu_description()}, Python {platform.python_version()}"


# ---- main ------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small"], choices=sorted(SIZES))
    ap.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 64])
    ap.add_argument("--seconds", type=float, default=30.0, help="per load point (default 30)")
    ap.add_argument("--raw-seconds", type=float, default=12.0, help="for the raw runtime, per model")
    ap.add_argument("--sentences", type=int, default=800)
    ap.add_argument("--threads", type=int, default=1,
                    help="ONNX Runtime intra-op threads, server and raw (default 1: on 2 cores the server's event "
                         "loop needs the other one; 0 = the runtime's default, physical cores). The raw runtime "
                         "is also measured with the runtime's default for reference")
    ap.add_argument("--work", default=str(REPO / "runs" / "bench-server"), help="models and logs (cached)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "server.md"))
    ap.add_argument("--http-client", choices=("raw", "httpx"), default="raw",
                    help="raw: a minimal asyncio HTTP/1.1 keep-alive client (default; httpx's client spends more "
                         "CPU per request than the server on this 2-core machine); httpx: httpx.AsyncClient")
    ap.add_argument("--server-args", default="", help="extra `python -m server` flags, e.g. '--max-wait-ms 1'")
    ap.add_argument("--nbest", nargs="*", type=int, default=[5, 100],
                    help="also rerank n-best lists of these sizes, one list per request (default 5 100; none: skip)")
    ap.add_argument("--nbest-concurrency", type=int, default=4, help="concurrent rerank requests (default 4)")
    ap.add_argument("--peer", choices=("infinity",),
                    help="instead: serve a fine-tuned `small` classifier with electric (/v1/classify, HTTP and gRPC) "
                         "and with this peer server (installed into WORK/peer-NAME, its own virtual environment), "
                         "interleaved; writes benchmarks/results/server_peer.md unless --out is given")
    ap.add_argument("--peer-batch-size", type=int, default=32, help="the peer's --batch-size (default 32, its own)")
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    texts = sentences(args.sentences)
    if args.peer:
        report = run_peer(args, work, texts)
        out = Path(args.out) if "--out" in (argv if argv is not None else sys.argv) else \
            REPO / "benchmarks" / "results" / "server_peer.md"
        out.write_text(report)
        print(report)
        return 0
    threads = args.threads or None
    load_start = os.getloadavg()
    rows, raws, notes, nbest_rows = [], {}, [], []
    for size in args.sizes:
        model = build_model(size, work)
        print(f"[{size}] raw runtime ...", flush=True)
        raw = raws[size] = raw_runtime(model, texts, args.raw_seconds, threads)
        if threads is not None:
            raws[f"{size} (runtime default threads)"] = raw_runtime(model, texts, args.raw_seconds, None)
        print(f"[{size}] raw: batch-1 p50 {raw['b1_p50_ms']:.2f} ms, best {raw['best_throughput']:.0f} sent/s "
              f"at batch {raw['best_batch']}", flush=True)
        server = Server(model, threads, work / f"server-{size}.log", args.server_args.split())
        try:
            server.wait_ready()
            rss0 = rss_mb(server.proc.pid)
            for transport in ("http", "grpc"):
                for c in args.concurrency:
                    b0 = batch_stats(server.url)
                    if transport == "http":
                        r = asyncio.run(load_http(server.url, texts, c, args.seconds, args.http_client))
                    else:
                        r = asyncio.run(load_grpc(f"127.0.0.1:{server.grpc}", texts, c, args.seconds))
                    b1 = batch_stats(server.url)
                    r.update(size=size, transport=transport, concurrency=c,
                             mean_batch=(b1[1] - b0[1]) / max(b1[0] - b0[0], 1), rss_mb=rss_mb(server.proc.pid))
                    rows.append(r)
                    print(f"[{size}] {transport:4s} c={c:<3d} {r['rps']:7.0f} req/s  p50 {r['p50_ms']:7.2f} ms  "
                          f"p99 {r['p99_ms']:7.2f} ms  mean batch {r['mean_batch']:5.1f}  errors {r['errors'] or 0}  "
                          f"RSS {r['rss_mb']:.0f} MB", flush=True)
            for n in args.nbest:  # one n-best list per request, /v1/rerank: throughput in hypotheses/s
                lists = nbest_lists(n, max(8, 4000 // n))
                r = asyncio.run(load_http(server.url, lists, args.nbest_concurrency, args.seconds, args.http_client,
                                          path="/v1/rerank", body=lambda hyps: {"hypotheses": hyps}))
                r.update(size=size, n=n, concurrency=args.nbest_concurrency, hyps_per_s=r["rps"] * n)
                nbest_rows.append(r)
                print(f"[{size}] rerank {n}-best c={args.nbest_concurrency}: {r['hyps_per_s']:7.0f} hypotheses/s  "
                      f"p50 {r['p50_ms']:7.2f} ms  errors {r['errors'] or 0}", flush=True)
            rss1 = rss_mb(server.proc.pid)
            notes.append(f"{size}: server RSS {rss0:.0f} MB after warm-up, {rss1:.0f} MB after the load")
        finally:
            rc = server.stop()
            notes.append(f"{size}: server exit status after SIGTERM: {rc}")
    load_end = os.getloadavg()
    report = render(args, rows, raws, notes, load_start, load_end, server.cmd, nbest_rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report)
    print(report)
    return 0


def render(args, rows, raws, notes, load_start, load_end, server_cmd, nbest_rows=()) -> str:
    cmd = "python benchmarks/bench_server.py " + " ".join(
        f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in vars(args).items() if k not in ("work", "out") and v not in ("", None))
    out = ["# `electric serve` under load", "",
           f"Command: `{cmd}`  ", f"Server: `python {server_cmd.replace(str(REPO) + '/', '')}` (per size)  ",
           f"Machine: {machine()}; "
           f"load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end ("
           + ("other jobs shared the cores; " if load_start[0] > 1.0 else "nothing else running; ")
           + "the load generator runs on the same cores: figures are noisy, ±30% or worse).", "",
           "Random-weight ELECTRA discriminators of the `tiny` and `small` preset shapes, exported by "
           "`electric export --quantize int8` (CPU runs the int8 graph). Sentences: the first hypothesis of "
           f"each of {args.sentences} ATIS test utterances. One sentence per request.", "",
           "## Raw runtime (OnnxBackend in one process, no server)", "",
           "| model | threads | mean tokens | batch-1 p50 / p99 (ms) | encode+run+score batch-1 p50 (ms) | "
           "sentences/s at batch 8 / 32 / 64 / 128 | best |", "|---|---|---|---|---|---|---|"]
    for size, r in raws.items():
        t = r["throughput"]
        out.append(f"| {size} int8 | {r['threads']} | {r['mean_tokens']:.1f} | {r['b1_p50_ms']:.2f} / "
                   f"{r['b1_p99_ms']:.2f} | {r['e2e_b1_p50_ms']:.2f} | {t[8]:.0f} / {t[32]:.0f} / {t[64]:.0f} / "
                   f"{t[128]:.0f} | {r['best_throughput']:.0f} (batch {r['best_batch']}) |")
    out += ["", "## Server (loopback, asyncio clients)", "",
            "| model | transport | concurrency | requests/s | p50 (ms) | p99 (ms) | mean batch | errors | RSS (MB) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['size']} | {r['transport']} | {r['concurrency']} | {r['rps']:.0f} | {r['p50_ms']:.2f} | "
                   f"{r['p99_ms']:.2f} | {r['mean_batch']:.1f} | {sum(r['errors'].values()) if r['errors'] else 0}"
                   f"{' ' + json.dumps(r['errors']) if r['errors'] else ''} | {r['rss_mb']:.0f} |")
    out += ["", "## Targets", "",
            "| model | transport | c=64 throughput / raw best | target ≥ 80% | c=1 p99 | 2 × raw batch-1 + 2 ms | met |",
            "|---|---|---|---|---|---|---|"]
    for size, raw in raws.items():
        if size not in SIZES:
            continue
        for transport in ("http", "grpc"):
            hi = next((r for r in rows if r["size"] == size and r["transport"] == transport and r["concurrency"] == 64),
                      None)
            lo = next((r for r in rows if r["size"] == size and r["transport"] == transport and r["concurrency"] == 1),
                      None)
            if hi is None or lo is None:
                continue
            ratio = hi["rps"] / raw["best_throughput"]
            bound = 2 * raw["b1_p50_ms"] + 2
            out.append(f"| {size} | {transport} | {ratio:.0%} | {'yes' if ratio >= 0.8 else 'no'} | "
                       f"{lo['p99_ms']:.2f} ms | {bound:.2f} ms | {'yes' if lo['p99_ms'] <= bound else 'no'} |")
    if nbest_rows:
        out += ["", f"## n-best lists (POST /v1/rerank, one list per request, concurrency {args.nbest_concurrency})", "",
                "| model | hypotheses per list | lists/s | hypotheses/s | p50 (ms) | p99 (ms) | ÷ raw best | target ≥ 90% |"
                " errors |", "|---|---|---|---|---|---|---|---|---|"]
        for r in nbest_rows:
            ratio = r["hyps_per_s"] / raws[r["size"]]["best_throughput"]
            out.append(f"| {r['size']} | {r['n']} | {r['rps']:.0f} | {r['hyps_per_s']:.0f} | {r['p50_ms']:.2f} | "
                       f"{r['p99_ms']:.2f} | {ratio:.0%} | {'yes' if ratio >= 0.9 else 'no'} | "
                       f"{sum(r['errors'].values()) if r['errors'] else 0} |")
        out += ["", "5 hypotheses: ATIS test's Whisper 5-best lists; 100: the hypotheses of 20 consecutive utterances as "
                "one list. The raw best is the runtime's at the server's threads (table above)."]
    out += ["", "Notes:", *[f"- {n}" for n in notes], *[f"- {n}" for n in READING], ""]
    return "\n".join(out)


READING = (
    "The raw runtime and each server point are measured at different moments on a machine whose load "
    "changes by 2x within minutes, so a ratio can be off by that much.",
    "With one sentence per request, each request costs the event loop a fixed amount of Python work (HTTP "
    "or gRPC parsing, routing, validation, JSON/protobuf answers, metrics and the access log; tokenisation "
    "runs batched in a thread under load); benchmarks/profile_server.py shows where it goes. With 2 cores "
    "(one for the loop, one for ONNX Runtime) and the load generator on the same cores, the loop, not the "
    "model, can bound throughput; requests that carry several texts (n-best lists) amortise it.",
)


if __name__ == "__main__":
    sys.exit(main())
