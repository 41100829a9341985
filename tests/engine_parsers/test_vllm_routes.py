"""The route tables of vLLM's OpenAI-compatible server under ``tests/upstream/``, rebuilt from
the installed vLLM's own source.

``tests/charts/test_ingress_routes.py`` holds every route of ``vllm-v0.34.0-routes.txt`` (the
pinned GPU vLLM, ``versions.GPU_VLLM_VERSION``) against the load balancer's rules and the API
key; ``vllm-v0.31.0-routes.txt`` records vLLM 0.31.0's, the release of the vLLM image that
multi-node groups on EFA nodes run. Where one of those releases is the installed vLLM (in the
environment of ``test_vllm_parser.py``), this reads its ``vllm/entrypoints/`` with ``ast``,
importing nothing, and compares the routes found with its table, read as the tables' headers
say: each route a router or app registers by decorator (``get``, ``post``, ``put``,
``delete``, ``patch``, ``websocket``, ``api_route``) or by ``add_api_route`` with a literal
path, whether or not a flag enables it; a static-files ``mount`` as ``GET <prefix>/{path}``
and a ``Mount`` appended to the routes (the metrics exposition, answering at its own path) as
``GET <path>``; path parameters as ``{name}``; FastAPI's own routes added. Left out: the
data-parallel supervisor (``launchers/dp_supervisor.py``) and the health server of
``vllm preload``'s weight daemons (``cli/``), servers of their own. The only paths that are
not literals are FastAPI's OAuth2 redirect (among FastAPI's own) and, in 0.34.0, the
scale-out routers' routes registered again under a refusing handler when scale-out is off.
"""

from __future__ import annotations

import ast
import re
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests.helpers.platforms import UPSTREAM
from tests.helpers.vllm_args import SERVE_OPTION_TABLES

# Located, not imported: reading the source needs neither torch nor a device.
_VLLM = find_spec("vllm")
if _VLLM is None or _VLLM.origin is None:
    pytest.skip("vLLM is not installed", allow_module_level=True)
SOURCE = Path(_VLLM.origin).parent / "entrypoints"
INSTALLED = version("vllm")

# Each release with a recorded option table has its route table.
ROUTE_TABLES = {
    release: UPSTREAM / f"vllm-v{release}-routes.txt" for release in SERVE_OPTION_TABLES
}
SEPARATE_SERVERS = ("launchers/dp_supervisor.py", "cli/")
FASTAPI_ROUTES = {
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/docs/oauth2-redirect"),
    ("GET", "/redoc"),
}
_DECORATORS = {"get", "post", "put", "delete", "patch", "websocket", "api_route"}
_CONVERTER = re.compile(r"\{(\w+):\w+\}")


def _path(call: ast.Call) -> str | None:
    """The literal path ``call`` registers, if its first argument is one."""
    first = call.args[0] if call.args else None
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return _CONVERTER.sub(r"{\1}", first.value)
    return None


def _methods(call: ast.Call) -> list[str]:
    """The ``methods=[...]`` of an ``api_route``/``add_api_route`` (GET when not given)."""
    for keyword in call.keywords:
        if keyword.arg == "methods":
            assert isinstance(keyword.value, ast.List | ast.Tuple | ast.Set), ast.unparse(call)
            return [str(ast.literal_eval(m)).upper() for m in keyword.value.elts]
    return ["GET"]


def _decorated(call: ast.Call, path: str) -> set[tuple[str, str]]:
    assert isinstance(call.func, ast.Attribute)
    name = call.func.attr
    if name == "websocket":
        return {("WEBSOCKET", path)}
    methods = _methods(call) if name == "api_route" else [name.upper()]
    return {(method, path) for method in methods}


def _registered(call: ast.Call, path: str) -> set[tuple[str, str]]:
    """The routes of a registering call outside a decorator."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "add_api_route":
        return {(method, path) for method in _methods(call)}
    if isinstance(call.func, ast.Attribute) and call.func.attr == "mount":
        return {("GET", f"{path.rstrip('/')}/{{path}}")}
    if isinstance(call.func, ast.Name) and call.func.id == "Mount":
        return {("GET", path)}
    return set()


def _module_routes(tree: ast.Module) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    decorators = {
        id(decorator)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for decorator in node.decorator_list
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (path := _path(node)) is None:
            continue
        if id(node) in decorators:
            if isinstance(node.func, ast.Attribute) and node.func.attr in _DECORATORS:
                found |= _decorated(node, path)
        else:
            found |= _registered(node, path)
    return found


def source_routes(entrypoints: Path) -> list[tuple[str, str]]:
    """The server's routes read from ``entrypoints`` (a release's ``vllm/entrypoints/``), by
    path and then method, as the tables list them."""
    found = set(FASTAPI_ROUTES)
    for module in entrypoints.rglob("*.py"):
        if not module.relative_to(entrypoints).as_posix().startswith(SEPARATE_SERVERS):
            found |= _module_routes(ast.parse(module.read_text(encoding="utf-8")))
    return sorted(found, key=lambda route: (route[1], route[0]))


def recorded_routes(path: Path) -> list[tuple[str, str]]:
    lines = path.read_text().splitlines()
    rows = [line.split(" ") for line in lines if line and not line.startswith("#")]
    return [(method, route) for method, route in rows]


@pytest.mark.parametrize("release", sorted(ROUTE_TABLES))
def test_the_recorded_route_table_is_its_releases_source(release: str) -> None:
    if release != INSTALLED:
        pytest.skip(f"vLLM {INSTALLED} is installed, not {release}")
    assert source_routes(SOURCE) == recorded_routes(ROUTE_TABLES[release])
