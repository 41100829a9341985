"""No route to a handler without the key: every route of the pinned servers, path by path,
through the rendered Ingresses and into a real ASGI app behind the shipped API-key check.

The route tables are upstream's (``tests/upstream/``, each with its source); the Neuron
application's are read from the application itself. The load balancer is modelled from the
rendered Ingresses as the AWS Load Balancer Controller v3.5.0 builds its listener
(``pkg/ingress/model_build_listener.go``, ``model_build_listener_rules.go``): one rule per
Ingress path, a prefix path matching itself and everything below it, the
``transforms.<service>`` rewrite applied before forwarding, and a fixed 404 as the listener's
default action for every request no rule matches, which the controller builds when no Ingress
of the group names a default backend. A request the model forwards is then sent to an app
with every route of the table, behind the middleware exactly as the server loads it, once
without the key and once with it.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, WebSocket
from fastapi.responses import JSONResponse
from ray import serve

from eks_inference.charts.adapters import RUNTIME_ADAPTER_PATHS
from eks_inference.charts.fabric import fabric
from eks_inference.charts.ingress import (
    ALB_ANNOTATION_PREFIX,
    NOT_FOUND_ACTION,
    USE_ANNOTATION_PORT,
    ingress,
)
from eks_inference.charts.model_server import OPENAI_PORT
from eks_inference.charts.serving import serving_engine
from eks_inference.engines.rayservice.engine import SERVE_PROXY_HEALTH_PATH
from eks_inference.engines.vllm.engine import server_image
from eks_inference.serve.api_key_auth import (
    API_KEY_ENV,
    HEALTH_PATH,
    APIKeyMiddleware,
    VLLMAPIKeyMiddleware,
)
from eks_inference.serve.neuron.app import api_key_ingress
from eks_inference.serve.neuron.server import OpenAIServer
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.routes import served_model_names
from eks_inference.versions import (
    LMCACHE_VLLM_IMAGE,
    NEURON_VLLM_IMAGE,
    VLLM_EFA_IMAGE,
    VLLM_GPU_IMAGE,
)
from tests.helpers.platforms import REPO, UPSTREAM
from tests.helpers.rendered import CONTEXT, VARIANT_DEPLOYMENTS, VARIANT_POOLS
from tests.helpers.serve_fakes import KEYED_CONFIG, FakeEngine, HTTPResult, call_app

KEY = "k3y-0f-the-platform"
LOAD_BALANCER_HOST = "internal-k8s-eksinference-0123456789.us-east-1.elb.amazonaws.com"
# Ray's ingress wrapper defines ``async def __del__``; replicas built here are freed without
# awaiting it.
pytestmark = pytest.mark.filterwarnings(
    "ignore:coroutine '.*ASGIIngressWrapper.__del__' was never awaited:RuntimeWarning"
)


@dataclass(frozen=True)
class ServerRoute:
    """One route of a server: ``method`` is an HTTP method, ``WEBSOCKET``, or ``PROXY`` for a
    route Serve's proxy answers itself, whatever the method."""

    method: str
    path: str

    def concrete_path(self) -> str:
        """The path with each ``{parameter}`` replaced by a value."""
        return re.sub(r"\{[^}]+\}", "x", self.path)


def _service(spec: ModelDeploymentSpec) -> str:
    """The Service the load balancer sends ``spec``'s requests to."""
    return serving_engine(spec).backend(spec).service


def route_table(name: str) -> tuple[ServerRoute, ...]:
    lines = (UPSTREAM / name).read_text().splitlines()
    rows = [line.split(" ") for line in lines if line and not line.startswith("#")]
    return tuple(ServerRoute(method, path) for method, path in rows)


