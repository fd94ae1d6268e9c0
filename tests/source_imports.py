"""What a Python file imports, read from its source (no import is run): the one AST walk that tests/test_imports.py
(the library's layers) and tests/test_research_apart.py (the product apart from its studies) both check."""

from __future__ import annotations

import ast
from pathlib import Path


def imports(path: Path) -> list[tuple[str, str | None]]:
    """Every absolute import in `path`, at the top or inside a function: (module, None) for `import module`,
    (module, name) for each name of `from module import name`."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend((node.module, a.name) for a in node.names)
    return found
