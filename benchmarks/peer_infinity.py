"""The peer of `bench_server.py --peer infinity`: infinity-emb (github.com/michaelfeil/infinity) serving the same
fine-tuned sequence classifier from its `/classify` route, installed into a virtual environment of its own
(never into the project's).

What it needed, recorded in the report:
- its own venv with the pinned CPU torch installed first (its `torch` extra would otherwise pull a CUDA build);
- HF_HUB_OFFLINE=1 (the model is a local directory) and its telemetry off (INFINITY_ANONYMOUS_USAGE_STATS=0,
  DO_NOT_TRACK=1: the machine has no internet);
- the classifier's tokenizer must state the model's real `model_max_length`: infinity warms up with an input
  of the tokenizer's maximum length and fails at start-up when the tokenizer says 512 and the position
  embeddings hold 128 (bench_server's checkpoints now save the model's length with the tokenizer);
- `--no-vector-disk-cache` so no answer is served from a cache of earlier requests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NAME = "infinity"
SPEC = "infinity-emb[torch,optimum,server]==0.0.78"
# resolved together with SPEC: infinity 0.0.78's optimum engine hands optimum an absolute .onnx path, which optimum
# 2.x refuses ("Could not find any ONNX files with target file name ..."); it needs numpy 1.x, and so do the
# pyarrow and pandas that its datasets import; optimum 1.x's BetterTransformer (its torch engine) needs transformers<4.49
PINS = ("optimum[onnxruntime]<2", "numpy<2", "pyarrow<17", "pandas<2.3", "transformers<4.49")
TORCH_SPEC = "torch==2.13.0"  # the CPU build on this machine's disk; a bare `torch` is a multi-GB CUDA build
ROUTE = "/classify"
ENV = {"HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1"}
WORKAROUNDS = (
    f"infinity-emb installed into its own virtual environment with `pip install {TORCH_SPEC}` first, then "
    f"`pip install '{SPEC}' {' '.join(repr(p) for p in PINS)}` (optimum 1.x: infinity 0.0.78's optimum engine "
    "passes optimum 2.x an absolute .onnx path it refuses; numpy 1.x, as infinity requires)",
    "HF_HUB_OFFLINE=1 and telemetry off (INFINITY_ANONYMOUS_USAGE_STATS=0, DO_NOT_TRACK=1): the model is a local "
    "directory and the machine has no internet",
    "the tokenizer's model_max_length set to the model's 128 positions: infinity warms up with an input of the "
    "tokenizer's maximum length (512 before) and failed at start-up",
    "`--no-vector-disk-cache`, so no answer comes from a cache of earlier requests",
    "for its optimum engine: the checkpoint's encoder exported to ONNX beside its files (infinity does not export "
    "one), the server started in that directory with `--model-id .` (infinity 0.0.78 passes optimum the .onnx path "
    "as found, which must be a bare file name), and a start-up shim for the private torch.onnx names optimum 1.x "
    "imports and torch 2.13 moved",
)


def install(venv: Path, log=print) -> Path:
    """The `infinity_emb` executable of `venv`, installing it there first unless an install of this SPEC is there."""
    exe = venv / "bin" / "infinity_emb"
    stamp = venv / "electric-peer.json"
    wanted = {"torch": TORCH_SPEC, "peer": SPEC, "pins": list(PINS), "torch_onnx_shim": 1}
    if exe.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        return exe
    log(f"installing {SPEC} into {venv} (its own virtual environment; a few minutes) ...")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    for specs in ((TORCH_SPEC,), (SPEC, *PINS)):
        if subprocess.run([*pip, *specs]).returncode != 0:
            raise SystemExit(f"could not install {' '.join(specs)} into {venv}; see pip's output above")
    add_torch_onnx_shim(venv)
    stamp.write_text(json.dumps(wanted) + "\n")
    return exe


SHIM = '''"""Written by electric's benchmarks/peer_infinity.py: optimum 1.x (infinity's optimum engine) imports private
names of torch.onnx.symbolic_opset14 that torch 2.13 keeps in torch.onnx._internal.torchscript_exporter."""
import torch.onnx.symbolic_opset14 as public
from torch.onnx._internal.torchscript_exporter import symbolic_opset14 as internal

for name in dir(internal):
    if not hasattr(public, name):
        setattr(public, name, getattr(internal, name))
'''


def add_torch_onnx_shim(venv: Path) -> None:
    """A module and a .pth in the venv's site-packages that run SHIM at every start of its Python."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "electric_peer_torch_onnx_shim.py").write_text(SHIM)
    (site / "electric_peer_torch_onnx_shim.pth").write_text("import electric_peer_torch_onnx_shim\n")


def command(exe: Path, model_dir: Path, port: int, batch_size: int) -> list[str]:
    """infinity's v2 CLI serving `model_dir` as "classifier" with its torch engine on the CPU."""
    return [str(exe), "v2", "--model-id", str(Path(model_dir).resolve()), "--served-model-name", "classifier",
            "--port", str(port), "--host", "127.0.0.1", "--engine", "torch", "--device", "cpu",
            "--batch-size", str(batch_size), "--no-vector-disk-cache"]


def body(text: str) -> dict:
    """One text per request, as infinity's /classify takes it."""
    return {"model": "classifier", "input": [text]}