VLLM_GPU_ROUTES = route_table("vllm-v0.34.0-routes.txt")
# The routes of the EFA image's vLLM (multi-node groups on EFA nodes).
VLLM_EFA_ROUTES = route_table("vllm-v0.31.0-routes.txt")
VLLM_NEURON_ROUTES = route_table("vllm-v0.16.0-routes.txt")
RAY_LLM_ROUTES = route_table("ray-2.60.0-serve-llm-routes.txt")
SERVE_PROXY_ROUTES = tuple(r for r in RAY_LLM_ROUTES if r.method == "PROXY")

NEURON_CONFIG = KEYED_CONFIG


def neuron_app() -> FastAPI:
    return OpenAIServer(NEURON_CONFIG, FakeEngine(), api_key=KEY).asgi_app()


def neuron_routes() -> tuple[ServerRoute, ...]:
    """The Neuron application's own routes, read from the app, and the proxy's in front."""
    app_routes = tuple(
        ServerRoute(method, route.path)
        for route in neuron_app().routes
        for method in sorted(getattr(route, "methods", None) or ())
    )
    return app_routes + SERVE_PROXY_ROUTES


# -- the route tables ------------------------------------------------------------------------


def test_the_ray_serve_llm_table_is_the_installed_releases() -> None:
    """The OpenAI ingress routes of the table are those of the installed ``ray`` 2.60.0."""
    import ray

    assert ray.__version__ == "2.60.0"
    source = Path(ray.__file__).parent / "llm/_internal/serve/core/ingress/ingress.py"
    (endpoints,) = [
        node.value
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "DEFAULT_ENDPOINTS" for t in node.targets)
    ]
    assert isinstance(endpoints, ast.Dict)
    declared = set()
    for factory in endpoints.values:
        assert isinstance(factory, ast.Lambda)
        call = factory.body
        assert isinstance(call, ast.Call)
        assert isinstance(call.func, ast.Attribute)
        assert isinstance(call.args[0], ast.Constant)
        declared.add(ServerRoute(call.func.attr.upper(), call.args[0].value))
    fastapi_defaults = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
    listed = {r for r in RAY_LLM_ROUTES if r.method != "PROXY" and r.path not in fastapi_defaults}
    assert listed == declared


def test_the_vllm_tables_hold_the_routes_the_issue_found_open() -> None:
    for table in (VLLM_GPU_ROUTES, VLLM_NEURON_ROUTES):
        paths = {r.path for r in table}
        assert {"/invocations", "/tokenize", "/detokenize", "/scale_elastic_ep"} <= paths
        assert {"/docs", "/openapi.json", "/metrics", HEALTH_PATH} <= paths
    assert "/generative_scoring" in {r.path for r in VLLM_GPU_ROUTES}
    assert "/inference/v1/generate" in {r.path for r in VLLM_NEURON_ROUTES}


# -- the load balancer, as the controller builds it ------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One listener rule: a host condition (``None``: any host) and a prefix or exact path,
    forwarding to a Service or, with ``fixed_status``, answered by the load balancer."""

    ingress: str
    host: str | None
    path: str
    service: str
    annotations: dict[str, str]
    exact: bool = False
    fixed_status: int | None = None

    def matches(self, host: str, path: str) -> bool:
        if self.host is not None and self.host != host.lower():
            return False
        if self.exact:
            return path == self.path
        # A Prefix path matches itself and the paths below it (ALB values `p` and `p/*`).
        return self.path == "/" or path == self.path or path.startswith(f"{self.path}/")


@dataclass(frozen=True)
class Answer:
    """What the load balancer does with a request: forwards it to ``service`` as ``path``, or,
    with neither (no rule matched), answers the listener's default fixed 404 itself."""

    service: str | None = None
    path: str | None = None
    fixed_status: int | None = None

    @property
    def default_404(self) -> bool:
        return self.service is None and self.fixed_status is None


