"""The endpoint picker in front of a deployment's servers (``routing``): InferencePool, picker
and proxy, rendered as llm-d-router's standalone chart lays them out, without a Gateway.

The Gateway API Inference Extension (v1.6.0) routes through a Gateway that speaks Envoy's
external processing (ext_proc); the AWS Load Balancer Controller does not, so the load
balancer stays the entry and forwards a routed deployment's paths to a proxy of its own, the
shape of llm-d-router v0.10.0's ``llm-d-router-standalone`` chart with ``proxy.mode: service``
(an Envoy Deployment and Service that reach the picker over its Service). The objects are
rendered here rather than by installing that chart: the release publishes the chart under
version 0.0.0 with its image tags rewritten at release time, the chart's defaults (8 CPUs for
the picker, 4 for each proxy) do not fit a system node, and its Envoy preset trusts a routing
header clients can set. What is rendered, and why:

- **InferencePool** ``<name>`` (``inference.networking.k8s.io/v1``): the deployment's serving
  pods (the engine's selector) on the OpenAI port, over HTTP, with the picker's Service as its
  ``endpointPickerRef`` and the spec's failure mode.
- **The picker** ``<name>-picker`` (the EPP, :data:`~eks_inference.versions.ENDPOINT_PICKER_IMAGE`):
  a ServiceAccount, a Role reading pods and InferencePools in the inference namespace and
  nothing else (the pinned chart's Role less the InferenceObjective and InferenceModelRewrite
  rules: the EPP watches those only when their CRDs exist, which the platform does not
  install), its RoleBinding, a ConfigMap with the ``EndpointPickerConfig`` of the spec's
  scorers and weights, one replica (the chart's default: the prefix scorer's state is in
  memory, and a second replica would only be a passive standby) rolled with ``Recreate``, and a
  Service of its ext_proc port (9002, HTTP/2) and metrics (9090). Its metrics are served
  without the token review (``--metrics-endpoint-auth=false``, so it needs no cluster-wide
  role): the NetworkPolicies admit only Prometheus to that port.
- **The proxy** ``<name>-proxy`` (Envoy, :data:`~eks_inference.versions.ROUTING_PROXY_IMAGE`):
  two replicas behind a Service on 8081, the load balancer's backend, configured from the
  chart's Envoy preset with three changes. Clients' ``x-gateway-destination-endpoint``
  headers are removed before anything reads them (Envoy's original-destination cluster trusts
  that header, so a client could otherwise name any address); a request the picker chose an
  endpoint for goes there, and one it did not (the picker down, under ``fail_open``) goes to
  the deployment's own Service, round robin, counted on the ``round_robin_fallback`` cluster
  (``fail_closed``: refused with 503); the load balancer's health check asks Envoy's own
  readiness (``/ready`` on 19001), so the targets stay healthy while the picker is down.

The API key is still checked where it always is, by every model server: the proxy forwards
the request, ``Authorization`` included, to a server's port 8000 and nowhere else.
"""

from __future__ import annotations

import hashlib
import json

from eks_inference import names
from eks_inference.charts import pod
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import (
    api_object,
    cluster_ip_service,
    metadata,
    object_labels,
    selector_labels,
)
from eks_inference.charts.model_server import OPENAI_PORT
from eks_inference.charts.network_rules import NAMESPACE_NAME_LABEL, policy, ports, rule
from eks_inference.charts.pod import Json
from eks_inference.charts.routing_proxy import (
    EXT_PROC_PORT,
    PROXY_CONFIG_DIR,
    PROXY_CONFIG_FILE,
    PROXY_METRICS_PATH,
    PROXY_PORT,
    PROXY_READY_PATH,
    PROXY_READY_PORT,
    PROXY_REPLICAS,
    proxy_config,
)
from eks_inference.charts.serving import Backend, MetricsTarget, serving_engine
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import Placement
from eks_inference.specification.routing import Routing
from eks_inference.specification.routing_rules import picks_endpoints
from eks_inference.versions import ENDPOINT_PICKER_IMAGE, ROUTING_PROXY_IMAGE

