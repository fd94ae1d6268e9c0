"""The project's own words: the README fits one screen, and nothing in the docs, the figures, the studies or the
code speaks of who runs the project or how its machines are obtained (it describes the machine a script needs)."""

from __future__ import annotations

import re

from conftest import REPO

README_MAX_LINES = 120
PLACES = ("README.md", "BENCHMARKS.md", "docs", "benchmarks", "research", "electric", "server", "training", "scripts",
          "Dockerfile", "tests")
# how a machine is obtained or who ran a figure, never what a script needs
WORDS = re.compile(r"\b(?:GPU|this|other|different|work) sessions?\b|\b(?:is|was|were|when) lent\b|\blent to\b"
                   r"|\bdevice tool\b|\bno device\b", re.IGNORECASE)
SUFFIXES = (".md", ".py", ".sh", ".txt", ".toml", "")


def files():
    for place in PLACES:
        p = REPO / place
        for f in [p] if p.is_file() else sorted(p.rglob("*")):
            if f.is_file() and f.suffix in SUFFIXES and f.name != "test_docs_words.py" and "grpc_gen" not in f.parts:
                yield f


def test_the_readme_fits_one_screen():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; keep it to {README_MAX_LINES}"
    assert lines[0] == "# Electric" and any(line.startswith("## Quick start: two commands") for line in lines)


def test_the_project_speaks_of_itself_alone():
    found = []
    for f in files():
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{f.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
                  for m in WORDS.finditer(text)]
    assert found == [], "\n".join(found)
