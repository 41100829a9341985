"""The endpoint: Ingresses on one load balancer (valid, documented, routed, health-checked on the
servers' readiness routes), the API-key objects, and the servers' side of the key and the idle
timeout."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import replace
from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from eks_inference import names
from eks_inference.charts.api_key import API_KEY_SECRET_NEED
from eks_inference.charts.deployment import deployment_charts, endpoint_charts, needs_of
from eks_inference.charts.ingress import (
    ALB_ANNOTATION_PREFIX,
    ENDPOINT_ROLE,
    NOT_FOUND_ACTION,
    TLS_POLICY,
    api_key_chart,
    api_key_objects,
    not_found_action,
    strip_prefix_transform,
)
from eks_inference.charts.ingress import ingress as render_ingress
from eks_inference.charts.model_server import KEEP_ALIVE_MARGIN_S
from eks_inference.charts.render import API_KEY_FILE, render_files, render_platform
from eks_inference.charts.server_deployment import TERMINATION_GRACE_S
from eks_inference.charts.shipped import SHIPPED_PATH
from eks_inference.engines.rayservice.engine import (
    KEEP_ALIVE_ANNOTATION,
    SERVE_PROXY_HEALTH_PATH,
    serve_service_name,
)
from eks_inference.serve.api_key_auth import API_KEY_ENV
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.routes import api_key_secret_name, idle_timeout_seconds
from eks_inference.versions import KUBERNETES_VERSION
from tests.helpers.checks import found
from tests.helpers.objects import _strict, of_kind, one, pod_templates, serve_config
from tests.helpers.platforms import CRDS
from tests.helpers.rendered import CONTEXT, VARIANT_DEPLOYMENTS, VARIANT_POOLS, Rendered

# Every Ingress annotation the AWS Load Balancer Controller v3.5.0 documents: the annotation
# table and sections of docs/guide/ingress/annotations.md at tag v3.5.0
# (https://github.com/kubernetes-sigs/aws-load-balancer-controller/blob/v3.5.0/docs/guide/ingress/annotations.md,
# commit 11eb202c97e4ae2ee45e0658c4cde9a4b59f33d4), the release versions.py pins.
DOCUMENTED_ANNOTATIONS = frozenset(
    {
        "acm-pca-arn",
        "auth-idp-cognito",
        "auth-idp-oidc",
        "auth-on-unauthenticated-request",
        "auth-scope",
        "auth-session-cookie",
        "auth-session-timeout",
        "auth-type",
        "backend-protocol",
        "backend-protocol-version",
        "certificate-arn",
        "create-acm-cert",
        "customer-owned-ipv4-pool",
        "enable-frontend-nlb",
        "frontend-nlb-attributes",
        "frontend-nlb-eip-allocations",
        "frontend-nlb-healthcheck-healthy-threshold-count",
        "frontend-nlb-healthcheck-interval-seconds",
        "frontend-nlb-healthcheck-path",
        "frontend-nlb-healthcheck-port",
        "frontend-nlb-healthcheck-protocol",
        "frontend-nlb-healthcheck-success-codes",
        "frontend-nlb-healthcheck-timeout-seconds",
        "frontend-nlb-healthcheck-unhealthy-threshold-count",
        "frontend-nlb-listener-port-mapping",
        "frontend-nlb-scheme",
        "frontend-nlb-security-groups",
        "frontend-nlb-subnets",
        "frontend-nlb-tags",
        "group.name",
        "group.order",
        "healthcheck-interval-seconds",
        "healthcheck-path",
        "healthcheck-port",
        "healthcheck-protocol",
        "healthcheck-timeout-seconds",
        "healthy-threshold-count",
        "inbound-cidrs",
        "ip-address-type",
        "ipam-ipv4-pool-id",
        "jwt-validation",
        "listen-ports",
        "load-balancer-attributes",
        "load-balancer-name",
        "manage-backend-security-group-rules",
        "minimum-load-balancer-capacity",
        "multi-cluster-target-group",
        "mutual-authentication",
        "scheme",
        "security-group-prefix-lists",
        "security-groups",
        "shield-advanced-protection",
        "ssl-policy",
        "ssl-redirect",
        "subnets",
        "success-codes",
        "tags",
        "target-group-attributes",
        "target-node-labels",
        "target-type",
        "unhealthy-threshold-count",
        "use-regex-path-match",
        "waf-acl-id",
        "wafv2-acl-arn",
        "wafv2-acl-name",
    }
)
# Documented with a name part: actions.${action-name}, transforms.${transforms-name},
# conditions.${conditions-name}, listener-attributes.${Protocol}-${Port},
# target-control-port.${serviceName}.${servicePort}.
DOCUMENTED_ANNOTATION_TEMPLATES = (
    "actions.",
    "transforms.",
    "conditions.",
    "listener-attributes.",
    "target-control-port.",
)
# The External Secrets Operator's CRDs at the pinned release (see the header of each file).

CERTIFICATE = "arn:aws:acm:us-east-1:111122223333:certificate/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
# The variant deployments behind an internet-facing HTTPS load balancer routing by host.
HOST_ROUTED: dict[str, Any] = {
    "model_bucket_name": CONTEXT.bucket_name,
    "node_pools": VARIANT_POOLS,
    "deployments": VARIANT_DEPLOYMENTS,
    "endpoint": {
        "scheme": "internet-facing",
        "routing": "host",
        "host": "models.example.com",
        "certificate_arn": CERTIFICATE,
        "source_cidrs": ["203.0.113.0/24", "198.51.100.0/24"],
    },
}


@pytest.fixture(scope="session")
def host_routed() -> Rendered:
    platform = PlatformSpec.model_validate(HOST_ROUTED)
    return Rendered(
        platform=platform,
        objects=render_platform(platform, CONTEXT),
        files=render_files(platform, CONTEXT),
    )


@pytest.fixture(scope="session", params=["reference", "host_routed"])
def exposed(request: pytest.FixtureRequest) -> Rendered:
    """Each platform with an endpoint in turn."""
    result: Rendered = request.getfixturevalue(request.param)
    return result


def ingresses(rendered: Rendered) -> dict[str, dict[str, Any]]:
    return {name: one(objects, "Ingress") for name, objects in rendered.objects.items()}


def alb(ingress: dict[str, Any]) -> dict[str, str]:
    """The controller's annotations, without the prefix."""
    return {
        key.removeprefix(ALB_ANNOTATION_PREFIX): value
        for key, value in ingress["metadata"]["annotations"].items()
        if key.startswith(ALB_ANNOTATION_PREFIX)
    }


