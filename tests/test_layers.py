"""The package's layers, checked from its imports: data flows one way, and nothing is circular.

Spec, catalog and the facts beside them (pure Python) -> charts and observability (the
objects and how they are watched; cdk8s only to wrap them in charts) -> constructs (aws-cdk)
-> stacks. The operations (``ops``) and the CLI stand beside the constructs and never load
aws-cdk. A module may import its own layer or those below it, never one above, type-checking
imports included; and no two modules import each other, directly or through others,
type-checking imports included (a model does not name the rules that read it: they are
written into its rule book; an interface names the types it takes, and they never name it
back). Imports are read from the source, so the check costs no import of the package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "eks_inference"
# Layer of each subpackage; the specification, the catalog (with its sizing arithmetic) and the
# fact modules at the top of the package (names, versions, metric names, AWS value types) are
# the spec layer. The manifest writer's text and directory code and the observation of a
# deployment sit above it, the platform's charts above those, the engines (which build their
# objects with the charts' pod builder) above the charts.
LAYERS = {
    "output": 2,
    "observability": 2,
    "charts": 3,
    "engines": 4,
    "constructs": 5,
    "ops": 5,
    "cli": 5,
    "stacks": 6,
}
SPEC_LAYER = 1
# The package's own __init__ re-exports every layer (the constructs lazily) for users.
ENTRY_POINTS = {"eks_inference", "eks_inference.__main__"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imported_names(node: ast.AST) -> set[str]:
    found: set[str] = set()
    if isinstance(node, ast.Import):
        found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        for alias in node.names:
            submodule = f"{node.module}.{alias.name}"
            found.add(submodule if submodule in MODULES else node.module)
    return found


def _is_type_checking_block(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )


def _imports(module: str, *, type_checking: bool = True) -> set[str]:
    """Project modules that ``module`` imports (``from pkg import submodule`` as the submodule,
    and the packages above each, whose ``__init__`` runs first), with or without those imported
    only for type checking."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    skipped: set[int] = set()
    if not type_checking:
        for node in ast.walk(tree):
            if _is_type_checking_block(node):
                skipped.update(id(inner) for inner in ast.walk(node))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) not in skipped:
            found |= _imported_names(node)
    # Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
    parts = [name.split(".") for name in found]
    found |= {".".join(p[:i]) for p in parts for i in range(2, len(p))}
    own_packages = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 2)}
    return {name for name in found if name in MODULES and name not in own_packages}


GRAPH = {module: _imports(module) for module in MODULES}
RUN_TIME_GRAPH = {module: _imports(module, type_checking=False) for module in MODULES}


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], SPEC_LAYER) if len(parts) > 1 else SPEC_LAYER


def test_the_graph_is_read() -> None:
    vllm = "eks_inference.engines.vllm.engine"
    assert "eks_inference.charts.pod" in GRAPH[vllm]
    assert "eks_inference.charts.mountpoint" in GRAPH[vllm]
    assert "eks_inference.charts.mountpoint" not in RUN_TIME_GRAPH[vllm]
    assert "eks_inference.constructs.cluster" in GRAPH["eks_inference.constructs.model_deployment"]
    assert layer("eks_inference.specification.deployment") < layer(vllm)
    assert layer(vllm) < layer("eks_inference.constructs.cluster")


@pytest.mark.parametrize("module", sorted(set(MODULES) - ENTRY_POINTS))
def test_no_module_imports_a_layer_above_it(module: str) -> None:
    above = sorted(i for i in GRAPH[module] if layer(i) > layer(module))
    assert not above, f"{module} (layer {layer(module)}) imports {above}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("eks_inference.cli")))
def test_the_cli_never_loads_aws_cdk(module: str) -> None:
    loaded = {i for i in GRAPH[module] if i.split(".")[1:2] in (["constructs"], ["stacks"])}
    assert not loaded, f"{module} imports {sorted(loaded)}"


def test_no_import_cycles() -> None:
    """Depth-first search for a back edge, type-checking imports included; the cycle found
    is reported whole."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for imported in sorted(GRAPH[module]):
            if imported in ENTRY_POINTS or module in ENTRY_POINTS:
                continue
            if state.get(imported) == "open":
                return [*path[path.index(imported) :], imported]
            if imported not in state and (cycle := visit(imported)):
                return cycle
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(MODULES):
        if module not in state and (cycle := visit(module)):
            pytest.fail("import cycle: " + " -> ".join(cycle))


def _comparisons_of(attribute: str, module: str) -> list[int]:
    """Lines of ``module`` comparing an ``.<attribute>`` (or a name ``attribute``) with ==, !=,
    in or not in."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
            isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops
        ):
            for side in (node.left, *node.comparators):
                name = side.attr if isinstance(side, ast.Attribute) else getattr(side, "id", None)
                if name == attribute:
                    lines.append(node.lineno)
    return lines


def test_only_the_registry_dispatches_on_the_engine() -> None:
    """No module compares ``spec.engine``: each asks the engine it names (``engine_of``)."""
    found = {
        module: lines
        for module in MODULES
        if module != "eks_inference.specification.engines"
        and (lines := _comparisons_of("engine", module))
    }
    assert not found, found


def test_importing_the_package_and_validating_a_spec_starts_no_node() -> None:
    """The engines register when the package is imported, without loading a jsii library:
    the CLI and the spec layer never start Node.js."""
    code = (
        "import sys\n"
        "import eks_inference\n"
        "from eks_inference.specification.platform import PlatformSpec\n"
        "from eks_inference.observability.signals import signals_of\n"
        f"platform = PlatformSpec.from_yaml({str(PACKAGE.parent / 'deployments.yaml')!r})\n"
        "for spec in platform.deployments:\n"
        "    signals_of(spec)\n"
        "jsii = {'jsii', 'cdk8s', 'constructs', 'aws_cdk'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in jsii))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]", result.stderr


# A module longer than this does more than one job; a command module longer than the CLI's
# bound holds logic that belongs in the operations (eks_inference/ops/).
MAX_MODULE_LINES = 600
MAX_COMMAND_MODULE_LINES = 250


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_longer_than_one_job(module: str) -> None:
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    bound = MAX_COMMAND_MODULE_LINES if module.startswith("eks_inference.cli") else MAX_MODULE_LINES
    assert lines <= bound, f"{module} has {lines} lines; split it (at most {bound})"
