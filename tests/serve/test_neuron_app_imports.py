"""``neuron_app`` is shipped into pods with nothing but its sibling ``api_key_auth`` (one
ConfigMap) and imported on the Ray head, where vLLM is absent: it may import only what every Ray
image has, the sibling, and vLLM only lazily."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from eks_inference.charts.engines.rayservice import SERVE_APP_MODULES
from eks_inference.charts.shipped import API_KEY_AUTH_MODULE, module_file
from eks_inference.serve import neuron_app

SOURCE = Path(neuron_app.__file__)
ALLOWED_AT_IMPORT = set(sys.stdlib_module_names) | {
    "ray",
    "fastapi",
    "starlette",
    "pydantic",
    API_KEY_AUTH_MODULE,
}


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, with whether it runs when the module is imported (that is,
    it is not inside a function body)."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append((child, not in_function))
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            visit(child, nested)

    visit(tree, in_function=False)
    return found


def _roots(node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.ImportFrom):
        assert node.module is not None
        if node.level:
            # Only the shipped sibling, which a top-level import finds in the pods.
            assert (node.level, node.module) == (1, API_KEY_AUTH_MODULE)
        return {node.module.split(".")[0]}
    return {alias.name.split(".")[0] for alias in node.names}


def test_import_time_imports_are_in_every_ray_image() -> None:
    imports = _imports(ast.parse(SOURCE.read_text()))
    at_import = set().union(*(_roots(node) for node, eager in imports if eager))
    assert at_import <= ALLOWED_AT_IMPORT, at_import - ALLOWED_AT_IMPORT


def test_vllm_is_imported_only_inside_functions() -> None:
    imports = _imports(ast.parse(SOURCE.read_text()))
    vllm = [(node, eager) for node, eager in imports if "vllm" in _roots(node)]
    assert vllm, "the engine adapter imports vllm"
    assert not [node.lineno for node, eager in vllm if eager]


def test_the_project_package_is_never_imported() -> None:
    imports = _imports(ast.parse(SOURCE.read_text()))
    assert not [node.lineno for node, _ in imports if "eks_inference" in _roots(node)]


def test_the_shipped_files_alone_import_and_build_without_vllm_or_the_project(
    tmp_path: Path,
) -> None:
    for module in SERVE_APP_MODULES:
        shutil.copy(SOURCE.with_name(module_file(module)), tmp_path / module_file(module))
    args = {
        "model": "/models/m",
        "served_model_name": "m",
        "tensor_parallel_size": 2,
        "max_model_len": 2048,
        "max_num_seqs": 4,
        "block_size": 32,
        "dtype": "bfloat16",
        "additional_config": {"override_neuron_config": {}},
    }
    script = textwrap.dedent(
        f"""
        import importlib.abc
        import json
        import sys

        class Unavailable(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {{"vllm", "eks_inference"}}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, Unavailable())
        import neuron_app
        from ray import serve

        app = neuron_app.build_app(json.loads({json.dumps(json.dumps(args))}))
        assert isinstance(app, serve.Application)
        print(neuron_app.NeuronLLMServer.name, "vllm" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["NeuronLLMServer", "False"]
