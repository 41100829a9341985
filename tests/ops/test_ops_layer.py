"""The operations stand below the CLI: no ``eks_inference.ops`` module imports the CLI, aws-cdk
(the constructs and stacks), or the CLI's frameworks (click, typer, rich).

Imports are read from the source (type-checking and function-level imports included), so the
check costs no import of the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

OPS = Path(__file__).resolve().parents[2] / "eks_inference" / "ops"
FORBIDDEN = (
    "eks_inference.cli",
    "eks_inference.constructs",
    "eks_inference.stacks",
    "aws_cdk",
    "click",
    "typer",
    "rich",
)


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports, and for ``from pkg import name`` also ``pkg.name``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            pytest.fail(f"{path} uses a relative import; the check reads absolute ones")
    return found


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f"{f}.") for f in FORBIDDEN)


def test_the_ops_modules_are_found() -> None:
    assert (OPS / "upload" / "run.py") in set(OPS.rglob("*.py"))


@pytest.mark.parametrize("path", sorted(OPS.rglob("*.py")), ids=lambda p: str(p.relative_to(OPS)))
def test_no_ops_module_imports_the_cli_aws_cdk_or_a_cli_framework(path: Path) -> None:
    wrong = sorted(name for name in _imported(path) if _forbidden(name))
    assert not wrong, f"{path.relative_to(OPS.parent)} imports {wrong}"