def attributes(value: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in value.split(","))


# -- valid and documented ---------------------------------------------------------------------


def test_ingresses_validate_strictly_against_kubernetes(exposed: Rendered) -> None:
    for ingress in ingresses(exposed).values():
        assert kubernetes_validate.validate(ingress, KUBERNETES_VERSION, strict=True)


def test_every_annotation_is_documented_for_the_pinned_controller(exposed: Rendered) -> None:
    for ingress in ingresses(exposed).values():
        annotations = ingress["metadata"]["annotations"]
        assert all(key.startswith(ALB_ANNOTATION_PREFIX) for key in annotations)
        for name in alb(ingress):
            documented = name in DOCUMENTED_ANNOTATIONS or name.startswith(
                DOCUMENTED_ANNOTATION_TEMPLATES
            )
            assert documented, name


@cache
def _crd_validator(name: str) -> jsonschema.Draft7Validator:
    """The strict schema of version v1 of ``external-secrets.io_<name>.yaml``."""
    crd = yaml.safe_load((CRDS / f"external-secrets.io_{name}.yaml").read_text())
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft7Validator(_strict(v1["schema"]["openAPIV3Schema"]))


def test_api_key_objects_validate_against_the_external_secrets_crds(reference: Rendered) -> None:
    documents = list(yaml.safe_load_all(reference.files[API_KEY_FILE]))
    store, external_secret = documents
    for document, crd in ((store, "secretstores"), (external_secret, "externalsecrets")):
        errors = [e.message for e in _crd_validator(crd).iter_errors(document)]
        assert errors == [], (document["kind"], errors)
    assert store["spec"]["provider"] == {
        "aws": {"region": "us-east-1", "service": "SecretsManager"}
    }
    assert "auth" not in store["spec"]["provider"]["aws"]
    (item,) = external_secret["spec"]["data"]
    assert item == {
        "secretKey": names.API_KEY_SECRET_KEY,
        "remoteRef": {"key": api_key_secret_name(reference.platform.cluster_name)},
    }
    assert external_secret["spec"]["target"]["name"] == names.API_KEY_SECRET


def test_the_crd_schemas_reject_what_they_should() -> None:
    store, external_secret = api_key_objects("eks-inference/api-key", "us-east-1")
    store["spec"]["provider"]["aws"]["service"] = "Vault"
    assert list(_crd_validator("secretstores").iter_errors(store))
    external_secret["spec"]["target"]["creationPolicy"] = "Sometimes"
    assert list(_crd_validator("externalsecrets").iter_errors(external_secret))