def listener_rules(ingresses: list[dict[str, Any]]) -> list[Rule]:
    """The listener rules the controller builds from the Ingresses of one group."""
    rules = []
    for obj in ingresses:
        annotations = {
            key.removeprefix(ALB_ANNOTATION_PREFIX): value
            for key, value in obj["metadata"]["annotations"].items()
        }
        for rule in obj["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                service = path["backend"]["service"]
                fixed_status = None
                if service["port"] == {"name": USE_ANNOTATION_PORT}:
                    # An action of the load balancer's own: only ever a fixed response.
                    action = json.loads(annotations[f"actions.{service['name']}"])
                    assert action["type"] == "fixed-response"
                    fixed_status = int(action["fixedResponseConfig"]["statusCode"])
                    assert path["pathType"] == "Exact"
                else:
                    assert path["pathType"] == "Prefix"
                    # A Service port: no backend answers in the load balancer itself.
                    assert service["port"] == {"number": OPENAI_PORT}
                rules.append(
                    Rule(
                        obj["metadata"]["name"],
                        rule.get("host"),
                        path["path"],
                        service["name"],
                        annotations,
                        exact=path["pathType"] == "Exact",
                        fixed_status=fixed_status,
                    )
                )
    return rules


def matching_rules(rules: list[Rule], host: str, path: str) -> list[Rule]:
    return [rule for rule in rules if rule.matches(host, path)]


def load_balancer(rules: list[Rule], host: str, path: str) -> Answer:
    matching = matching_rules(rules, host, path)
    # An exact path's rule comes before its Ingress's prefix paths (the controller's
    # sortIngressPaths); routes of different Ingresses never overlap.
    fixed = [rule for rule in matching if rule.fixed_status is not None]
    if fixed:
        assert len({rule.ingress for rule in matching}) == 1, (host, path, matching)
        return Answer(fixed_status=fixed[0].fixed_status)
    assert len(matching) <= 1, (host, path, matching)
    if not matching:
        return Answer()  # the listener's default action
    (rule,) = matching
    forwarded = path
    transform = rule.annotations.get(f"transforms.{rule.service}")
    if transform is not None:
        (rewrite,) = json.loads(transform)[0]["urlRewriteConfig"]["rewrites"]
        forwarded = re.sub(rewrite["regex"], rewrite["replace"].replace("$1", r"\1"), path)
    return Answer(service=rule.service, path=forwarded)


# -- the servers behind it -------------------------------------------------------------------


def _reached(path: str) -> Any:
    async def handler() -> JSONResponse:
        return JSONResponse({"reached": path})

    return handler


def table_app(routes: tuple[ServerRoute, ...]) -> FastAPI:
    """An app serving every route of ``routes`` with a handler that says it was reached."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    for route in routes:
        if route.method == "PROXY":
            continue
        path = route.path.replace("{path}", "{path:path}")  # a mount: every path below it
        if route.method == "WEBSOCKET":

            async def accept(websocket: WebSocket) -> None:
                await websocket.accept()
                await websocket.close()

            app.add_api_websocket_route(path, accept)
        else:
            app.add_api_route(path, _reached(route.path), methods=[route.method])
    return app


def vllm_app(routes: tuple[ServerRoute, ...]) -> FastAPI:
    """The table's app with the check added as vLLM adds a ``--middleware`` class."""
    app = table_app(routes)
    app.add_middleware(VLLMAPIKeyMiddleware)
    return app


class StandInIngress:
    """Ray Serve LLM's ``OpenAiIngress`` as far as the wrapping relies on it."""


def ray_llm_app() -> Any:
    """The table's app, wrapped by Serve's ingress around the checked ingress class."""
    wrapped: Any = serve.ingress(table_app(RAY_LLM_ROUTES))(
        api_key_ingress(StandInIngress, API_KEY_ENV)
    )
    replica = wrapped.__new__(wrapped)
    asyncio.run(wrapped.__init__(replica))
    return replica.app


async def _websocket(app: Any, path: str, key: str | None) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    headers = [(b"authorization", f"Bearer {key}".encode())] if key is not None else []
    scope = {"type": "websocket", "path": path, "root_path": "", "headers": headers}
    scope.update({"scheme": "ws", "query_string": b"", "subprotocols": []})
    scope.update({"server": ("testserver", 80), "client": ("127.0.0.1", 40000)})
    messages = [{"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1000}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(app(scope, receive, send), timeout=10)
    return sent


def call(app: Any, route: ServerRoute, path: str, key: str | None) -> HTTPResult:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    payload = {} if route.method in ("POST", "PUT", "PATCH") else None
    return asyncio.run(call_app(app, route.method, path, payload, request_headers=headers))


# -- the platforms ---------------------------------------------------------------------------

ENDPOINTS: dict[str, dict[str, Any]] = {
    "path": {},
    "host": {
        "scheme": "internet-facing",
        "routing": "host",
        "host": "models.example.com",
        "certificate_arn": "arn:aws:acm:us-east-1:111122223333:certificate/"
        "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
        "source_cidrs": ["203.0.113.0/24"],
    },
}


MULTI_NODE = "multi-node"


def _variants(endpoint: str) -> PlatformSpec:
    """The variant deployments (every engine on every accelerator) behind ``endpoint``."""
    return PlatformSpec.model_validate(
        {
            "model_bucket_name": CONTEXT.bucket_name,
            "node_pools": VARIANT_POOLS,
            "deployments": VARIANT_DEPLOYMENTS,
            "endpoint": ENDPOINTS[endpoint],
        }
    )


@pytest.fixture(scope="module", params=[*sorted(ENDPOINTS), MULTI_NODE])
def platform(request: pytest.FixtureRequest) -> PlatformSpec:
    """The variants behind each routing, and the multi-node example (groups whose leaders run
    the EFA image)."""
    if request.param == MULTI_NODE:
        return PlatformSpec.from_yaml(REPO / "examples" / "multi-node.yaml")
    return _variants(request.param)


@pytest.fixture(scope="module", params=sorted(ENDPOINTS))
def variants(request: pytest.FixtureRequest) -> PlatformSpec:
    """The variants behind each routing: the platform with LoRA adapters."""
    return _variants(request.param)


# Each image of standalone vLLM by the route table of its release.
_VLLM_IMAGE_ROUTES = {
    NEURON_VLLM_IMAGE: VLLM_NEURON_ROUTES,
    VLLM_GPU_IMAGE: VLLM_GPU_ROUTES,
    LMCACHE_VLLM_IMAGE: VLLM_GPU_ROUTES,
    VLLM_EFA_IMAGE: VLLM_EFA_ROUTES,
}


def server_routes(spec: ModelDeploymentSpec, platform: PlatformSpec) -> tuple[ServerRoute, ...]:
    """The routes of ``spec``'s server: its image's vLLM release, or Ray Serve LLM's."""
    if spec.engine == "vllm":
        pool = platform.placement(spec).workers
        return _VLLM_IMAGE_ROUTES[server_image(spec, fabric(spec, pool))]
    return neuron_routes() if spec.on_neuron else RAY_LLM_ROUTES


def _server_apps(platform: PlatformSpec) -> Iterator[dict[str, Any]]:
    """Each deployment's server app, built with the key in the environment, as in the pod."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(API_KEY_ENV, KEY)
        built: dict[str, Any] = {}
        for spec in platform.deployments:
            if spec.engine == "vllm":
                built[spec.name] = vllm_app(server_routes(spec, platform))
            elif spec.on_neuron:
                built[spec.name] = neuron_app()
            else:
                built[spec.name] = ray_llm_app()
        yield built


@pytest.fixture(scope="module")
def apps(platform: PlatformSpec) -> Iterator[dict[str, Any]]:
    yield from _server_apps(platform)


@pytest.fixture(scope="module")
def variant_apps(variants: PlatformSpec) -> Iterator[dict[str, Any]]:
    yield from _server_apps(variants)


def client_requests(platform: PlatformSpec, spec: ModelDeploymentSpec, path: str) -> list[str]:
    """Every request path a client could try for a server path: under the deployment's
    prefix, and bare."""
    route = platform.routes()[spec.name]
    return sorted({f"{route.path or ''}{path}", path})


def _is_api(path: str) -> bool:
    return path == "/v1" or path.startswith("/v1/")


def _routes(platform: PlatformSpec) -> list[tuple[ModelDeploymentSpec, Any]]:
    routes = platform.routes()
    return [(spec, routes[spec.name]) for spec in platform.deployments]


def group_ingresses(platform: PlatformSpec) -> list[dict[str, Any]]:
    """The Ingresses of the platform's IngressGroup, as the charts render them."""
    return [ingress(spec, route, CONTEXT.vpc_cidr) for spec, route in _routes(platform)]


def test_no_ingress_of_the_group_sets_a_default_backend(platform: PlatformSpec) -> None:
    """The listener's default action stays the controller's fixed 404: no Ingress names a
    default backend, explicitly or as a rule for every path of every host."""
    found = group_ingresses(platform)
    assert len(found) == len(platform.deployments)
    for obj in found:
        assert "defaultBackend" not in obj["spec"]
        for rule in obj["spec"]["rules"]:
            # One path forwarded, the deployment's API: one forwarding rule per deployment;
            # the others are answered by the load balancer itself.
            forwarded = [p for p in rule["http"]["paths"] if p["pathType"] == "Prefix"]
            (path,) = forwarded
            assert path["path"].endswith("/v1")
            assert not (path["path"] == "/" and "host" not in rule)
        actions = [key for key in obj["metadata"]["annotations"] if "/actions." in key]
        assert actions in ([], [f"{ALB_ANNOTATION_PREFIX}actions.{NOT_FOUND_ACTION}"])


def test_no_route_reaches_a_handler_without_the_key(
    platform: PlatformSpec, apps: dict[str, Any]
) -> None:
    rules = listener_rules(group_ingresses(platform))
    checked = 0
    for spec, route in _routes(platform):
        app = apps[spec.name]
        host = route.host or LOAD_BALANCER_HOST
        for server_route in server_routes(spec, platform):
            target = server_route.concrete_path()
            for path in client_requests(platform, spec, target):
                answer = load_balancer(rules, host, path)
                if answer.default_404 or answer.fixed_status == 404:
                    continue
                # Forwarded: only the deployment's own OpenAI API, to its own Service.
                assert answer.service == _service(spec), (spec.name, path)
                assert answer.path is not None
                assert _is_api(answer.path), (spec.name, path)
                assert server_route.method != "PROXY", (spec.name, path)
                assert answer.path == target
                if server_route.method == "WEBSOCKET":
                    refused = asyncio.run(_websocket(app, answer.path, None))
                    assert refused == [{"type": "websocket.close", "code": 1008}]
                    accepted = asyncio.run(_websocket(app, answer.path, KEY))
                    assert accepted[0]["type"] == "websocket.accept"
                    checked += 1
                    continue
                without = call(app, server_route, answer.path, None)
                assert without.status == 401, (spec.name, server_route)
                assert without.json()["error"]["code"] == "invalid_api_key"
                with_key = call(app, server_route, answer.path, KEY)
                assert with_key.status != 401, (spec.name, server_route, with_key.body)
                checked += 1
    assert checked > 0


def test_every_non_api_route_matches_no_rule_of_any_ingress(platform: PlatformSpec) -> None:
    """Each route of the pinned servers outside ``/v1``, under the deployment's prefix or bare,
    on its host or the load balancer's, matches no rule of the group: the listener's default
    404 answers it."""
    rules = listener_rules(group_ingresses(platform))
    checked = 0
    for spec, route in _routes(platform):
        hosts = {route.host or LOAD_BALANCER_HOST, LOAD_BALANCER_HOST}
        for server_route in server_routes(spec, platform):
            if _is_api(server_route.path):
                continue
            for path in client_requests(platform, spec, server_route.concrete_path()):
                for host in hosts:
                    assert matching_rules(rules, host, path) == [], (spec.name, host, path)
                    checked += 1
    assert checked > 0


def test_every_api_route_is_reached_with_the_key(
    platform: PlatformSpec, apps: dict[str, Any]
) -> None:
    """The OpenAI routes a client uses answer as the server does, not with a 404."""
    rules = listener_rules(group_ingresses(platform))
    reached = 0
    for spec, route in _routes(platform):
        host = route.host or LOAD_BALANCER_HOST
        for server_route in server_routes(spec, platform):
            if not _is_api(server_route.path) or server_route.method == "WEBSOCKET":
                continue
            path = f"{route.path or ''}{server_route.concrete_path()}"
            if server_route.path in route.blocked_paths:
                continue  # answered by the load balancer (test_runtime_adapter_endpoints_...)
            reached += 1
            answer = load_balancer(rules, host, path)
            assert answer.service == _service(spec), (spec.name, path)
            result = call(apps[spec.name], server_route, str(answer.path), KEY)
            if spec.engine == "rayservice" and spec.on_neuron:
                assert result.status in (200, 400, 404), result.body  # the real handlers
            else:
                assert result.json() == {"reached": server_route.path}, (spec.name, path)
    assert reached


def test_the_health_path_is_only_on_the_target_group(platform: PlatformSpec) -> None:
    rules = listener_rules(group_ingresses(platform))
    for spec, route in _routes(platform):
        target = serving_engine(spec).backend(spec)
        annotations = ingress(spec, route, CONTEXT.vpc_cidr)["metadata"]["annotations"]
        assert annotations[f"{ALB_ANNOTATION_PREFIX}healthcheck-path"] == target.health_path
        assert target.health_path in (HEALTH_PATH, SERVE_PROXY_HEALTH_PATH)
        host = route.host or LOAD_BALANCER_HOST
        for path in client_requests(platform, spec, target.health_path):
            assert load_balancer(rules, host, path).default_404, (spec.name, path)


def test_other_paths_under_a_deployments_prefix_match_no_rule(platform: PlatformSpec) -> None:
    rules = listener_rules(group_ingresses(platform))
    for spec, route in _routes(platform):
        host = route.host or LOAD_BALANCER_HOST
        prefix = route.path or ""
        for path in ("/tokenize", "/invocations", "/v1beta/models", "/v10", "/", ""):
            request = f"{prefix}{path}" or "/"
            assert matching_rules(rules, host, request) == [], (spec.name, request)
        # The API itself does match, so the misses above are not for want of a rule.
        assert load_balancer(rules, host, f"{prefix}/v1/models").service == _service(spec)
    assert load_balancer(rules, "unknown.example.org", "/nothing/v1/models").default_404


def test_the_multi_node_leaders_are_checked_with_the_routes_of_the_efa_images_vllm() -> None:
    """The groups of the multi-node example run the EFA image, so the route tests above read
    its release's table for them (which has routes the pinned release does not, outside
    ``/v1``)."""
    example = PlatformSpec.from_yaml(REPO / "examples" / "multi-node.yaml")
    for spec in example.deployments:
        assert server_routes(spec, example) is VLLM_EFA_ROUTES
    assert {r.path for r in VLLM_EFA_ROUTES} - {r.path for r in VLLM_GPU_ROUTES}


# -- LoRA adapters ---------------------------------------------------------------------------


def test_runtime_adapter_endpoints_answer_404_on_the_load_balancer_and_need_the_key_inside(
    variants: PlatformSpec, variant_apps: dict[str, Any]
) -> None:
    """A deployment finding adapters on demand registers vLLM's runtime load and unload
    endpoints (under ``/v1``): through the load balancer each answers the fixed 404 of its
    Ingress, under the prefix and bare, on every host; inside the cluster the server requires
    the key for them."""
    rules = listener_rules(group_ingresses(variants))
    on_demand = [(s, r) for s, r in _routes(variants) if r.blocked_paths]
    assert on_demand, "the variants platform has a deployment with on-demand adapters"
    gpu_paths = {r.path for r in VLLM_GPU_ROUTES}
    for spec, route in on_demand:
        assert route.blocked_paths == RUNTIME_ADAPTER_PATHS
        # The table of the pinned vLLM holds them: a renamed endpoint would fail here.
        assert set(RUNTIME_ADAPTER_PATHS) <= gpu_paths
        hosts = {route.host or LOAD_BALANCER_HOST, LOAD_BALANCER_HOST}
        for blocked in route.blocked_paths:
            server_route = ServerRoute("POST", blocked)
            for path in client_requests(variants, spec, blocked):
                for host in hosts:
                    answer = load_balancer(rules, host, path)
                    assert answer.service is None, (spec.name, host, path)
                    assert answer.default_404 or answer.fixed_status == 404
            without = call(variant_apps[spec.name], server_route, blocked, None)
            assert without.status == 401
            with_key = call(variant_apps[spec.name], server_route, blocked, KEY)
            assert with_key.json() == {"reached": blocked}


def test_adapters_answer_by_name_on_the_api(variants: PlatformSpec) -> None:
    """The adapters are model names of the deployment's API: a chat completion naming one
    goes through the load balancer to the deployment's own Service, like the base model."""
    rules = listener_rules(group_ingresses(variants))
    served = [(s, r) for s, r in _routes(variants) if s.adapters is not None]
    assert served
    for spec, route in served:
        assert spec.adapters is not None
        names = served_model_names(spec)
        assert names == (spec.model.id, *spec.adapters.preload, *spec.adapters.on_demand)
        host = route.host or LOAD_BALANCER_HOST
        answer = load_balancer(rules, host, f"{route.path or ''}/v1/chat/completions")
        assert answer.service == _service(spec)
        assert answer.path == "/v1/chat/completions"


# -- NVIDIA Dynamo's frontend, behind the API-key proxy ----------------------------------------

DYNAMO_FRONTEND_ROUTES = route_table("dynamo-1.6.1-frontend-routes.txt")


def test_through_the_load_balancer_only_the_dynamo_frontends_v1_is_reached_and_with_the_key() -> (
    None
):
    """The example Dynamo platform: every route of the frontend, under each deployment's
    prefix and bare, either matches no listener rule (the default 404) or is its ``/v1``,
    forwarded to the proxy's Service, where the proxy's check (the project's middleware, in
    front of the frontend's routes here; its forwarding is tests/serve/test_api_key_proxy.py)
    refuses it without the key and passes it with."""
    platform = PlatformSpec.from_yaml(REPO / "examples" / "dynamo.yaml")
    rules = listener_rules(group_ingresses(platform))
    proxied = APIKeyMiddleware(table_app(DYNAMO_FRONTEND_ROUTES), KEY)
    reached = refused_404 = 0
    for spec, route in _routes(platform):
        host = route.host or LOAD_BALANCER_HOST
        for server_route in DYNAMO_FRONTEND_ROUTES:
            target = server_route.concrete_path()
            for path in client_requests(platform, spec, target):
                answer = load_balancer(rules, host, path)
                if answer.default_404:
                    refused_404 += 1
                    continue
                assert answer.service == _service(spec) == spec.name, (spec.name, path)
                assert answer.path == target
                assert _is_api(target), (spec.name, path)
                if server_route.method == "WEBSOCKET":
                    refused = asyncio.run(_websocket(proxied, target, None))
                    assert refused == [{"type": "websocket.close", "code": 1008}]
                    continue
                assert call(proxied, server_route, target, None).status == 401
                assert call(proxied, server_route, target, KEY).json() == {
                    "reached": server_route.path
                }
                reached += 1
    assert reached > 0
    assert refused_404 > 0
    non_api = {r.path for r in DYNAMO_FRONTEND_ROUTES if not _is_api(r.path)}
    assert {"/metrics", "/busy_threshold", "/docs", "/openapi.json", "/live"} <= non_api
