"""The package root exports every construct, and every name the documentation shows imports.

The documentation (README.md and any page under docs/) is read as a user reads it: each
``from eks_inference import ...`` in its Python blocks, each ``eks_inference.<module>`` in its
code (``python -m eks_inference.observability.dashboards.picture``), and each construct whose
call it shows (``LoadBalancerController(scope, id, *, cluster)``), since the README says to
import the constructs from ``eks_inference``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from types import ModuleType

import pytest

import eks_inference
from tests.helpers.platforms import REPO

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_CONSTRUCT_CALL = re.compile(r"^([A-Z]\w*)\(scope, id\b")
_DOTTED = re.compile(r"\beks_inference(?:\.\w+)+")
_CONSTRUCT_PACKAGES = ("eks_inference.constructs", "eks_inference.stacks")


def _code_blocks(text: str) -> Iterator[tuple[str, str]]:
    for match in _FENCE.finditer(text):
        yield match.group(1), match.group(2)


def _documented_names() -> set[tuple[str, str]]:
    """``(module, name)`` pairs the documents import; name ``""`` for a module alone."""
    found: set[tuple[str, str]] = set()
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        for language, code in _code_blocks(text):
            if language == "python":
                for node in ast.walk(ast.parse(code)):
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "eks_inference"
                    ):
                        found.update((str(node.module), alias.name) for alias in node.names)
            found.update((dotted, "") for dotted in _DOTTED.findall(code))
        prose = _FENCE.sub("", text)
        for span in _INLINE_CODE.findall(prose):
            found.update((dotted, "") for dotted in _DOTTED.findall(span))
            call = _CONSTRUCT_CALL.match(span)
            if call:
                found.add(("eks_inference", call.group(1)))
    return found


def _resolve(dotted: str) -> object:
    """The module ``dotted`` names, or the attribute of the longest module prefix it names."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[end:]:
            target = getattr(target, attribute)
        return target
    raise ModuleNotFoundError(dotted)


DOCUMENTED = sorted(_documented_names())


def test_the_documents_are_read() -> None:
    assert ("eks_inference", "ModelDeploymentSpec") in DOCUMENTED
    assert ("eks_inference", "InferenceCluster") in DOCUMENTED
    assert ("eks_inference.observability.dashboards.picture", "") in DOCUMENTED


@pytest.mark.parametrize(
    ("module", "name"), DOCUMENTED, ids=[f"{m}.{n}" if n else m for m, n in DOCUMENTED]
)
def test_every_documented_name_imports(module: str, name: str) -> None:
    target = _resolve(module)
    if name:
        assert isinstance(target, ModuleType), module
        assert hasattr(target, name), f"`from {module} import {name}` fails"


def _construct_classes() -> Iterator[type]:
    """Every public class under constructs/ and stacks/ that is a construct."""
    from constructs import Construct

    for package_name in _CONSTRUCT_PACKAGES:
        package = importlib.import_module(package_name)
        for info in pkgutil.walk_packages(package.__path__, f"{package_name}."):
            if any(part.startswith("_") for part in info.name.split(".")):
                continue
            module = importlib.import_module(info.name)
            for name, cls in inspect.getmembers(module, inspect.isclass):
                if (
                    cls.__module__ == module.__name__
                    and not name.startswith("_")
                    and issubclass(cls, Construct)
                ):
                    yield cls


def test_the_package_root_exports_every_construct() -> None:
    classes = list(_construct_classes())
    assert classes
    missing = sorted(cls.__name__ for cls in classes if cls.__name__ not in eks_inference.__all__)
    assert not missing, f"not in eks_inference.__all__: {missing}"
    for cls in classes:
        assert getattr(eks_inference, cls.__name__) is cls


def test_every_name_in_all_imports_from_the_root() -> None:
    namespace: dict[str, object] = {}
    exec("from eks_inference import *", namespace)
    assert set(eks_inference.__all__) <= set(namespace)