def test_no_api_key_objects_without_an_endpoint_requiring_them(variants: Rendered) -> None:
    assert API_KEY_FILE not in variants.files
    data = {**HOST_ROUTED, "endpoint": {"authentication": "none"}}
    assert API_KEY_FILE not in render_files(PlatformSpec.model_validate(data), CONTEXT)


# -- one load balancer -------------------------------------------------------------------------

# Settings of the load balancer, which the controller requires to agree across its group.
_LOAD_BALANCER_ANNOTATIONS = (
    "group.name",
    "scheme",
    "listen-ports",
    "load-balancer-attributes",
    "certificate-arn",
    "ssl-policy",
    "inbound-cidrs",
)


def test_one_load_balancer_serves_every_deployment(exposed: Rendered) -> None:
    found = ingresses(exposed)
    assert set(found) == {d.name for d in exposed.platform.deployments}
    shared = {
        tuple(alb(ingress).get(key) for key in _LOAD_BALANCER_ANNOTATIONS)
        for ingress in found.values()
    }
    assert len(shared) == 1
    rules = [(i["spec"]["rules"][0].get("host"), _path(i)) for i in found.values()]
    assert len(set(rules)) == len(rules)
    for ingress in found.values():
        assert ingress["spec"]["ingressClassName"] == names.ALB_INGRESS_CLASS
        assert alb(ingress)["target-type"] == "ip"


def _forwarded(ingress: dict[str, Any]) -> dict[str, Any]:
    """The one path a deployment's Ingress forwards: one forwarding rule per deployment (the
    others, ``Exact``, are answered by the load balancer itself)."""
    paths = ingress["spec"]["rules"][0]["http"]["paths"]
    (path,) = [p for p in paths if p["pathType"] == "Prefix"]
    return dict(path)


def _path(ingress: dict[str, Any]) -> str:
    return str(_forwarded(ingress)["path"])


def test_the_reference_load_balancer_is_internal_http_on_80(reference: Rendered) -> None:
    for ingress in ingresses(reference).values():
        annotations = alb(ingress)
        assert annotations["scheme"] == "internal"
        assert json.loads(annotations["listen-ports"]) == [{"HTTP": 80}]
        assert "certificate-arn" not in annotations


def test_an_internal_load_balancer_accepts_only_the_vpc_by_default(reference: Rendered) -> None:
    assert reference.platform.endpoint is not None
    assert reference.platform.endpoint.source_cidrs == ()
    for ingress in ingresses(reference).values():
        assert alb(ingress)["inbound-cidrs"] == names.VPC_CIDR == "10.0.0.0/16"


def _serving_policy_sources(objects: list[dict[str, Any]]) -> set[str]:
    """The address ranges the serving port's NetworkPolicy admits."""
    (serving,) = [
        o for o in of_kind(objects, "NetworkPolicy") if o["metadata"]["name"].endswith("-serving")
    ]
    return {
        peer["ipBlock"]["cidr"]
        for rule in serving["spec"]["ingress"]
        for peer in rule["from"]
        if "ipBlock" in peer
    }


def test_an_internal_load_balancer_in_a_vpc_of_its_own_accepts_that_vpc(
    reference_platform: PlatformSpec,
) -> None:
    """The Ingress's client networks and the policies' load-balancer source are one value: the
    render context's VPC range, not the range of the VPC the stack would create."""
    context = dataclasses.replace(CONTEXT, vpc_cidr="172.31.0.0/16")
    rendered = render_platform(reference_platform, context)
    assert rendered
    for objects in rendered.values():
        assert alb(one(objects, "Ingress"))["inbound-cidrs"] == "172.31.0.0/16"
        assert _serving_policy_sources(objects) == {"172.31.0.0/16"}


def test_listed_source_networks_are_kept_in_a_vpc_of_its_own() -> None:
    context = dataclasses.replace(CONTEXT, vpc_cidr="172.31.0.0/16")
    for objects in render_platform(PlatformSpec.model_validate(HOST_ROUTED), context).values():
        assert alb(one(objects, "Ingress"))["inbound-cidrs"] == "203.0.113.0/24,198.51.100.0/24"


