"""The objects of a Dynamo deployment: its DynamoGraphDeployment, and the API-key proxy.

The graph (``nvidia.com/v1beta1`` ``DynamoGraphDeployment`` ``<deployment>``) has the shape of
the graphs Dynamo 1.6.1 generates itself (``dynamo/profiler/templates/dgd/vllm/{agg,disagg}.yaml``
of its wheel): ``spec.components[]``, each a ``name``, a ``type``, ``replicas`` and a
``podTemplate`` whose container ``main`` the operator completes (its discovery environment,
NATS address, ServiceAccount):

- ``frontend`` (type ``frontend``, one replica on the system pool): ``python3 -m
  dynamo.frontend`` with the router (``--router-mode kv`` or ``round-robin``) and the KV block
  size the workers use, serving the OpenAI API on port 8000 (``/health``, ``/live``);
- aggregated: ``worker`` (type ``worker``), ``scaling.min_replicas`` vLLM workers at the
  deployment's tensor-parallel degree; disaggregated: ``prefill`` and ``decode`` (types of the
  same names), each group at its own replicas and degree, ``--disaggregation-mode`` set and
  the KV cache handed over by vLLM's ``NixlConnector``.

Each worker's pod is the pod standalone vLLM runs (:func:`eks_inference.engines.vllm.engine.
server_pod`, at the group's tensor-parallel degree: resources, security, scratch volumes and
the memory-backed ``/dev/shm``, the Mountpoint weights, placement and tolerations), with the
Dynamo runtime image and ``python3 -m dynamo.vllm`` and vLLM's engine arguments
(:func:`worker_args`), probed on the worker's system port (``/health``, ``/live``), where it
also serves its metrics. The operator's own ``/dev/shm`` is turned off
(``sharedMemorySize: "0"``): the pod mounts one sized for its memory. The pods keep the
operator's ServiceAccount, which carries the RBAC of Dynamo's Kubernetes discovery.

The Deployment ``<deployment>-api-key`` runs the project's proxy
(:mod:`eks_inference.serve.api_key_proxy`) in the runtime image on the system pool: the
Service ``<deployment>`` (the load balancer's backend) selects it, and it forwards to the
Service ``<deployment>-dynamo-frontend`` only what carries the platform's key (a platform
without one: everything), so the frontend is reached through it alone.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from eks_inference import names
from eks_inference.charts import pod, shipped
from eks_inference.charts.api_key import API_KEY_SECRET_NEED, requires_api_key
from eks_inference.charts.metadata import (
    api_object,
    cluster_ip_service,
    metadata,
    object_labels,
    selector_labels,
)
from eks_inference.charts.model_server import HTTP_PORT_NAME, OPENAI_PORT, keep_alive_seconds
from eks_inference.charts.pod import Json
from eks_inference.charts.vllm_server import vllm_server_args
from eks_inference.engines.dynamo.options import ROUTER_MODES, dynamo_options, graph_of
from eks_inference.engines.dynamo.rules import crosses_nodes
from eks_inference.engines.vllm import engine as vllm
from eks_inference.serve.api_key_auth import API_KEY_ENV, HEALTH_PATH
from eks_inference.specification.kv_serving import WorkerGroup
from eks_inference.versions import DYNAMO_EFA_RUNTIME_IMAGE, DYNAMO_RUNTIME_IMAGE

if TYPE_CHECKING:
    from eks_inference.charts.context import RenderContext
    from eks_inference.charts.serving import WeightsVolume
    from eks_inference.specification.deployment import ModelDeploymentSpec
    from eks_inference.specification.platform import Placement
    from eks_inference.specification.routes import Route

# What the operator does with a graph, read from its source (ai-dynamo/dynamo, deploy/operator/,
# at commit 2a6da14c8361 of 2026-08-21, the tree of the 1.5.0 release that
# versions.DYNAMO_CRD_SCHEMA_VERSION names; the v1.6.1 tag could not be brought here), cited
# where it is relied on as <file>:<line> under deploy/operator/internal/.
DGD_API_VERSION = "nvidia.com/v1beta1"
DGD_KIND = "DynamoGraphDeployment"
# The scaling adapter of a component that sets `scalingAdapter: {}` (api/v1beta1/common.go:189,
# a marker: the operator creates the adapter, which then owns the component's replicas, and
# deletes it when the field goes: controller/dgd_scaling_adapters_reconciler.go:72). Its scale
# subresource is spec.replicas / status.replicas / status.selector (the CRD, both versions;
# v1beta1 is stored).
ADAPTER_API_VERSION = "nvidia.com/v1beta1"
ADAPTER_KIND = "DynamoGraphDeploymentScalingAdapter"
# The operator completes the container of this name (its templates' `main`).
MAIN_CONTAINER = "main"
FRONTEND = "frontend"
AGGREGATED_WORKER = "worker"
PREFILL = "prefill"
DECODE = "decode"
# The chart's role and the graph object's component label; then the pods': the frontend, the
# workers, the proxy.
GRAPH_COMPONENT = "dynamo"
FRONTEND_COMPONENT = "dynamo-frontend"
WORKER_COMPONENT = "dynamo-worker"
PROXY_COMPONENT = "dynamo-api-key"
# The worker's system status server (DYN_SYSTEM_PORT): /health, /live and /metrics.
SYSTEM_PORT = 9090
SYSTEM_PORT_NAME = "system"
LIVE_PATH = "/live"
FRONTEND_COMMAND = ("python3",)
FRONTEND_MODULE_ARGS = ("-m", "dynamo.frontend")
WORKER_COMMAND = ("python3", "-m", "dynamo.vllm")
# The frontend: routing and tokenization for the whole graph, no GPU.
FRONTEND_CPU = "4"
FRONTEND_MEMORY_MIB = 8 * 1024
# The proxy: a uvicorn process forwarding streams; two replicas, so a node drain or a restart
# never leaves the deployment unreachable.
PROXY_REPLICAS = 2
PROXY_CPU = "1"
PROXY_MEMORY_MIB = 1024
PROXY_MODULE = "api_key_proxy"
PROXY_COMMAND = ("python3", "-m", f"{shipped.SHIPPED_PACKAGE}.{PROXY_MODULE}")
PROXY_SHIPPED_MODULES = ("__init__", shipped.API_KEY_AUTH_MODULE, PROXY_MODULE)
# vLLM's NIXL connector both ways (the release's disaggregated router example): a prefill
# worker produces the KV cache, a decode worker pulls it.
NIXL_TRANSFER_CONFIG: dict[str, object] = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
# Across nodes NIXL must use its libfabric backend: its default, UCX, lands on a transport of
# TCP speed between pods on EFA (Dynamo's EFA guide, "Configure NIXL Backend", the vLLM row).
# vLLM's NixlConnector reads the list from the connector's extra config, UCX when it is absent
# (`get_from_extra_config("backends", ["UCX"])` in its worker, read at a stored commit of
# vllm-project/vllm: *unverified* at 0.31.0, the runtime's vLLM).
NIXL_EFA_BACKENDS = {"kv_connector_extra_config": {"backends": ["LIBFABRIC"]}}
# With KV routing the workers publish the blocks they hold, which the frontend's router
# indexes (the release's disaggregated router example; ZMQ on the worker's pod, port 20080).
KV_EVENTS_PORT = 20080
KV_EVENTS_CONFIG = {
    "publisher": "zmq",
    "topic": "kv-events",
    "endpoint": f"tcp://*:{KV_EVENTS_PORT}",
    "enable_kv_cache_events": True,
}
_PROBE_PERIOD_S = 10
_PROBE_TIMEOUT_S = 5
# Not exposed, the proxy keeps in-cluster clients' idle connections as uvicorn's default does.
_IN_CLUSTER_KEEP_ALIVE_S = 5


def adapter_name(spec: ModelDeploymentSpec, component: str) -> str:
    """The scaling adapter the operator creates for ``component`` of ``spec``'s graph:
    ``<graph>-<component, lowercased>`` (controller/dgd_scaling_adapters_reconciler.go:198,
    ``generateAdapterName``)."""
    return f"{spec.name}-{component.lower()}"


def operator_frontend_service(spec: ModelDeploymentSpec) -> str:
    """The Service the operator makes for the frontend: its component deployment's name,
    ``<graph>-<component, lowercased>`` (dynamo/graph.go:745, ``GetDCDResourceName``, no
    suffix for a component that is not a worker), dots made dashes (graph.go:756)."""
    return f"{spec.name}-{FRONTEND}"


def operator_worker_service_pattern(spec: ModelDeploymentSpec) -> str:
    """The Services the operator makes for the worker groups, one per worker generation, as a
    regular expression: ``<graph>-<component>-<worker hash>`` (graph.go:745 with the
    generation's hash; dynamo/hash.go:86: the first 8 hex digits of a SHA-256), made with
    Kubernetes discovery, which the platform's operator uses
    (controller/dynamocomponentdeployment_renderer.go:322)."""
    groups = "|".join(name for name, _ in worker_groups(spec))
    return re.escape(spec.name) + rf"-({groups})-[0-9a-f]{{8}}"


def frontend_service_name(spec: ModelDeploymentSpec) -> str:
    """The Service of the frontend's pods the proxy forwards to."""
    return f"{spec.name}-dynamo-frontend"


def proxy_name(spec: ModelDeploymentSpec) -> str:
    """The proxy's Deployment: ``<deployment>-api-key``."""
    return f"{spec.name}-api-key"


def worker_groups(spec: ModelDeploymentSpec) -> tuple[tuple[str, WorkerGroup], ...]:
    """The graph's worker components: ``worker`` aggregated, else ``prefill`` and ``decode``."""
    split = graph_of(spec)
    if split is None:
        return (
            (
                AGGREGATED_WORKER,
                WorkerGroup(
                    replicas=spec.scaling.min_replicas,
                    tensor_parallel_size=spec.tensor_parallel_size,
                ),
            ),
        )
    if spec.scaling.autoscale:
        # Autoscaled, each group starts at min_replicas, the adapter's first count (the
        # rules refuse a group's own replicas then).
        return tuple(
            (
                name,
                WorkerGroup(
                    replicas=spec.scaling.min_replicas,
                    tensor_parallel_size=group.tensor_parallel_size,
                ),
            )
            for name, group in ((PREFILL, split.prefill), (DECODE, split.decode))
        )
    return ((PREFILL, split.prefill), (DECODE, split.decode))


def at_degree(spec: ModelDeploymentSpec, group: WorkerGroup) -> ModelDeploymentSpec:
    """``spec`` as one worker of ``group`` serves it: at the group's tensor-parallel degree,
    so its arguments, resources and share of a node are sized as for a deployment of that
    degree."""
    return spec.model_copy(update={"tensor_parallel_size": group.tensor_parallel_size})


def frontend_args(spec: ModelDeploymentSpec) -> list[str]:
    """Arguments of ``python3`` running the frontend (the release's ``-m dynamo.frontend``)."""
    options = dynamo_options(spec)
    args = [
        *FRONTEND_MODULE_ARGS,
        "--http-port",
        str(OPENAI_PORT),
        "--router-mode",
        ROUTER_MODES[options.router],
        "--kv-cache-block-size",
        str(spec.limits.block_size),
    ]
    if options.router == "kv":
        args.append("--router-kv-events")
    return args


def worker_args(spec: ModelDeploymentSpec, component: str, *, bucket_name: str) -> list[str]:
    """Arguments of ``python3 -m dynamo.vllm`` for a worker of ``component`` of ``spec`` (at
    its group's degree): vLLM's engine arguments as standalone vLLM gets them, the model as
    ``--model`` (the worker takes no positional one) and without the HTTP server's flags
    (the worker serves no HTTP); then Dynamo's disaggregation mode and, disaggregated, the
    NIXL connector; with KV routing, the KV events the router indexes (not from decode
    workers)."""
    served = vllm_server_args(spec, bucket_name=bucket_name)
    model, rest = served[0], served[1:]
    engine: list[str] = []
    i = 0
    while i < len(rest):
        if rest[i] in ("--host", "--port"):
            i += 2
            continue
        engine.append(rest[i])
        i += 1
    args = ["--model", model, *engine]
    if component in (PREFILL, DECODE):
        transfer = {**NIXL_TRANSFER_CONFIG, **(NIXL_EFA_BACKENDS if crosses_nodes(spec) else {})}
        args += [
            "--disaggregation-mode",
            component,
            "--kv-transfer-config",
            json.dumps(transfer, separators=(",", ":")),
        ]
    if dynamo_options(spec).router == "kv" and component != DECODE:
        # The router picks a prefill (or aggregated) worker by the prefix it holds; a decode
        # worker is picked by load and publishes nothing (the release's example).
        args += ["--kv-events-config", json.dumps(KV_EVENTS_CONFIG, separators=(",", ":"))]
    return args


def _system_probe(path: str, failures: int, period_seconds: int) -> Json:
    return _probe(path, SYSTEM_PORT, failures, period_seconds)


def _http_probe(path: str, period_seconds: int = _PROBE_PERIOD_S) -> Json:
    """A probe of the OpenAI port (the frontend's, the proxy's), failing after three misses."""
    return _probe(path, OPENAI_PORT, 3, period_seconds)


def _probe(path: str, port: int, failures: int, period_seconds: int) -> Json:
    return pod.http_probe(
        path,
        port=port,
        period_seconds=period_seconds,
        timeout_seconds=_PROBE_TIMEOUT_S,
        failure_threshold=failures,
    )


def worker_pod(
    spec: ModelDeploymentSpec,
    component: str,
    placement: Placement,
    context: RenderContext,
    weights: WeightsVolume | None,
) -> Json:
    """The pod of one worker of ``component`` (``spec`` at its group's degree). Across nodes
    the pod builder gives it its share of the node's EFA interfaces and libfabric's settings
    (:func:`eks_inference.charts.fabric.fabric`), and it runs the EFA build of the runtime."""
    across = crosses_nodes(spec)
    served = vllm.server_pod(spec, placement, context, "", weights, None, None, None)
    served = {
        k: v
        for k, v in served.items()
        if k not in ("serviceAccountName", "automountServiceAccountToken")
    }
    (container,) = served["containers"]
    startup = container["startupProbe"]
    env = [
        *container["env"],
        # The system server (health, metrics) runs when its port is set; 1.6.1 deprecates
        # DYN_SYSTEM_ENABLED for this (its runtime's warning).
        *pod.env({"DYN_SYSTEM_PORT": str(SYSTEM_PORT)}),
    ]
    container = {
        **{k: v for k, v in container.items() if k not in ("lifecycle",)},
        "name": MAIN_CONTAINER,
        "image": DYNAMO_EFA_RUNTIME_IMAGE if across else DYNAMO_RUNTIME_IMAGE,
        "command": list(WORKER_COMMAND),
        "args": worker_args(spec, component, bucket_name=context.bucket_name),
        "env": env,
        "ports": [
            {"name": SYSTEM_PORT_NAME, "containerPort": SYSTEM_PORT, "protocol": "TCP"},
        ],
        # Sized for the model load as vLLM's (its failure threshold), on the system port.
        "startupProbe": _system_probe(
            HEALTH_PATH, startup["failureThreshold"], startup["periodSeconds"]
        ),
        "readinessProbe": _system_probe(HEALTH_PATH, 3, _PROBE_PERIOD_S),
        "livenessProbe": _system_probe(LIVE_PATH, 3, 30),
    }
    served["containers"] = [container]
    if component in (PREFILL, DECODE) and not across:
        # The graph fits one node, and its workers are placed on the node of the others, so
        # the KV cache stays on PCIe (a graph across nodes goes where the scheduler fits it,
        # over EFA). Preferred, not required: a rolling update starts a worker beside a full
        # node's, which a required term would leave pending for good; until the old workers
        # go, its transfers cross nodes.
        served["affinity"] = {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {
                                "matchLabels": selector_labels(spec, WORKER_COMPONENT)
                            },
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            }
        }
    return served