ROLE = "router"
PICKER = names.PICKER_ROLE
PROXY = names.PROXY_ROLE
INFERENCEPOOL_API_VERSION = "inference.networking.k8s.io/v1"
ENDPOINT_PICKER_CONFIG_API_VERSION = "llm-d.ai/v1alpha1"
# The EPP's health and metrics ports at v0.10.0 (its ext_proc port is the proxy's to call).
PICKER_HEALTH_PORT = 9003
PICKER_METRICS_PORT = 9090
CONFIG_FILE = "routing.yaml"
CONFIG_DIR = "/config"
# The picker's and the proxy's images both run as the distroless ``nonroot`` user.
NONROOT_UID = 65532
# The scorers' plugin types at v0.10.0, by the name the spec gives them.
SCORER_PLUGINS = {
    "prefix_cache": "prefix-cache-scorer",
    "kv_cache_utilization": "kv-cache-utilization-scorer",
    "queue": "queue-scorer",
}
# A single replica's picker (the chart's liveness and readiness service when it runs one).
_HEALTH_SERVICE = "inference-extension"
# What the chart gives the picker to drain: the longest grace of the pods it routes to.
_PICKER_GRACE_S = 130
_NONROOT_SECURITY: Json = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": NONROOT_UID,
    "runAsGroup": NONROOT_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
# Sized for a few replicas behind one picker; the chart's 8 CPUs serve large pools. Memory is
# limited, CPU only requested, as the chart does: both burst with the request rate, and a
# throttled picker would delay every request's first byte.
# What the proxy is given to exit after its drain.
_PROXY_EXIT_S = 10
_PICKER_MEMORY, _PICKER_CPU = {"memory": "1Gi"}, {"cpu": "1"}
_PROXY_MEMORY, _PROXY_CPU = {"memory": "512Mi"}, {"cpu": "500m"}


def pool_name(spec: ModelDeploymentSpec) -> str:
    """The deployment's InferencePool: named after it."""
    return spec.name


def backend(spec: ModelDeploymentSpec) -> Backend:
    """Where the load balancer sends ``spec``'s requests: the proxy when a picker routes
    them, health-checked on Envoy's own readiness; otherwise the engine's backend."""
    engine_backend = serving_engine(spec).backend(spec)
    if not picks_endpoints(spec):
        return engine_backend
    return Backend(
        names.proxy_service_name(spec.name),
        PROXY_READY_PATH,
        engine_backend.deregistration_delay_seconds,
        port=PROXY_PORT,
        health_port=PROXY_READY_PORT,
    )


def picker_config(routing: Routing) -> str:
    """The picker's ``EndpointPickerConfig`` (YAML is JSON): the spec's scorers with their
    weights in the default profile, and the metrics source the load scorers read."""
    weights = routing.scorer_weights()
    plugins: list[Json] = [{"type": SCORER_PLUGINS[scorer]} for scorer in weights]
    plugins += [
        {
            "type": "metrics-data-source",
            "parameters": {"scheme": "http", "path": "/metrics", "insecureSkipVerify": True},
        },
        {"type": "core-metrics-extractor"},
    ]
    config = {
        "apiVersion": ENDPOINT_PICKER_CONFIG_API_VERSION,
        "kind": "EndpointPickerConfig",
        "plugins": plugins,
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [
                    {"pluginRef": SCORER_PLUGINS[scorer], "weight": weight}
                    for scorer, weight in weights.items()
                ],
            }
        ],
    }
    return json.dumps(config, indent=2) + "\n"


def picker_args(spec: ModelDeploymentSpec) -> list[str]:
    """The EPP's flags (each one of ``pkg/epp/server/options.go`` at v0.10.0)."""
    return [
        "--pool-name",
        pool_name(spec),
        "--pool-namespace",
        INFERENCE_NAMESPACE,
        "--pool-group",
        INFERENCEPOOL_API_VERSION.split("/")[0],
        "--config-file",
        f"{CONFIG_DIR}/{CONFIG_FILE}",
        "--grpc-health-port",
        str(PICKER_HEALTH_PORT),
        "--metrics-port",
        str(PICKER_METRICS_PORT),
        "--tracing=false",
        "--metrics-endpoint-auth=false",
    ]


