"""Import structure: the library's layers (pretraining, inference, evaluation, export, CLI over the shared
modules) import only downwards and never in a circle, the library never imports the server or the training
code, the old flat import paths are gone (no alias modules), the server's core (engine, batcher, errors) imports no
transport library, and serving an ONNX export (the server, electric.inference.runtime and scoring) imports
neither torch nor transformers - so a serving install can leave them out."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from source_imports import imports

REPO = Path(__file__).resolve().parents[1]
TORCH = ("torch", "transformers")
TRANSPORT_LIBRARIES = ("grpc", "grpc_health", "grpc_reflection", "fastapi", "starlette", "uvicorn", "httptools")


def imported_by(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of `modules` a fresh interpreter has imported after running `code`."""
    check = f"import json, sys\n{code}\nprint(json.dumps([m for m in {list(modules)!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def module_imports(package: str) -> dict[str, set[str]]:
    """Module -> the modules it imports (at the top or inside functions), for every module of `package`."""
    files = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (REPO / package).rglob("*.py")}
    edges = {}
    for name, path in files.items():
        found = set()
        for module, imported_name in imports(path):
            found.add(module)
            if imported_name and f"{module}.{imported_name}" in files:  # `from package import module`
                found.add(f"{module}.{imported_name}")
        edges[name] = found - {name}
    return edges


