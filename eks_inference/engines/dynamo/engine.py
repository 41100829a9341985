"""NVIDIA Dynamo (``engine: dynamo``): a DynamoGraphDeployment with KV-aware routing, its
workers aggregated or prefill and decode apart, behind the platform's API key.

What it renders is :mod:`eks_inference.engines.dynamo.graph`; its options and their defaults
:mod:`eks_inference.engines.dynamo.options`; its rules :mod:`eks_inference.engines.dynamo.rules`.
The Dynamo operator, its CRDs and NATS come from the platform add-on
(:class:`eks_inference.constructs.addons.dynamo.DynamoPlatform`), which the stack creates only
when a deployment names this engine (through :meth:`DynamoEngine.platform_needs`).
"""

from __future__ import annotations

from collections.abc import Mapping

from eks_inference import metrics, names
from eks_inference.catalog import Accelerator
from eks_inference.charts import pod, server_deployment
from eks_inference.charts.api_key import API_KEY_SECRET_NEED, requires_api_key
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import selector_labels
from eks_inference.charts.model_server import HTTP_PORT_NAME, OPENAI_PORT
from eks_inference.charts.network_policy import PROMETHEUS_LABELS
from eks_inference.charts.network_rules import components, peer, policy, ports, rule
from eks_inference.charts.pod import Json
from eks_inference.charts.serving import (
    Backend,
    ChartObjects,
    MetricsTarget,
    ScaleTarget,
    ServerInputs,
    ServingEngine,
)
from eks_inference.charts.weights_loaders import loader_of
from eks_inference.engines.dynamo import autoscaling
from eks_inference.engines.dynamo import graph as dgd
from eks_inference.engines.dynamo import rules as dynamo_rules
from eks_inference.engines.dynamo.options import DynamoOptions, graph_of
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.observability.observed import (
    DeploymentKind,
    EngineAlert,
    EngineMetrics,
    EnginePanel,
    ReplicaSeries,
)
from eks_inference.observability.signals import DEPLOYMENT_LABEL, RATE_WINDOW, matchers
from eks_inference.serve.api_key_auth import HEALTH_PATH
from eks_inference.specification.capabilities import (
    AutoscalesOnQueue,
    DerivesServiceNames,
    DisaggregatesPrefill,
)
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engine_rules import fixed_unless_autoscaled
from eks_inference.specification.engines import MOUNTPOINT
from eks_inference.specification.startup_budget import model_load_seconds
from eks_inference.specification.validation import Rule

# A KV transfer slower than this, at the 95th percentile for ten minutes, eats the time to
# first token disaggregation should save (a prefill of a few thousand tokens takes about as
# long on an L40S).
KV_TRANSFER_ALERT_S = 0.5
_OWN_ALERT_FOR_S = 600
# The graph's fields every rule of its own reads.
_GRAPH_FIELDS = frozenset(
    {
        "options",
        "disaggregation",
        "model",
        "instance_type",
        "tensor_parallel_size",
        "limits.max_model_len",
        "limits.max_num_seqs",
        "limits.gpu_memory_utilization",
        "limits.block_size",
    }
)


