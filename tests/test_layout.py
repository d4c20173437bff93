"""House rules of the package layout that a reader relies on."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "creditaudit"


def _private_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("creditaudit"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.module}.{alias.name}")
    return found


def test_no_module_imports_another_modules_private_name():
    # what one module offers another is public (documented, stable); a private name stays home
    assert _private_imports() == []
