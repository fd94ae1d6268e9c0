"""The product and the studies stay apart: nothing in electric/, server/, training/ or scripts/ imports research/ (or a
study's script by its own name, or benchmarks/), the benchmarks kept in benchmarks/ import no study and no benchmark
script imports another in a circle, and every study folder says what it holds in its README."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from source_imports import imports

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("electric", "server", "training", "scripts")
STUDY_MODULES = {p.stem for p in (REPO / "research").rglob("*.py")}  # equal_compute, glue_compare, adapt_recipe, ...


def imported(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside a function, as written (absolute imports only)."""
    return {module for module, _ in imports(path)}


def names_a_study_path(path: Path) -> list[str]:
    """String literals (docstrings and other bare strings aside) that name research/ or benchmarks/ or a file in
    them: how a script would be loaded by its path or run as a command."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in prose and re.match(r"(research|benchmarks)(/\S*)?$", n.value)]


def study_imports(modules: set[str]) -> set[str]:
    return {m for m in modules
            if m.split(".")[0] in ("research", "benchmarks") or m.split(".")[0] in STUDY_MODULES}


def test_the_product_imports_no_study_and_no_benchmark():
    files = [p for part in PRODUCT for p in (REPO / part).rglob("*.py") if "grpc_gen" not in p.parts]
    assert len(files) > 50 and REPO / "scripts" / "quickstart.py" in files
    bad = {str(p.relative_to(REPO)): sorted(study_imports(imported(p))) for p in files}
    assert {k: v for k, v in bad.items() if v} == {}
    by_path = {str(p.relative_to(REPO)): names_a_study_path(p) for p in files}
    assert {k: v for k, v in by_path.items() if v} == {}


def test_the_check_sees_each_way_of_importing_a_study(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import research.equal_compute.equal_compute\nfrom benchmarks import bench_server\n"
                 "def g():\n    import glue_compare\n    from research.paired_bootstrap import paired_bootstrap_mean_diff\n"
                 "    run('research/lr_sweep/lr_sweep.py')\n")
    assert study_imports(imported(f)) == {"research.equal_compute.equal_compute", "benchmarks", "glue_compare",
                                          "research.paired_bootstrap"}
    assert names_a_study_path(f) == ["research/lr_sweep/lr_sweep.py"]
    f.write_text('"""See research/lr_sweep/README.md."""\nspec(REPO / "research" / "x.py")\n')
    assert names_a_study_path(f) == ["research"]


def test_the_kept_benchmarks_import_no_study():
    files = sorted((REPO / "benchmarks").glob("*.py"))
    assert REPO / "benchmarks" / "bench_efficiency.py" in files
    bad = {p.name: sorted(m for m in imported(p) if m.split(".")[0] == "research" or m in STUDY_MODULES)
           for p in files}
    assert {k: v for k, v in bad.items() if v} == {}


def test_no_benchmark_script_imports_another_in_a_circle():
    """benchmarks/*.py import each other by file name (`from _server_harness import ...`): that graph has no cycle."""
    names = {p.stem: p for p in (REPO / "benchmarks").glob("*.py")}
    edges = {n: {m.split(".")[-1] for m in imported(p)} & set(names) - {n} for n, p in names.items()}
    assert "_efficiency_peer" in edges["bench_efficiency"]  # the edge that once ran both ways

    def cycle_from(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        for nxt in sorted(edges[node]):
            if (found := cycle_from(nxt, path + [node])) is not None:
                return found
        return None

    assert [c for n in sorted(names) if (c := cycle_from(n, [])) is not None] == []


def test_every_study_folder_has_a_readme_naming_its_scripts_and_a_commit():
    studies = [d for d in sorted((REPO / "research").iterdir()) if d.is_dir() and not d.name.startswith((".", "_"))]
    assert len(studies) >= 8
    for d in studies:
        readme = d / "README.md"
        assert readme.is_file(), f"{d.relative_to(REPO)} has no README.md"
        text = readme.read_text(encoding="utf-8")
        assert re.search(r"\b[0-9a-f]{7,40}\b", text), f"{readme.relative_to(REPO)} names no commit"
        missing = [p.name for p in d.glob("*.py") if p.name not in text]
        assert missing == [], f"{readme.relative_to(REPO)} does not name {missing}"


# ---- the page of figures -------------------------------------------------------------------------------------

FIGURE_PAGES = [REPO / "BENCHMARKS.md", *sorted((REPO / "benchmarks" / "archive").glob("*.md")),
                REPO / "research" / "README.md", *sorted((REPO / "research").glob("*/README.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """GitHub's id for a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {github_anchor(line.lstrip("#")) for line in page.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")}


def test_every_link_of_the_figure_pages_reaches_a_file_and_its_section():
    assert github_anchor(" Electric energy + cloze model, one pass each") == "electric-energy--cloze-model-one-pass-each"
    broken = []
    for page in FIGURE_PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert broken == []


def test_the_page_of_figures_is_one_page_and_its_headline_says_no_now():
    text = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    headline = text.split("## Headline figures", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in headline.splitlines() if line.startswith("| ") and not line.startswith("| measure")]
    assert len(rows) >= 15 and all(line.count(" | ") >= 4 for line in rows)  # figure, machine, command, detail
    assert re.findall(r"\b(now|above|below)\b", headline, flags=re.IGNORECASE) == []