def inference_pool(spec: ModelDeploymentSpec, labels: dict[str, str]) -> Json:
    """The InferencePool of ``spec``'s serving pods, picked by its picker's Service."""
    routing = spec.routing
    assert routing is not None
    engine = serving_engine(spec)
    return api_object(
        INFERENCEPOOL_API_VERSION,
        "InferencePool",
        metadata(pool_name(spec), labels),
        {
            "spec": {
                "targetPorts": [{"number": OPENAI_PORT}],
                "appProtocol": "http",
                "selector": {"matchLabels": selector_labels(spec, engine.component)},
                "endpointPickerRef": {
                    "kind": "Service",
                    "name": names.picker_service_name(spec.name),
                    "port": {"number": EXT_PROC_PORT},
                    "failureMode": "FailOpen"
                    if routing.failure_mode == "fail_open"
                    else "FailClose",
                },
            }
        },
    )


def _config_map(name: str, labels: dict[str, str], key: str, text: str) -> Json:
    return api_object("v1", "ConfigMap", metadata(name, labels), {"data": {key: text}})


def _deployment(
    name: str,
    labels: dict[str, str],
    selector: dict[str, str],
    replicas: int,
    pod_spec: Json,
    *,
    strategy: Json,
    annotations: dict[str, str],
) -> Json:
    return api_object(
        "apps/v1",
        "Deployment",
        metadata(name, labels),
        {
            "spec": {
                "replicas": replicas,
                "strategy": strategy,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": labels, "annotations": annotations},
                    "spec": pod_spec,
                },
            }
        },
    )


def _grpc_probe(period_seconds: int, initial_delay_seconds: int = 0) -> Json:
    probe: Json = {
        "grpc": {"port": PICKER_HEALTH_PORT, "service": _HEALTH_SERVICE},
        "periodSeconds": period_seconds,
    }
    if initial_delay_seconds:
        probe["initialDelaySeconds"] = initial_delay_seconds
    return probe