def test_internet_facing_listens_on_https_only_with_tls_1_2_and_known_networks(
    host_routed: Rendered,
) -> None:
    for ingress in ingresses(host_routed).values():
        annotations = alb(ingress)
        assert annotations["scheme"] == "internet-facing"
        assert json.loads(annotations["listen-ports"]) == [{"HTTPS": 443}]
        assert annotations["certificate-arn"] == CERTIFICATE
        assert annotations["ssl-policy"] == TLS_POLICY
        assert annotations["inbound-cidrs"] == "203.0.113.0/24,198.51.100.0/24"


def test_an_internal_load_balancer_with_a_certificate_listens_on_https_only() -> None:
    data = {**HOST_ROUTED, "endpoint": {"certificate_arn": CERTIFICATE}}
    platform = PlatformSpec.model_validate(data)
    for spec in platform.deployments:
        route = platform.routes()[spec.name]
        annotations = alb(render_ingress(spec, route, CONTEXT.vpc_cidr))
        assert annotations["scheme"] == "internal"
        assert json.loads(annotations["listen-ports"]) == [{"HTTPS": 443}]
        assert annotations["ssl-policy"] == TLS_POLICY


# -- routing -----------------------------------------------------------------------------------


def test_path_routing_forwards_only_the_api_and_strips_the_prefix(reference: Rendered) -> None:
    for name, ingress in ingresses(reference).items():
        route = reference.platform.routes()[name]
        assert route.path == f"/{name}"
        assert _path(ingress) == f"/{name}/v1"
        assert "host" not in ingress["spec"]["rules"][0]
        service = _forwarded(ingress)["backend"]["service"]["name"]
        (transform,) = json.loads(alb(ingress)[f"transforms.{service}"])
        assert transform == strip_prefix_transform(f"/{name}")[0]
        (rewrite,) = transform["urlRewriteConfig"]["rewrites"]
        # ALB rewrites with PCRE; this pattern means the same in Python's re.
        rewritten = re.sub(
            rewrite["regex"], rewrite["replace"].replace("$1", r"\1"), f"/{name}/v1/models"
        )
        assert rewritten == "/v1/models"


def test_host_routing_forwards_only_the_api_without_a_rewrite(host_routed: Rendered) -> None:
    for name, ingress in ingresses(host_routed).items():
        (rule,) = ingress["spec"]["rules"]
        assert rule["host"] == f"{name}.models.example.com"
        assert _path(ingress) == "/v1"
        assert not [key for key in alb(ingress) if key.startswith("transforms.")]


def test_no_ingress_replaces_the_listeners_default_404(exposed: Rendered) -> None:
    """Requests outside every API path get the listener's default action, which the controller
    makes a fixed 404 only while no Ingress of the group sets a default backend."""
    for ingress in ingresses(exposed).values():
        assert "defaultBackend" not in ingress["spec"]
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                assert path["path"] != "/" or "host" in rule
        # The one action an Ingress may have answers its blocked paths with a fixed 404.
        actions = {key: value for key, value in alb(ingress).items() if key.startswith("actions.")}
        assert actions in (
            {},
            {f"actions.{NOT_FOUND_ACTION}": json.dumps(not_found_action(), separators=(",", ":"))},
        )
        if actions:
            assert not_found_action()["fixedResponseConfig"]["statusCode"] == "404"


# -- targets: health on the readiness route, draining as long as the pods live ---------------


def test_targets_are_checked_on_the_servers_readiness_route(exposed: Rendered) -> None:
    for spec in exposed.platform.deployments:
        ingress = one(exposed.objects[spec.name], "Ingress")
        annotations = alb(ingress)
        backend = _forwarded(ingress)["backend"]["service"]
        assert backend["port"] == {"number": 8000}
        if spec.engine == "vllm":
            deployment = one(exposed.objects[spec.name], "Deployment")
            container = deployment["spec"]["template"]["spec"]["containers"][0]
            assert annotations["healthcheck-path"] == container["readinessProbe"]["httpGet"]["path"]
            assert backend["name"] == one(exposed.objects[spec.name], "Service")["metadata"]["name"]
        else:
            assert annotations["healthcheck-path"] == SERVE_PROXY_HEALTH_PATH
            assert backend["name"] == serve_service_name(spec) == f"{spec.name}-serve-svc"
        assert annotations["success-codes"] == "200"