def test_no_import_circles_in_the_library():
    edges = module_imports("electric")
    inside = {m: {x for x in out if x in edges} for m, out in edges.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for x in inside[todo.pop()] - seen:
                if x == goal:
                    return True
                seen.add(x)
                todo.append(x)
        return False

    assert [(a, b) for a, out in inside.items() for b in sorted(out) if reaches(b, a)] == []


def test_the_library_imports_neither_the_server_nor_training():
    edges = module_imports("electric")
    assert {m: sorted(x for x in out if x.split(".")[0] in ("server", "training"))
            for m, out in edges.items() if any(x.split(".")[0] in ("server", "training") for x in out)} == {}
    named = [(p.name, node.value) for p in (REPO / "electric").rglob("*.py")
             for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and re.fullmatch(r"(server|training)(\.\w+)*", node.value)]
    assert named == []  # not by a string import either: `serve` comes in through an entry point


# The library's layers (docs/architecture.md): each may import the ones listed, nothing else of
# the library. The shared modules (checkpoint, tokenization, textio, hardware, batching, words, allocator, results)
# import no layer.
SHARED = {"electric", "electric.checkpoint", "electric.tokenization", "electric.textio", "electric.hardware",
          "electric.batching", "electric.words", "electric.shared_data", "electric.allocator", "electric.results"}
LAYERS = {
    "electric.grpc_gen": set(),  # the generated gRPC stubs of proto/ (the server's contract): protobuf and grpc only
    "electric.client": {"electric.grpc_gen"},  # httpx or grpcio, the stubs and electric.results: nothing else
    "electric.evaluation": set(),  # scores come in as numbers
    "electric.modeling": set(),  # the networks: every layer that loads a model imports them, they import none
    "electric.inference": {"electric.modeling"},  # never pretraining: loading a model needs the networks only
    "electric.pretraining": {"electric.evaluation", "electric.modeling"},  # health measures AUC with the one roc_auc
    "electric.finetuning": {"electric.evaluation"},  # its tasks report the evaluation metrics
    "electric.export": {"electric.inference", "electric.modeling", "electric.evaluation"},  # never pretraining
    "electric.cli": {"electric.inference", "electric.evaluation", "electric.export", "electric.modeling",
                     "electric.pretraining", "electric.finetuning",  # eval detect reads FCE with the task readers
                     "electric.client"},  # --server
}


def layer_of(module: str) -> str | None:
    if module in SHARED:
        return "shared"
    return next((layer for layer in LAYERS if module == layer or module.startswith(layer + ".")), None)


def test_each_layer_imports_only_the_layers_below_it_and_nothing_imports_the_cli_or_an_old_path():
    edges = module_imports("electric")
    assert sorted(m for m in edges if layer_of(m) is None) == []  # every module has a place
    wrong = {}
    for m, out in edges.items():
        allowed = {"shared", layer_of(m), *LAYERS.get(layer_of(m), ())}
        bad = sorted(x for x in out if x in edges and layer_of(x) not in allowed)
        if bad:
            wrong[m] = bad
    assert wrong == {}


def test_serve_and_adapt_are_subcommands_added_by_the_server_and_training_packages():
    from electric.cli import PLUGINS, build_parser

    assert {ep.name: ep.value for ep in entry_points(group=PLUGINS)} == {"serve": "server.cli:add_parser",
                                                                        "adapt": "training.adapt:add_parser"}
    choices = build_parser()._subparsers._group_actions[0].choices
    assert "serve" in choices and "adapt" in choices


def test_a_subcommand_builds_its_own_parser_alone():
    """`electric score ...` imports score's options, not serve's settings or the rerank reports (each start pays
    for what it imports); the whole parser still lists every command."""
    from electric.cli import build_parser

    for command in ("score", "serve"):
        assert list(build_parser(command)._subparsers._group_actions[0].choices) == [command]
    assert imported_by("from electric.cli import build_parser\nbuild_parser('score')",
                       ("server", "electric.evaluation", "training")) == []
    # nor does `electric score --server` build the checkpoint's pydantic models (a tenth of a second at each start)
    assert imported_by("from electric.cli import build_parser\nbuild_parser('score')\n"
                       "import electric.cli.server_scorer, electric.inference.records, electric.cli.offline.files",
                       ("electric.checkpoint", "pydantic")) == []
    assert {"score", "rerank", "eval", "export", "serve", "adapt"} <= \
        set(build_parser("scor")._subparsers._group_actions[0].choices)  # unknown: all, for argparse's message


def test_the_server_core_imports_no_transport_library():
    assert imported_by("import server.engine, server.batcher, server.errors, server.pipelines, server.transport",
                       TRANSPORT_LIBRARIES) == []


def test_the_serving_modules_and_the_cli_import_neither_torch_nor_transformers():
    assert imported_by("import server.app, server.grpc_service, electric.inference.runtime, electric.inference.scoring\n"
                       "from electric.cli import build_parser\nbuild_parser()", TORCH) == []


def test_the_base_install_is_a_serving_install():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = lambda reqs: {re.split(r"[<>=\[;! ]", r, maxsplit=1)[0].lower() for r in reqs}  # noqa: E731
    base, extras = names(project["dependencies"]), project["optional-dependencies"]
    assert not base & {"torch", "transformers", "datasets"}
    assert {"onnxruntime", "tokenizers", "numpy", "fastapi", "uvicorn", "pydantic", "grpcio"} <= base
    assert {"torch", "transformers"} <= names(extras["torch"])
    assert all("electric-scoring[torch" in " ".join(extras[e]) for e in ("train", "export"))


def test_torch_only_features_say_which_extra_to_install(disc_dir, monkeypatch):
    from electric import checkpoint
    from electric.inference.backend import TorchBackend
    from electric.inference.masked_lm import load_masked_lm
    from electric.tokenization import load_tokenizer

    real = checkpoint.importlib.util.find_spec
    monkeypatch.setattr(checkpoint.importlib.util, "find_spec",
                        lambda name, *a: None if name in TORCH else real(name, *a))
    for load in (TorchBackend, load_masked_lm, load_tokenizer):
        with pytest.raises(checkpoint.MissingExtra, match=re.escape(f"lacks: {checkpoint.install_hint('torch')}")):
            load(disc_dir)


SERVE_AND_SCORE = """
import asyncio
from server.app import create_app
from server.engine import Engine
from server.settings import Settings
from electric.inference.scoring import load_scorer

async def serve(model):
    engine = Engine(Settings(model=model, grpc_port=-1, access_log=False))
    try:
        await engine.start()
    except Exception:
        return engine.lifecycle.error
    answer = await engine.score(["the cat sat on the mat"], per_token=True)
    assert answer.results[0].num_tokens > 0
    answer = await engine.detect(["the cat sat on the mat"])
    assert answer.results[0].num_tokens > 0
    await engine.close(5)

create_app(Settings(model=EXPORT))
assert asyncio.run(serve(EXPORT)) is None
scorer = load_scorer(EXPORT, "electric")
assert scorer.score(["the cat sat on the mat"])[0].num_tokens > 0 and scorer.detect(["a dog"])[0].num_tokens > 0
"""
# as in a base install: `import torch` fails and importlib.util.find_spec("torch") is None
WITHOUT_TORCH = "import sys\nsys.modules.update(torch=None, transformers=None)\n"


@pytest.mark.integration
def test_serving_and_scoring_an_export_import_neither_torch_nor_transformers(disc_dir, tmp_path):
    from electric.export.exporter import export_model

    export_model(disc_dir, tmp_path / "onnx", log=lambda _: None)
    code = f"EXPORT = {str(tmp_path / 'onnx')!r}\n" + SERVE_AND_SCORE
    assert imported_by(code, TORCH) == []
    # and without torch and transformers installed, the export serves while a checkpoint says what to install
    imported_by(WITHOUT_TORCH + code + f"""
err = asyncio.run(serve({str(disc_dir)!r}))
assert "pip install 'electric-scoring[torch]'" in str(err), err
""", TORCH)


def test_training_entry_points_without_the_train_extra_say_so_in_one_line(tmp_path):
    # a serving install: torch, transformers and datasets cannot be imported (sitecustomize runs before `-m`)
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules.update(torch=None, transformers=None, "
                                               "datasets=None)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    for argv in (["-m", "training.pretrain", "--help"], ["-m", "training.tokenizer"], ["-c", "import training"]):
        p = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
        assert "needs torch and transformers and datasets, which this installation lacks: pip install " \
               "-e '.[train]' (from a checkout) or pip install 'electric-scoring[train]'" in p.stderr
        if argv[0] == "-m":
            assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and p.stdout == "", p.stderr
        else:  # imported by other code: the typed error, theirs to handle
            assert p.returncode == 1 and "electric.MissingExtra: " in p.stderr


OLD_PATHS = ("electric.nbest", "electric.scoring", "electric.backend", "electric.config", "electric.objectives", "electric.data", "electric.health")


@pytest.mark.integration
def test_no_alias_modules_and_importing_the_cloze_module_registers_the_cloze_model():
    """No release shipped the old flat paths, so they are gone (one home per module, no shims); the cloze model's
    module registers ElectricForClozeLM with transformers' Auto classes when imported."""
    assert not [m for m in OLD_PATHS if (REPO / (m.replace(".", "/") + ".py")).exists()]
    code = ("import importlib\n"
            f"for old in {OLD_PATHS!r}:\n"
            "    try:\n"
            "        importlib.import_module(old)\n"
            "    except ModuleNotFoundError:\n"
            "        continue\n"
            "    raise AssertionError(old)\n")
    assert imported_by(code, ()) == []
    assert imported_by("import electric.modeling.cloze\nfrom transformers import AutoConfig\n"
                       "assert type(AutoConfig.for_model('electric-cloze')).__name__ == 'ElectricClozeConfig'",
                       ("electric.modeling.cloze", "electric.pretraining")) == ["electric.modeling.cloze"]