def picker_objects(spec: ModelDeploymentSpec, placement: Placement) -> list[Json]:
    """The picker's ServiceAccount, Role, RoleBinding, ConfigMap, Deployment and Service."""
    routing = spec.routing
    assert routing is not None
    name = names.picker_service_name(spec.name)
    labels = object_labels(spec, PICKER)
    selector = selector_labels(spec, PICKER)
    account = api_object("v1", "ServiceAccount", metadata(name, labels), {})
    role = api_object(
        "rbac.authorization.k8s.io/v1",
        "Role",
        metadata(name, labels),
        {
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]},
                {
                    "apiGroups": [INFERENCEPOOL_API_VERSION.split("/")[0]],
                    "resources": ["inferencepools"],
                    "verbs": ["get", "watch", "list"],
                },
            ]
        },
    )
    binding = api_object(
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        metadata(name, labels),
        {
            "subjects": [
                {"kind": "ServiceAccount", "name": name, "namespace": INFERENCE_NAMESPACE}
            ],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        },
    )
    text = picker_config(routing)
    config = _config_map(name, labels, CONFIG_FILE, text)
    container = {
        "name": "epp",
        "image": ENDPOINT_PICKER_IMAGE,
        "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
        "args": picker_args(spec),
        "env": [
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [
            {"name": "grpc", "containerPort": EXT_PROC_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": PICKER_HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": PICKER_METRICS_PORT, "protocol": "TCP"},
        ],
        "livenessProbe": _grpc_probe(10, initial_delay_seconds=5),
        "readinessProbe": _grpc_probe(2),
        "resources": pod.resources(_PICKER_MEMORY, requested_only=_PICKER_CPU),
        "securityContext": _NONROOT_SECURITY,
        "volumeMounts": [pod.mount("config", CONFIG_DIR, read_only=True)],
    }
    pod_spec: Json = {
        "serviceAccountName": name,
        # The picker watches pods and its InferencePool through the API server.
        "automountServiceAccountToken": True,
        "terminationGracePeriodSeconds": _PICKER_GRACE_S,
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": name}}],
        **pod.placement(placement.head),
    }
    deployment = _deployment(
        name,
        labels,
        selector,
        1,
        pod_spec,
        # The chart's: the old picker goes before the new one starts, so one holds the state.
        strategy={"type": "Recreate"},
        annotations={"checksum/config": _digest(text)},
    )
    service = cluster_ip_service(
        name,
        labels,
        selector,
        [
            {
                "name": "grpc-ext-proc",
                "port": EXT_PROC_PORT,
                "targetPort": EXT_PROC_PORT,
                "protocol": "TCP",
                "appProtocol": "kubernetes.io/h2c",
            },
            {
                "name": "http-metrics",
                "port": PICKER_METRICS_PORT,
                "targetPort": PICKER_METRICS_PORT,
                "protocol": "TCP",
            },
        ],
    )
    return [account, role, binding, config, deployment, service]


def _digest(text: str) -> str:
    """The config's digest, on the pod template: a new config rolls the pods."""
    return hashlib.sha256(text.encode()).hexdigest()


def proxy_objects(spec: ModelDeploymentSpec, placement: Placement) -> list[Json]:
    """The proxy's ConfigMap, Deployment and Service (the load balancer's backend)."""
    name = names.proxy_service_name(spec.name)
    labels = object_labels(spec, PROXY)
    selector = selector_labels(spec, PROXY)
    text = proxy_config(spec)
    drain = backend(spec).deregistration_delay_seconds
    container = {
        "name": "envoy",
        "image": ROUTING_PROXY_IMAGE,
        "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
        "command": ["envoy"],
        "args": [
            "--service-node",
            name,
            "--log-level",
            "warn",
            "--cpuset-threads",
            "--drain-strategy",
            "immediate",
            "--drain-time-s",
            "60",
            "-c",
            f"{PROXY_CONFIG_DIR}/{PROXY_CONFIG_FILE}",
        ],
        "ports": [
            {"name": "http", "containerPort": PROXY_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": PROXY_READY_PORT, "protocol": "TCP"},
        ],
        # Envoy stops at once on SIGTERM: it serves on while the load balancer drains the
        # target (as long as it drains a server's), so no request in flight is cut short.
        "lifecycle": {"preStop": {"sleep": {"seconds": drain}}},
        "readinessProbe": pod.http_probe(
            PROXY_READY_PATH,
            port=PROXY_READY_PORT,
            period_seconds=5,
            timeout_seconds=1,
            failure_threshold=1,
        ),
        "resources": pod.resources(_PROXY_MEMORY, requested_only=_PROXY_CPU),
        "securityContext": _NONROOT_SECURITY,
        "volumeMounts": [
            pod.mount("config", PROXY_CONFIG_DIR, read_only=True),
            pod.mount("tmp", "/tmp"),
        ],
    }
    pod_spec: Json = {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": drain + _PROXY_EXIT_S,
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": name}},
            pod.empty_dir("tmp", "64Mi"),
        ],
        **pod.placement(placement.head),
    }
    deployment = _deployment(
        name,
        labels,
        selector,
        PROXY_REPLICAS,
        pod_spec,
        strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}},
        annotations={"checksum/config": _digest(text)},
    )
    service = cluster_ip_service(
        name,
        labels,
        selector,
        [
            {
                "name": "http",
                "port": PROXY_PORT,
                "targetPort": PROXY_PORT,
                "protocol": "TCP",
            }
        ],
    )
    return [_config_map(name, labels, PROXY_CONFIG_FILE, text), deployment, service]


