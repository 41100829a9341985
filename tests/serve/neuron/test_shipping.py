"""The Neuron package is shipped into the Ray pods with nothing but the API-key check (one
ConfigMap, laid out as the package ``eks_inference_serve``) and imported on the Ray head, where
vLLM is absent: its modules may import only what every Ray image has, each other, and vLLM only
lazily; and laid out exactly as the ConfigMap's volume mounts it, the package imports and builds
the application the Serve config names."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from eks_inference.charts.render import render_platform
from eks_inference.charts.shipped import (
    NEURON_PACKAGE,
    SHIPPED_PACKAGE,
    config_map_name,
    module_path,
    module_source,
)
from eks_inference.engines.rayservice.engine import SERVE_APP_MODULES
from eks_inference.names import NEURON_SERVER_DEPLOYMENT
from eks_inference.serve import neuron
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REPO

ALLOWED_AT_IMPORT = set(sys.stdlib_module_names) | {"ray", "fastapi", "starlette", "pydantic"}
NEURON_SOURCES = Path(neuron.__file__).parent


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


def _module_imports(module: str) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    return _imports(ast.parse(module_source(module)))


def _roots(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The top-level packages an absolute import loads; none for a relative one."""
    if isinstance(node, ast.ImportFrom):
        if node.level:
            return set()
        assert node.module is not None
        return {node.module.split(".")[0]}
    return {alias.name.split(".")[0] for alias in node.names}


def _relative_targets(module: str, node: ast.ImportFrom) -> set[str]:
    """The modules (dotted under ``eks_inference/serve/``) a relative import in ``module``
    loads, packages as their ``__init__``; resolved as Python resolves them."""
    package = module.split(".")[:-1]
    up = node.level - 1
    assert up <= len(package), f"{module}: a relative import beyond the shipped tree"
    base = package[: len(package) - up]
    if node.module is not None:
        names = [[*base, *node.module.split(".")]]
    else:
        names = [[*base, alias.name] for alias in node.names]
    shipped = set(SERVE_APP_MODULES)
    return {
        ".".join(name) if ".".join(name) in shipped else ".".join([*name, "__init__"])
        for name in names
    }


def test_every_module_of_the_package_is_shipped() -> None:
    sources = {f"{NEURON_PACKAGE}.{path.stem}" for path in NEURON_SOURCES.glob("*.py")}
    assert f"{NEURON_PACKAGE}.__init__" in sources
    assert sources <= set(SERVE_APP_MODULES)
    # The tree above the package is a package too, so relative imports resolve in the pods.
    assert "__init__" in SERVE_APP_MODULES


@pytest.mark.parametrize("module", SERVE_APP_MODULES)
def test_import_time_imports_are_in_every_ray_image(module: str) -> None:
    imports = _module_imports(module)
    at_import = set().union(*(_roots(node) for node, eager in imports if eager))
    assert at_import <= ALLOWED_AT_IMPORT, at_import - ALLOWED_AT_IMPORT


@pytest.mark.parametrize("module", SERVE_APP_MODULES)
def test_relative_imports_name_shipped_modules(module: str) -> None:
    """Only the shipped siblings and the check above them, which the pods' copy of the tree
    holds at the same relative places."""
    relative = [
        node
        for node, _ in _module_imports(module)
        if isinstance(node, ast.ImportFrom) and node.level
    ]
    for node in relative:
        assert _relative_targets(module, node) <= set(SERVE_APP_MODULES), ast.unparse(node)


def test_vllm_is_imported_only_inside_functions() -> None:
    imports = [
        (module, node, eager)
        for module in SERVE_APP_MODULES
        for node, eager in _module_imports(module)
        if "vllm" in _roots(node)
    ]
    assert imports, "the engine adapter imports vllm"
    assert not [(module, node.lineno) for module, node, eager in imports if eager]


@pytest.mark.parametrize("module", SERVE_APP_MODULES)
def test_the_project_package_is_never_imported(module: str) -> None:
    imports = _module_imports(module)
    assert not [node.lineno for node, _ in imports if "eks_inference" in _roots(node)]


# -- the package as the pods get it ----------------------------------------------------------

# Runs in a fresh interpreter whose PYTHONPATH is the pod's: vLLM and the project are absent, and
# Ray Serve LLM (in the GPU images only) is a stand-in recording what the GPU builder hands it.
_IMPORT_AND_BUILD = """
import importlib
import importlib.abc
import json
import sys
import types

class Unavailable(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"vllm", "eks_inference"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Unavailable())

built = []
llm = types.ModuleType("ray.serve.llm")
llm.build_openai_app = lambda config: built.append(config) or "ray-serve-llm-application"
ingress = types.ModuleType("ray.serve.llm.ingress")
ingress.OpenAiIngress = type("OpenAiIngress", (), {})
sys.modules.update({"ray.serve.llm": llm, "ray.serve.llm.ingress": ingress})

from ray import serve

module_name, builder = sys.argv[1].split(":")
module = importlib.import_module(module_name)
application = getattr(module, builder)(json.loads(sys.argv[2]))
print(json.dumps({
    "serve_application": isinstance(application, serve.Application),
    "deployment": module.NeuronLLMServer.name,
    "ingress": [
        [cls.__module__, cls.__name__]
        for cls in built[0]["ingress_cls_config"]["ingress_cls"].__mro__
    ] if built else None,
    "modules": {
        name: getattr(module, "__file__", None)
        for name, module in sys.modules.items()
        if name.split(".")[0] in {"vllm", "eks_inference", "api_key_auth", sys.argv[3]}
    },
}))
"""