def test_deregistration_delay_agrees_with_the_pods_termination_grace(exposed: Rendered) -> None:
    objects = exposed.objects
    # A Ray head of a deployment that keeps replicas is left out of the serve Service, so it
    # is never a target.
    targets = [
        t
        for t in pod_templates(exposed.platform, objects)
        if t.role != "ray-head" or t.deployment.scaling.min_replicas == 0
    ]
    for template in found(targets):
        ingress = one(exposed.objects[template.deployment.name], "Ingress")
        delay = attributes(alb(ingress)["target-group-attributes"])
        grace = template.spec["terminationGracePeriodSeconds"]
        assert int(delay["deregistration_delay.timeout_seconds"]) == grace
        assert delay["load_balancing.algorithm.type"] == "least_outstanding_requests"
    vllm_grace = [
        t.spec["terminationGracePeriodSeconds"]
        for t in pod_templates(exposed.platform, objects)
        if t.role == "vllm"
    ]
    assert set(vllm_grace) == {TERMINATION_GRACE_S}


def test_a_target_is_marked_unhealthy_before_ray_serve_stops_a_draining_proxy(
    reference: Rendered,
) -> None:
    # Serve drains a node's proxy for at least 30 s (PROXY_MIN_DRAINING_PERIOD_S), answering
    # /-/healthz with 503, before the pod goes away.
    from ray.serve._private.constants import PROXY_MIN_DRAINING_PERIOD_S

    for ingress in ingresses(reference).values():
        annotations = alb(ingress)
        time_to_unhealthy = int(annotations["healthcheck-interval-seconds"]) * int(
            annotations["unhealthy-threshold-count"]
        )
        assert time_to_unhealthy < PROXY_MIN_DRAINING_PERIOD_S


# -- the idle timeout and the servers' keep-alive ---------------------------------------------


def test_the_idle_timeout_is_the_longest_any_deployment_needs(exposed: Rendered) -> None:
    expected = max(idle_timeout_seconds(d) for d in exposed.platform.deployments)
    for ingress in ingresses(exposed).values():
        lb = attributes(alb(ingress)["load-balancer-attributes"])
        assert int(lb["idle_timeout.timeout_seconds"]) == expected >= 300
        assert lb["routing.http.drop_invalid_header_fields.enabled"] == "true"


def test_servers_keep_connections_open_past_the_idle_timeout(exposed: Rendered) -> None:
    idle = max(idle_timeout_seconds(d) for d in exposed.platform.deployments)
    templates = pod_templates(exposed.platform, exposed.objects)
    for template in found(t for t in templates if t.role == "vllm"):
        keep_alive = int(template.env()["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"])
        assert keep_alive == idle + KEEP_ALIVE_MARGIN_S
    for spec in found(d for d in exposed.platform.deployments if d.engine == "rayservice"):
        service = one(exposed.objects[spec.name], "RayService")
        options = serve_config(service)["http_options"]
        assert options["keep_alive_timeout_s"] == idle + KEEP_ALIVE_MARGIN_S
        head = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]
        assert head["metadata"]["annotations"][KEEP_ALIVE_ANNOTATION] == str(
            idle + KEEP_ALIVE_MARGIN_S
        )


# -- the API key on the servers ----------------------------------------------------------------


def _secret_env(container: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in container.get("env", []) if "valueFrom" in e]


def test_vllm_reads_the_key_from_the_secret_into_its_environment_only(exposed: Rendered) -> None:
    vllm = [t for t in pod_templates(exposed.platform, exposed.objects) if t.role == "vllm"]
    assert vllm
    for template in vllm:
        args = template.server["args"]
        # vLLM reads VLLM_API_KEY itself: the key is in no process's arguments and, on 0.16,
        # not in the startup log's "non-default args" line either.
        assert "--api-key" not in args
        assert not [arg for arg in args if API_KEY_ENV in arg]
        flag = args.index("--middleware")
        assert args[flag + 1] == "api_key_auth.VLLMAPIKeyMiddleware"
        assert template.env()["PYTHONPATH"] == SHIPPED_PATH
        assert _secret_env(template.server) == [
            {
                "name": API_KEY_ENV,
                "valueFrom": {
                    "secretKeyRef": {"name": names.API_KEY_SECRET, "key": names.API_KEY_SECRET_KEY}
                },
            }
        ]


def test_ray_head_and_workers_read_the_key_and_run_the_checked_applications(
    exposed: Rendered,
) -> None:
    for spec in found(d for d in exposed.platform.deployments if d.engine == "rayservice"):
        objects = exposed.objects[spec.name]
        for template in found(pod_templates(exposed.platform, {spec.name: objects})):
            (secret_env,) = _secret_env(template.server)
            assert secret_env["valueFrom"]["secretKeyRef"]["name"] == names.API_KEY_SECRET
            assert template.env()["PYTHONPATH"] == "/opt/eks-inference/serve"
        (application,) = serve_config(one(objects, "RayService"))["applications"]
        assert application["args"]["api_key_env"] == API_KEY_ENV
        builder = "build_app" if spec.on_neuron else "build_ray_llm_app"
        assert application["import_path"] == f"eks_inference_serve.neuron.app:{builder}"
        app_maps = [m for m in of_kind(objects, "ConfigMap") if "neuron.app.py" in m["data"]]
        assert len(app_maps) == 1
        assert "api_key_auth.py" in app_maps[0]["data"]