def routing_metrics_targets(spec: ModelDeploymentSpec) -> list[tuple[MetricsTarget, str]]:
    """What Prometheus scrapes of ``spec``'s routing, with the path: the picker's ``metrics``
    port at ``/metrics``, the proxy's at Envoy's ``/stats/prometheus``."""
    if not picks_endpoints(spec):
        return []
    return [
        (
            MetricsTarget(PICKER, {"matchLabels": selector_labels(spec, PICKER)}, "metrics"),
            "/metrics",
        ),
        (
            MetricsTarget(PROXY, {"matchLabels": selector_labels(spec, PROXY)}, "metrics"),
            PROXY_METRICS_PATH,
        ),
    ]


def router_objects(spec: ModelDeploymentSpec, placement: Placement) -> list[Json]:
    """Every object of ``spec``'s routing, in apply order; none without a picker."""
    if not picks_endpoints(spec):
        return []
    return [
        *picker_objects(spec, placement),
        inference_pool(spec, object_labels(spec, ROLE)),
        *proxy_objects(spec, placement),
    ]


def router_needs(spec: ModelDeploymentSpec, placement: Placement) -> PlatformNeeds:
    """What the routing objects need: the InferencePool CRD and room on the system pool."""
    objects = router_objects(spec, placement)
    pods = tuple(
        pod.scheduling_need(
            (f"Deployment/{o['metadata']['name']}", "spec", "template"),
            placement.head,
            o["spec"]["template"]["spec"],
        )
        for o in objects
        if o["kind"] == "Deployment"
    )
    return PlatformNeeds(
        namespaces=(INFERENCE_NAMESPACE,),
        custom_resources=(names.INFERENCEPOOL_CRD,),
        pods=pods,
    )


def network_policies(
    spec: ModelDeploymentSpec,
    labels: dict[str, str],
    *,
    vpc_cidr: str,
    dns: Json,
    prometheus: Json,
) -> list[Json]:
    """The flows of ``spec``'s routing, beyond the deployment's own policies (``dns`` is the
    egress rule to the cluster's DNS, ``prometheus`` the peer of its Prometheus).

    - ``-proxy``: the proxy accepts the load balancer (any address of the VPC, as the
      servers do) on 8081 and on 19001 (its health checks), and Prometheus on 19001; it
      reaches DNS, the picker on 9002 and the serving pods on 8000, nothing else.
    - ``-picker``: the picker accepts the proxy on 9002 and Prometheus on 9090; it reaches
      the serving pods on 8000 (their metrics) beside the deployment's common egress (DNS,
      and HTTPS for the API server).

    The serving pods already accept port 8000 from every pod of the cluster (``-serving``).
    """
    if not picks_endpoints(spec):
        return []
    engine = serving_engine(spec)
    servers = {"matchLabels": selector_labels(spec, engine.component)}
    proxy = {"matchLabels": selector_labels(spec, PROXY)}
    picker = {"matchLabels": selector_labels(spec, PICKER)}
    same_namespace = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: INFERENCE_NAMESPACE}}
    }

    def local(pods: Json) -> Json:
        return {**same_namespace, "podSelector": pods}

    return [
        policy(
            f"{spec.name}-{PROXY}",
            labels,
            proxy,
            ingress=[
                rule(
                    "from",
                    [{"ipBlock": {"cidr": vpc_cidr}}],
                    ports(PROXY_PORT, PROXY_READY_PORT),
                ),
                rule("from", [prometheus], ports(PROXY_READY_PORT)),
            ],
            egress=[
                dns,
                rule("to", [local(picker)], ports(EXT_PROC_PORT)),
                rule("to", [local(servers)], ports(OPENAI_PORT)),
            ],
        ),
        policy(
            f"{spec.name}-{PICKER}",
            labels,
            picker,
            ingress=[
                rule("from", [local(proxy)], ports(EXT_PROC_PORT)),
                rule("from", [prometheus], ports(PICKER_METRICS_PORT)),
            ],
            egress=[rule("to", [local(servers)], ports(OPENAI_PORT))],
        ),
    ]
