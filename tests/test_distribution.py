"""The pip distribution has a name of its own, `electric-scoring` (`electric` on PyPI is an unrelated project):
pyproject.toml and the installed metadata say so, every install hint in the code, the docs and the Dockerfile
names it (or a checkout's `pip install -e '.[extra]'`), a hint the code prints says both, and metadata left by an
install under the former name does not break the `electric` command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import entry_points, version
from pathlib import Path

import pytest

from electric import DISTRIBUTION, __version__
from electric.checkpoint import install_hint

REPO = Path(__file__).resolve().parents[1]
# where a user reads or is printed an install hint (tests included: they assert on the hints)
HINT_PLACES = ("electric", "server", "training", "scripts", "benchmarks", "research", "docs", "tests", "README.md",
               "Dockerfile", "pyproject.toml", ".ci/run", "BENCHMARKS.md")
SUFFIXES = {".py", ".md", ".sh", ".toml", ".txt", ""}
# the former name as a requirement: `electric[extra]`, or `pip install electric` / `pip install "electric`
FORMER_NAME = re.compile(r"(?<![\w.-])electric\[|pip install ['\"]?electric(?![\w-])")


def hint_files() -> list[Path]:
    files = []
    for name in HINT_PLACES:
        path = REPO / name
        found = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES]
        files += [p for p in found if "grpc_gen" not in p.parts and "__pycache__" not in p.parts]
    return [p for p in files if p != Path(__file__).resolve()]  # this file names the former name to look for it


def test_the_distribution_is_named_electric_scoring_and_installs_the_electric_package_and_command():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION == "electric-scoring" and project["version"] == __version__
    assert project["scripts"] == {"electric": "electric.cli:main"}
    # the installed metadata is this checkout's (after `pip install -e .`): looked up by the new name
    assert version(DISTRIBUTION) == __version__
    assert {ep.name for ep in entry_points(group="console_scripts") if ep.dist.name == DISTRIBUTION} == {"electric"}


def test_every_install_hint_names_the_distribution():
    files = hint_files()
    assert len(files) > 100 and REPO / "Dockerfile" in files and REPO / "docs" / "server.md" in files
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in files
             for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if FORMER_NAME.search(line)]
    assert found == []
    assert FORMER_NAME.search("pip install 'electric[torch]'") and FORMER_NAME.search('pip install "electric"')
    assert not FORMER_NAME.search("pip install 'electric-scoring[torch]'")


def test_a_printed_hint_says_how_to_install_from_a_checkout_and_by_name():
    assert install_hint("export") == ("pip install -e '.[export]' (from a checkout) or "
                                      "pip install 'electric-scoring[export]'")


def test_export_help_names_its_extra(capsys):
    from electric.cli import main

    for argv in (["--help"], ["export", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "parity checks (needs the export extra)" in out  # `electric --help`'s line
    assert f"Needs the export extra (torch, transformers, onnx), which a serving install leaves out: " \
           f"{install_hint('export')}." in out


def test_metadata_left_by_an_install_under_the_former_name_does_not_break_the_command(tmp_path):
    """`pip install -e .` after the rename leaves the old `electric` dist-info (and a checkout its electric.egg-info)
    until it is uninstalled: the `serve` entry point is then listed twice, and must give one subcommand."""
    stale = tmp_path / "electric.egg-info"
    stale.mkdir()
    (stale / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: electric\nVersion: {__version__}\n")
    (stale / "entry_points.txt").write_text("[electric.commands]\nserve = server.cli:add_parser\n")
    code = ("from importlib.metadata import entry_points\nfrom electric.cli import main\n"
            "assert [ep.name for ep in entry_points(group='electric.commands')].count('serve') == 2\n"
            "main(['serve', '--help'])")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == 0 and "usage: electric serve" in p.stdout, p.stderr[-2000:]


# `pip install torch==VERSION`, with its index when it names one
TORCH_LINE = re.compile(r"pip install torch==[\w.+]+(?: --(?:extra-)?index-url \S+[\w/])?")
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def test_the_readme_and_the_install_page_install_the_same_torch():
    """Issue 51, item 3: the quick start's torch line installs what it says, the CPU build from PyTorch's CPU wheel
    index (PyPI's Linux wheel is the CUDA build), and docs/install.md gives the same line; .ci/run pins the same
    version."""
    readme = TORCH_LINE.findall((REPO / "README.md").read_text(encoding="utf-8"))
    install = TORCH_LINE.findall((REPO / "docs" / "install.md").read_text(encoding="utf-8"))
    assert readme and all(line.endswith(CPU_INDEX) for line in readme), readme
    assert set(readme) <= set(install), (readme, install)
    assert f"```bash\n{readme[0]}\n```" in (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    versions = {m for name in ("README.md", "docs/install.md", ".ci/run")
                for m in re.findall(r"torch==([\w.+]+)", (REPO / name).read_text(encoding="utf-8"))}
    assert len(versions) == 1, versions