class DynamoEngine(ServingEngine):
    """NVIDIA Dynamo 1.6.1: a frontend routing on the workers' KV caches, vLLM workers.

    Objects (:mod:`~eks_inference.engines.dynamo.graph`): the DynamoGraphDeployment
    ``<deployment>``; the Services ``<deployment>`` (the load balancer's backend) and
    ``<deployment>-dynamo-frontend``; with the API key, the proxy's ConfigMap and
    Deployment ``<deployment>-api-key``. The operator makes a Deployment per component and
    the Services :meth:`services` and the :class:`DerivesServiceNames` pattern name; with
    ``scaling.autoscale``, a scaling adapter per worker group, which a KEDA ScaledObject
    scales (:mod:`~eks_inference.engines.dynamo.autoscaling`).

    The API key is checked by a proxy in front of the frontend's Service rather than in its
    pod: the frontend is a Rust server that loads no middleware, and the operator owns its
    pod's port 8000, probes and environment (``DYN_HTTP_PORT``), which a sidecar would have
    to take over; a Deployment of its own leaves the graph as the release shapes it, and a
    NetworkPolicy lets only the proxy's pods (and Prometheus) reach the frontend.

    Fixed size unless ``scaling.autoscale``: ``scaling.min_replicas`` aggregated workers
    (``min_replicas == max_replicas``), or the replicas of each group.
    """

    name = "dynamo"
    summary = "NVIDIA Dynamo, KV-aware routing over vLLM workers, prefill and decode apart"
    component = dgd.GRAPH_COMPONENT
    accelerators = frozenset({Accelerator.NVIDIA})
    not_served_on = {
        Accelerator.NEURON: (
            "Dynamo's runtime images and its KV transfer (NIXL over UCX or libfabric) are built "
            "for CUDA GPUs only; its support matrix lists NVIDIA GPUs alone. Serve inf2 with "
            "engine: vllm or rayservice"
        )
    }
    capabilities = (
        DisaggregatesPrefill(graph_of, dynamo_rules.kv_transport, dynamo_rules.graph_nodes),
        AutoscalesOnQueue(),
        DerivesServiceNames(dgd.operator_worker_service_pattern),
    )
    options = DynamoOptions

    def loaders(self, accelerator: Accelerator) -> frozenset[str]:
        # Not the Run:ai streamer (docs/dynamo.md, "Weights"): the pods keep the graph's
        # discovery ServiceAccount the operator gives them (internal/dynamo/graph.go:1733), so
        # none of their own has Pod Identity; and dynamo.vllm 1.6.1 fetches a --model that is
        # not local through its own hub client first (dynamo/vllm/main.py, fetch_model), which
        # has no S3 provider. The Mountpoint volume gives the workers a local directory.
        return frozenset({MOUNTPOINT})

    def rules(self) -> tuple[Rule[ModelDeploymentSpec], ...]:
        scaling = frozenset({"scaling.min_replicas", "scaling.max_replicas", "scaling.autoscale"})
        return (
            Rule(scaling, fixed_unless_autoscaled),
            Rule(frozenset({"options", "disaggregation"}), dynamo_rules.check_split_given_once),
            Rule(_GRAPH_FIELDS, dynamo_rules.check_groups_serve_one_model),
            Rule(_GRAPH_FIELDS, dynamo_rules.check_groups_fit),
            Rule(_GRAPH_FIELDS, dynamo_rules.check_one_node),
            Rule(_GRAPH_FIELDS | scaling, dynamo_rules.check_autoscaled_graph),
            Rule(_GRAPH_FIELDS | scaling, dynamo_rules.check_efa_share),
        )

    def services(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        """Its own two, and the operator's of the frontend; the operator's of the workers
        carry a hash (:func:`~eks_inference.engines.dynamo.graph.
        operator_worker_service_pattern`)."""
        return (spec.name, dgd.frontend_service_name(spec), dgd.operator_frontend_service(spec))

    def scales_at_run_time(self, spec: ModelDeploymentSpec) -> bool:
        return False

    def server(self, given: ServerInputs) -> ChartObjects:
        spec, placement, context, weights, _, route = given
        loader = loader_of(spec)
        loader.check_volume(spec, given=weights is not None)
        graph, pods = dgd.graph(spec, placement, context, weights)
        proxy_objects, proxy_pod = dgd.proxy(spec, placement, route)
        service, frontend = dgd.frontend_service(spec)
        needs = [
            pod.scheduling_need(
                (f"DynamoGraphDeployment/{spec.name}", "spec", "components", index, "podTemplate"),
                placement.head if name == dgd.FRONTEND else placement.workers,
                pods[name],
                per_node=1 if name == dgd.FRONTEND else spec.instance.cores // group_degree,
            )
            for index, (name, group_degree) in enumerate(
                [(dgd.FRONTEND, 1)]
                + [(n, g.tensor_parallel_size) for n, g in dgd.worker_groups(spec)]
            )
        ]
        needs.append(
            pod.scheduling_need(
                (f"Deployment/{dgd.proxy_name(spec)}", "spec", "template"),
                placement.head,
                proxy_pod,
            )
        )
        return ChartObjects(
            (graph, service, frontend, *proxy_objects),
            PlatformNeeds(
                namespaces=(INFERENCE_NAMESPACE,),
                custom_resources=(names.DYNAMOGRAPHDEPLOYMENT_CRD,),
                secrets=(API_KEY_SECRET_NEED,) if requires_api_key(route) else (),
                pods=tuple(needs),
            ),
        )

    def backend(self, spec: ModelDeploymentSpec) -> Backend:
        return Backend(spec.name, HEALTH_PATH, server_deployment.TERMINATION_GRACE_S)

    def server_components(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        """The pods behind the Service ``<deployment>``: the proxy's, which serve port 8000."""
        return (dgd.PROXY_COMPONENT,)

    def metrics_targets(self, spec: ModelDeploymentSpec) -> tuple[MetricsTarget, ...]:
        """The frontend on its HTTP port, the workers on their system port."""
        return (
            MetricsTarget(
                dgd.FRONTEND_COMPONENT,
                {"matchLabels": selector_labels(spec, dgd.FRONTEND_COMPONENT)},
                HTTP_PORT_NAME,
            ),
            MetricsTarget(
                dgd.WORKER_COMPONENT,
                {"matchLabels": selector_labels(spec, dgd.WORKER_COMPONENT)},
                dgd.SYSTEM_PORT_NAME,
                ((names.DYNAMO_WORKER_ROLE_LABEL, autoscaling.GROUP_SERIES_LABEL),),
            ),
        )

    def scale_targets(self, spec: ModelDeploymentSpec) -> tuple[ScaleTarget, ...]:
        """Each worker group's scaling adapter, on its own load."""
        return autoscaling.scale_targets(spec)

    def network_policies(
        self, spec: ModelDeploymentSpec, labels: Mapping[str, str], servers: Json
    ) -> list[Json]:
        """The graph's flows beyond serving (the proxy's port 8000) and egress.

        - ``<deployment>-dynamo-frontend``: only the proxy's pods reach the frontend's port
          8000.
        - ``<deployment>-dynamo-metrics``: Prometheus scrapes the frontend's ``http`` and the
          workers' ``system`` ports.
        - ``<deployment>-dynamo-graph``: the frontend and workers reach each other on every
          port (the request plane, the workers' KV events, NIXL's transfers, on ports the
          runtime picks), and NATS in the platform's namespace.
        - ``<deployment>-dynamo-proxy``: the proxy's pods reach the frontend.
        """
        graph_pods = components(spec, (dgd.FRONTEND_COMPONENT, dgd.WORKER_COMPONENT))
        frontend = {"matchLabels": selector_labels(spec, dgd.FRONTEND_COMPONENT)}
        proxy = {"podSelector": {"matchLabels": selector_labels(spec, dgd.PROXY_COMPONENT)}}
        prometheus = peer(names.MONITORING_NAMESPACE, PROMETHEUS_LABELS)
        return [
            policy(
                f"{spec.name}-dynamo-frontend",
                labels,
                frontend,
                ingress=[rule("from", [proxy], ports(OPENAI_PORT))],
            ),
            policy(
                f"{spec.name}-dynamo-metrics",
                labels,
                graph_pods,
                ingress=[rule("from", [prometheus], ports(HTTP_PORT_NAME, dgd.SYSTEM_PORT_NAME))],
            ),
            policy(
                f"{spec.name}-dynamo-graph",
                labels,
                graph_pods,
                ingress=[{"from": [{"podSelector": graph_pods}]}],
                egress=[
                    {"to": [{"podSelector": graph_pods}]},
                    rule(
                        "to",
                        [peer(names.DYNAMO_NAMESPACE, names.DYNAMO_NATS_LABELS)],
                        ports(names.DYNAMO_NATS_PORT),
                    ),
                ],
            ),
            policy(
                f"{spec.name}-dynamo-proxy",
                labels,
                {"matchLabels": selector_labels(spec, dgd.PROXY_COMPONENT)},
                egress=[rule("to", [{"podSelector": frontend}], ports(OPENAI_PORT))],
            ),
        ]

    def platform_needs(self, spec: ModelDeploymentSpec) -> PlatformNeeds:
        """The DynamoGraphDeployment CRD, of the Dynamo platform add-on."""
        return PlatformNeeds(custom_resources=(names.DYNAMOGRAPHDEPLOYMENT_CRD,))

    def kind(self, spec: ModelDeploymentSpec) -> DeploymentKind:
        mode = "disaggregated" if graph_of(spec) is not None else "aggregated"
        return DeploymentKind("dynamo-gpu", f"NVIDIA Dynamo ({mode}) on GPU")

    def metrics(self, spec: ModelDeploymentSpec) -> EngineMetrics:
        """The frontend's latencies (what a client sees, the KV transfer included) and queue;
        vLLM's batch, KV cache and tokens from the workers."""
        return EngineMetrics(
            running=metrics.VLLM_REQUESTS_RUNNING,
            waiting=(metrics.VLLM_REQUESTS_WAITING, metrics.DYNAMO_FRONTEND_QUEUED),
            kv_cache=metrics.VLLM_KV_CACHE_USAGE,
            ttft=metrics.DYNAMO_FRONTEND_TTFT,
            itl=metrics.DYNAMO_FRONTEND_ITL,
            e2e=metrics.DYNAMO_FRONTEND_REQUEST_DURATION,
            prompt_tokens=metrics.VLLM_PROMPT_TOKENS,
            generation_tokens=metrics.VLLM_GENERATION_TOKENS,
        )

    def replica_series(
        self, spec: ModelDeploymentSpec, selector: Mapping[str, str], pods: str
    ) -> ReplicaSeries:
        """Ready workers: worker pods ready (kube-state-metrics, by the graph's labels);
        wanted: the graph's workers."""
        ready = matchers(namespace=INFERENCE_NAMESPACE, condition="true")
        wanted = f"vector({sum(group.replicas for _, group in dgd.worker_groups(spec))})"
        if spec.scaling.autoscale:
            # The adapters set the workers' Deployments (the operator's, one per group and
            # generation, named as their Services) to what KEDA chose.
            workloads = (
                f'{{namespace="{INFERENCE_NAMESPACE}", '
                f'deployment=~"{dgd.operator_worker_service_pattern(spec)}"}}'
            )
            wanted = f"sum({metrics.KSM_DEPLOYMENT_SPEC_REPLICAS.one()}{workloads})"
        return ReplicaSeries(
            ready=(
                f"count(({metrics.KSM_POD_READY.one()}{ready} == 1) and on(namespace, pod) {pods})"
            ),
            wanted=wanted,
            loading=server_deployment.loading_pods(pods),
            loading_alert_seconds=model_load_seconds(spec),
        )

    def own_alerts(self, spec: ModelDeploymentSpec) -> tuple[EngineAlert, ...]:
        """A disaggregated graph whose KV transfers are slow."""
        if graph_of(spec) is None:
            return ()
        return (
            EngineAlert(
                "DynamoKvTransferSlow",
                f"{_transfer_p95(spec)} > {KV_TRANSFER_ALERT_S}",
                _OWN_ALERT_FOR_S,
                "warning",
                f"{spec.name}: KV transfers from prefill to decode take over "
                f"{KV_TRANSFER_ALERT_S:g} s (p95)",
                "NIXL's transfer time (vllm:nixl_xfer_time_seconds on the decode workers) "
                "adds to every time to first token; a graph whose transfers are this slow "
                "may serve faster aggregated (options.mode: aggregated).",
            ),
        )

    def own_panels(self, spec: ModelDeploymentSpec) -> tuple[EnginePanel, ...]:
        """Queue at the frontend, and, disaggregated, the KV transfer time."""
        selector = matchers(**{DEPLOYMENT_LABEL: spec.name})
        queued = f"sum({metrics.DYNAMO_FRONTEND_QUEUED.one()}{selector})"
        inflight = f"sum({metrics.DYNAMO_FRONTEND_INFLIGHT.one()}{selector})"
        panels = [
            EnginePanel(
                "Dynamo frontend requests",
                "Requests the frontend serves, and those waiting for their first token.",
                "short",
                ((inflight, "in flight"), (queued, "queued")),
            )
        ]
        if graph_of(spec) is not None:
            panels.append(
                EnginePanel(
                    "KV transfer time (prefill to decode)",
                    "95th percentile of NIXL transfer time per request, on the decode workers.",
                    "s",
                    ((_transfer_p95(spec), "p95"),),
                )
            )
        return tuple(panels)

    def autoscaler(self, spec: ModelDeploymentSpec) -> str:
        split = graph_of(spec)
        if spec.scaling.autoscale:
            groups = "aggregated workers" if split is None else "prefill and decode workers each"
            return (
                f"KEDA, {groups} through the scaling adapter: {spec.scaling.min_replicas} to "
                f"{spec.scaling.max_replicas}"
            )
        if split is None:
            return f"fixed size: {spec.scaling.min_replicas} aggregated worker(s)"
        return (
            f"fixed size: {split.prefill.replicas} prefill and {split.decode.replicas} decode "
            "worker(s)"
        )


def _transfer_p95(spec: ModelDeploymentSpec) -> str:
    selector = matchers(**{DEPLOYMENT_LABEL: spec.name})
    bucket = metrics.VLLM_NIXL_TRANSFER_TIME.bucket()
    return f"histogram_quantile(0.95, sum by (le) (rate({bucket}{selector}[{RATE_WINDOW}])))"