def test_manifests_refer_to_the_key_and_never_hold_it(exposed: Rendered) -> None:
    text = "\n".join(exposed.files.values())
    assert "secretKeyRef" in text
    # No container argument names the key (the shipped sources in ConfigMaps may mention it).
    assert not re.search(r"^\s*- '?--api-key'?$", text, re.MULTILINE)
    assert "$(VLLM_API_KEY)" not in text


def test_servers_not_exposed_need_no_key(variants: Rendered) -> None:
    for template in found(pod_templates(variants.platform, variants.objects)):
        assert not _secret_env(template.server)
        assert "--middleware" not in template.server.get("args", [])
    assert not [o for o in variants.all_objects() if o["kind"] == "Ingress"]


# -- what the charts ask of the platform -------------------------------------------------------


def test_needs_name_the_ingress_class_and_the_secret(reference_platform: PlatformSpec) -> None:
    for spec in reference_platform.deployments:
        route = reference_platform.route(spec)
        assert route is not None
        rendered = deployment_charts(spec, reference_platform.placement(spec), CONTEXT, route)
        serving = rendered.charts
        (endpoint,) = endpoint_charts(rendered)
        assert (endpoint.role, endpoint.chart_id) == (ENDPOINT_ROLE, f"{spec.name}-endpoint")
        assert endpoint.needs.ingress_classes == (names.ALB_INGRESS_CLASS,)
        assert endpoint.needs.namespaces == (names.INFERENCE_NAMESPACE,)
        assert needs_of(serving).secrets == (API_KEY_SECRET_NEED,)
        assert endpoint.after == (serving[-1].chart_id,)
    api_key = api_key_chart(secret_id="eks-inference/api-key", region="us-east-1")
    assert set(api_key.needs.custom_resources) == {
        "secretstores.external-secrets.io",
        "externalsecrets.external-secrets.io",
    }
    assert of_kind(api_key.to_json(), "ExternalSecret")


def test_no_endpoint_chart_without_a_route(reference_platform: PlatformSpec) -> None:
    spec = reference_platform.deployments[0]
    rendered = deployment_charts(spec, reference_platform.placement(spec), CONTEXT)
    assert endpoint_charts(rendered) == []


def test_the_ingress_takes_the_render_context_of_the_deployment(
    reference_platform: PlatformSpec,
) -> None:
    """The Ingress admits clients from the VPC range the deployment's policies were given."""
    spec = reference_platform.deployments[0]
    route = reference_platform.route(spec)
    context = replace(CONTEXT, vpc_cidr="10.42.0.0/16")
    rendered = deployment_charts(spec, reference_platform.placement(spec), context, route)
    (endpoint,) = endpoint_charts(rendered)
    (ingress,) = of_kind(endpoint.to_json(), "Ingress")
    assert ingress["metadata"]["annotations"][f"{ALB_ANNOTATION_PREFIX}inbound-cidrs"] == (
        "10.42.0.0/16"
    )


def _secret_refs(value: Any) -> set[str]:
    """Names of the Secrets a rendered object reads with ``secretKeyRef``."""
    if isinstance(value, dict):
        found = {value["secretKeyRef"]["name"]} if "secretKeyRef" in value else set()
        return found.union(*(_secret_refs(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_secret_refs(v) for v in value))
    return set()


def test_each_charts_record_matches_what_it_renders(exposed: Rendered) -> None:
    """Every Secret read and IngressClass named is recorded, and nothing else is."""
    platform = exposed.platform
    for spec in platform.deployments:
        route = platform.route(spec)
        rendered = deployment_charts(spec, platform.placement(spec), CONTEXT, route)
        charts = [*rendered.charts, *endpoint_charts(rendered)]
        for chart in charts:
            objects = chart.to_json()
            assert {s.name for s in chart.needs.secrets} == _secret_refs(objects), chart.chart_id
            classes = {o["spec"]["ingressClassName"] for o in of_kind(objects, "Ingress")}
            assert set(chart.needs.ingress_classes) == classes, chart.chart_id