def frontend_pod(spec: ModelDeploymentSpec, placement: Placement) -> Json:
    """The frontend's pod on the system pool: no GPU, the OpenAI port, HOME and /tmp."""
    home, tmp = "/home/dynamo", "/tmp"
    container = {
        "name": MAIN_CONTAINER,
        "image": DYNAMO_RUNTIME_IMAGE,
        "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
        "command": list(FRONTEND_COMMAND),
        "args": frontend_args(spec),
        "env": pod.env({"HOME": home, "XDG_CACHE_HOME": f"{home}/.cache", "HF_HUB_OFFLINE": "1"}),
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": OPENAI_PORT, "protocol": "TCP"}],
        "resources": pod.resources({"cpu": FRONTEND_CPU, "memory": f"{FRONTEND_MEMORY_MIB}Mi"}),
        "securityContext": pod.ROOT_IMAGE_SECURITY,
        "readinessProbe": _http_probe(HEALTH_PATH),
        "livenessProbe": _http_probe(LIVE_PATH),
        "volumeMounts": [pod.mount("home", home), pod.mount("tmp", tmp)],
    }
    return {
        "securityContext": pod.ROOT_IMAGE_POD_SECURITY,
        **pod.placement(placement.head),
        "containers": [container],
        "volumes": [pod.empty_dir("home", "4Gi"), pod.empty_dir("tmp", "4Gi")],
    }