def _materialise(config_map: dict[str, Any], template: dict[str, Any], root: Path) -> Path:
    """Write ``config_map``'s keys under ``root`` where ``template``'s server container finds
    them (its volume's ``items``, under the volume's mount path); the container's
    ``PYTHONPATH``, under ``root``."""
    (volume,) = _serve_volumes(template, config_map["metadata"]["name"])
    (container,) = [
        c
        for c in template["spec"]["containers"]
        if any(m["name"] == volume["name"] for m in c.get("volumeMounts", []))
    ]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    items = volume["configMap"]["items"]
    # Every key is mounted, each at its own path.
    assert sorted(item["key"] for item in items) == sorted(config_map["data"])
    assert len({item["path"] for item in items}) == len(items)
    for item in items:
        path = root / mount["mountPath"].lstrip("/") / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config_map["data"][item["key"]], encoding="utf-8")
    (python_path,) = [e["value"] for e in container["env"] if e["name"] == "PYTHONPATH"]
    return root / python_path.lstrip("/")


def _serve_volumes(template: dict[str, Any], config_map: str) -> list[dict[str, Any]]:
    """The volumes of ``template`` that hold the ConfigMap ``config_map``."""
    volumes: list[dict[str, Any]] = template["spec"]["volumes"]
    return [v for v in volumes if v.get("configMap", {}).get("name") == config_map]


@pytest.fixture(scope="module")
def ray_services() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each RayService of the reference platform that ships the package, with its ConfigMap."""
    platform = PlatformSpec.from_yaml(REPO / "deployments.yaml")
    rendered = render_platform(platform)
    found = []
    for spec in platform.deployments:
        if spec.engine != "rayservice":
            continue
        objects = rendered[spec.name]
        maps = [
            o
            for o in objects
            if o["kind"] == "ConfigMap" and o["metadata"]["name"] == config_map_name(spec)
        ]
        (service,) = [o for o in objects if o["kind"] == "RayService"]
        found.extend((service, config_map) for config_map in maps)
    return found


def test_the_shipped_package_alone_imports_and_builds_as_the_configmap_lays_it_out(
    ray_services: list[tuple[dict[str, Any], dict[str, Any]]], tmp_path: Path
) -> None:
    """For each RayService: the ConfigMap's keys written where its volume mounts them, the Serve
    config's import path imported and its builder run with the Serve config's args, in a
    subprocess with only the pod's PYTHONPATH (and the interpreter's own site-packages, for Ray
    and FastAPI), without vLLM or the project."""
    builders = set()
    for service, config_map in ray_services:
        cluster = service["spec"]["rayClusterConfig"]
        head = cluster["headGroupSpec"]["template"]
        name = config_map["metadata"]["name"]
        # Head and workers mount the same files, so one layout stands for every pod.
        for group in cluster["workerGroupSpecs"]:
            assert _serve_volumes(group["template"], name) == _serve_volumes(head, name)
        root = tmp_path / name
        python_path = _materialise(config_map, head, root)
        (application,) = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
        import_path = application["import_path"]
        builders.add(import_path.rsplit(":", 1)[1])
        empty = tmp_path / f"{name}-cwd"
        empty.mkdir()
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                textwrap.dedent(_IMPORT_AND_BUILD),
                import_path,
                json.dumps(application["args"]),
                SHIPPED_PACKAGE,
            ],
            cwd=empty,
            env={**os.environ, "PYTHONPATH": str(python_path)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        module_name = import_path.split(":")[0]
        modules: dict[str, str | None] = report["modules"]
        # The application module, and the check it imports, came from the ConfigMap's files.
        assert module_name.startswith(f"{SHIPPED_PACKAGE}.")
        for loaded in (module_name, f"{SHIPPED_PACKAGE}.api_key_auth"):
            file = modules[loaded]
            assert file is not None
            relative = Path(file).relative_to(python_path).as_posix()
            assert relative == f"{SHIPPED_PACKAGE}/{module_path(loaded.split('.', 1)[1])}"
        assert not {m.split(".")[0] for m in modules} & {"vllm", "eks_inference", "api_key_auth"}
        assert report["deployment"] == NEURON_SERVER_DEPLOYMENT
        if report["ingress"] is None:
            assert report["serve_application"]
        else:
            # Ray Serve LLM's ingress (the stand-in), subclassed behind the check.
            assert report["ingress"] == [
                [module_name, "APIKeyOpenAiIngress"],
                ["__main__", "OpenAiIngress"],
                ["builtins", "object"],
            ]
    assert builders == {"build_app", "build_ray_llm_app"}