def graph(
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    weights: WeightsVolume | None,
) -> tuple[Json, dict[str, Json]]:
    """The DynamoGraphDeployment of ``spec`` and each component's pod spec by name."""
    pods: dict[str, Json] = {FRONTEND: frontend_pod(spec, placement)}
    components: list[Json] = [
        _component(spec, FRONTEND, "frontend", 1, pods[FRONTEND], FRONTEND_COMPONENT)
    ]
    for name, group in worker_groups(spec):
        pods[name] = worker_pod(at_degree(spec, group), name, placement, context, weights)
        components.append(
            _component(spec, name, name, group.replicas, pods[name], WORKER_COMPONENT)
        )
    labels = object_labels(spec, GRAPH_COMPONENT)
    return (
        api_object(
            DGD_API_VERSION,
            DGD_KIND,
            metadata(spec.name, labels),
            {"spec": {"backendFramework": "vllm", "components": components}},
        ),
        pods,
    )


def _component(
    spec: ModelDeploymentSpec,
    name: str,
    kind: str,
    replicas: int,
    pod_spec: Json,
    component_label: str,
) -> Json:
    # The operator keeps these labels on the pods: it merges the podTemplate's labels over its
    # own and then sets only its nvidia.com/ labels again (dynamo/graph.go:2906-2916), so the
    # Services, NetworkPolicies and PodMonitors here select the graph's pods by them.
    labels = {**object_labels(spec, component_label), names.DYNAMO_WORKER_ROLE_LABEL: name}
    component: Json = {
        "name": name,
        "type": kind,
        "replicas": replicas,
        # The pod mounts its own /dev/shm (sized for its memory).
        "sharedMemorySize": "0",
        "podTemplate": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    if spec.scaling.autoscale and name != FRONTEND:
        # The operator creates this group's scaling adapter, which KEDA scales, and which owns
        # the group's replicas from then on: the operator's webhook refuses any other change
        # of them (deploy/operator/internal/webhook/validation/shared_v1beta1.go, "cannot be
        # modified directly when scaling adapter is enabled"). So the graph never states them:
        # applied again after KEDA scaled a group, a stated count would be such a change. The
        # group starts at the operator's default of one replica, and KEDA's minReplicaCount
        # takes it to min_replicas.
        del component["replicas"]
        component["scalingAdapter"] = {}
    return component


def frontend_service(spec: ModelDeploymentSpec) -> tuple[Json, Json]:
    """The Service ``<deployment>`` of the proxy's pods and the frontend's own
    ``<deployment>-dynamo-frontend``, both on port 8000."""

    def service(name: str, component: str) -> Json:
        return cluster_ip_service(
            name,
            object_labels(spec, component),
            selector_labels(spec, component),
            [{"name": HTTP_PORT_NAME, "port": OPENAI_PORT, "targetPort": OPENAI_PORT}],
        )

    return (
        service(spec.name, PROXY_COMPONENT),
        service(frontend_service_name(spec), FRONTEND_COMPONENT),
    )


def proxy(
    spec: ModelDeploymentSpec, placement: Placement, route: Route | None
) -> tuple[tuple[Json, ...], Json]:
    """The proxy's shipped code and Deployment, and its pod spec. It checks the key when
    ``route`` requires it, and only forwards otherwise (in-cluster only, or an endpoint
    without authentication), so the frontend is always reached through it alone."""
    labels = object_labels(spec, PROXY_COMPONENT)
    code = shipped.shipped_code(
        spec, labels, PROXY_SHIPPED_MODULES, package=shipped.SHIPPED_PACKAGE
    )
    keyed = requires_api_key(route)
    args = [
        "--upstream",
        f"http://{frontend_service_name(spec)}:{OPENAI_PORT}",
        "--port",
        str(OPENAI_PORT),
        "--keep-alive",
        str(keep_alive_seconds(route) if route is not None else _IN_CLUSTER_KEEP_ALIVE_S),
    ]
    env = pod.env(dict(code.env))
    if keyed:
        env.append(
            pod.secret_env(
                API_KEY_ENV, secret=API_KEY_SECRET_NEED.name, key=API_KEY_SECRET_NEED.key
            )
        )
    else:
        args.append("--no-key")
    container = {
        "name": "api-key-proxy",
        "image": DYNAMO_RUNTIME_IMAGE,
        "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
        "command": list(PROXY_COMMAND),
        "args": args,
        "env": env,
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": OPENAI_PORT, "protocol": "TCP"}],
        "resources": pod.resources({"cpu": PROXY_CPU, "memory": f"{PROXY_MEMORY_MIB}Mi"}),
        "securityContext": pod.ROOT_IMAGE_SECURITY,
        "readinessProbe": _http_probe(HEALTH_PATH),
        "livenessProbe": _http_probe(HEALTH_PATH, 30),
        "volumeMounts": [code.mount, pod.mount("tmp", "/tmp")],
    }
    pod_spec = {
        # The proxy calls no API: no token in its pods.
        "automountServiceAccountToken": False,
        "securityContext": pod.ROOT_IMAGE_POD_SECURITY,
        **pod.placement(placement.head),
        "containers": [container],
        "volumes": [code.volume, pod.empty_dir("tmp", "256Mi")],
    }
    deployment = api_object(
        "apps/v1",
        "Deployment",
        metadata(proxy_name(spec), labels),
        {
            "spec": {
                "replicas": PROXY_REPLICAS,
                "selector": {"matchLabels": selector_labels(spec, PROXY_COMPONENT)},
                "template": {
                    "metadata": {"labels": labels, "annotations": dict(code.annotations)},
                    "spec": pod_spec,
                },
            }
        },
    )
    return (code.config_map, deployment), pod_spec
