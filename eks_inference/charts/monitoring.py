"""What the metrics stack needs of each deployment: PodMonitors, alert rules and a dashboard.

Monitors are built from the same names as the pods they scrape, as the deployment's engine
gives them (:meth:`~eks_inference.charts.serving.ServingEngine.metrics_targets`): the
selector is the pods' instance and component labels, the port is the named port the pod
template declares (vLLM's ``http`` port serves ``/metrics``; every Ray node exports on
KubeRay's ``metrics`` port), and every series gets the deployment's name as
:data:`~eks_inference.observability.signals.DEPLOYMENT_LABEL`. Rules and dashboards come from
:func:`~eks_inference.observability.signals.signals_of`, whose queries only name metrics the
pinned components emit.

Everything here is applied in the ``inference`` namespace, beside the pods: the Prometheus of
kube-prometheus-stack selects PodMonitors and PrometheusRules in every namespace, and its
Grafana sidecar loads dashboard ConfigMaps, by their label, from this namespace and its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from eks_inference import names
from eks_inference.catalog import Accelerator
from eks_inference.charts import pod
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import PART_OF, api_object, metadata, object_labels
from eks_inference.charts.record import ChartRecord, deployment_chart
from eks_inference.charts.renamed import RenamedKinds
from eks_inference.charts.routing import routing_metrics_targets
from eks_inference.charts.serving import serving_engine
from eks_inference.metrics import require_known
from eks_inference.names import INFERENCE_NAMESPACE, MONITORING_NAMESPACE
from eks_inference.observability import dashboards
from eks_inference.observability.signals import (
    ALERT_FOR_SECONDS,
    DEPLOYMENT_LABEL,
    SCRAPE_INTERVAL_SECONDS,
    Signals,
    seconds,
    signals_of,
)
from eks_inference.output.json_text import indented_json
from eks_inference.serve.api_key_auth import METRICS_PATH
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.node_pools import NodePool
from eks_inference.versions import NEURON_MONITOR_IMAGE

MONITORING_API_VERSION = "monitoring.coreos.com/v1"
PODMONITOR_CRD = "podmonitors.monitoring.coreos.com"
PROMETHEUSRULE_CRD = "prometheusrules.monitoring.coreos.com"
ROLE = "monitoring"
# The platform's chart of the exporters it runs from its own manifests.
EXPORTERS_ROLE = "exporters"
# neuron-monitor: the exporter's port (its entrypoint's --port) and resources (Neuron's own
# DaemonSet: 500m CPU and 256 MiB at most, the Go runtime held to 160 MiB below that).
NEURON_MONITOR = "neuron-monitor"
NEURON_MONITOR_PORT = 8000
NEURON_MONITOR_PORT_NAME = "metrics"
_NEURON_MONITOR_CPU = "500m"
_NEURON_MONITOR_MEMORY = "256Mi"
_NEURON_MONITOR_GO_MEMORY_LIMIT = "160MiB"
_NEURON_MONITOR_TMP = "64Mi"
# Probes on the exporter's metrics route, the one it serves: ready once it answers, restarted
# when it has not answered for a minute and a half (three missed checks, 30 s apart).
_NEURON_MONITOR_PROBE_TIMEOUT_S = 5
_NEURON_MONITOR_READINESS_PERIOD_S = 10
_NEURON_MONITOR_LIVENESS_PERIOD_S = 30
_NEURON_MONITOR_PROBE_FAILURES = 3
_NAME_LABEL = "app.kubernetes.io/name"
# The name a deployment's monitoring derives from its name other than by writing it.
_DASHBOARD_UID = "dashboard-uid"
# The monitoring of the platform being rendered, by kind of deployment (rendered_per_kind).
_PER_KIND: ContextVar[RenamedKinds | None] = ContextVar("monitoring_per_kind", default=None)


def _interval() -> str:
    return seconds(SCRAPE_INTERVAL_SECONDS)


def _copy_pod_label(label: str, target: str) -> dict[str, Any]:
    """A relabeling that copies a pod label (as service discovery names it) to ``target``."""
    meta = "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in label)
    return {"action": "replace", "sourceLabels": [meta], "targetLabel": target}


def pod_monitor(
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    selector: Mapping[str, Any],
    port: str,
    relabelings: Sequence[Mapping[str, Any]],
    path: str = METRICS_PATH,
) -> dict[str, Any]:
    """A PodMonitor scraping ``port`` (a container port name) at ``path`` (``/metrics``
    unless given) of the pods ``selector`` picks in ``namespace``, every
    :data:`SCRAPE_INTERVAL_SECONDS`."""
    return api_object(
        MONITORING_API_VERSION,
        "PodMonitor",
        metadata(name, labels, namespace=namespace),
        {
            "spec": {
                "selector": dict(selector),
                "podMetricsEndpoints": [
                    {
                        "port": port,
                        "path": path,
                        "interval": _interval(),
                        "relabelings": [dict(r) for r in relabelings],
                    }
                ],
            }
        },
    )


def _deployment_monitors(spec: ModelDeploymentSpec) -> list[dict[str, Any]]:
    """The PodMonitors of ``spec``: one per metrics target of its engine, and with an
    endpoint picker one for the picker and one for its proxy."""
    labels = object_labels(spec, ROLE)
    relabel = [_copy_pod_label(names.INSTANCE_LABEL, DEPLOYMENT_LABEL)]
    targets = [
        *((target, METRICS_PATH) for target in serving_engine(spec).metrics_targets(spec)),
        *routing_metrics_targets(spec),
    ]
    return [
        pod_monitor(
            f"{spec.name}-{target.name}",
            INFERENCE_NAMESPACE,
            labels,
            target.selector,
            target.port,
            [*relabel, *(_copy_pod_label(label, to) for label, to in target.pod_labels)],
            path,
        )
        for target, path in targets
    ]


def alert_rules(spec: ModelDeploymentSpec, signals: Signals) -> list[dict[str, Any]]:
    """The four alerts of ``spec``, from its ``signals`` (:func:`signals_of`)."""
    where = {DEPLOYMENT_LABEL: spec.name}
    if spec.scaling.min_replicas > 0:
        no_replica = f"({signals.replicas_ready} or vector(0)) < 1"
        no_replica_for = ALERT_FOR_SECONDS
    else:
        # Scaled to zero on purpose: only a request left waiting without a replica is wrong.
        no_replica = (
            f"(({signals.replicas_ready} or vector(0)) < 1) and (({signals.requests_waiting}) > 0)"
        )
        no_replica_for = signals.rollout_budget_seconds
    # An engine without a KV-cache metric (Triton's vLLM backend) gets no KV-cache alert.
    kv_cache = (
        []
        if signals.kv_cache_usage_max is None
        else [
            _alert(
                "InferenceKVCacheNearlyFull",
                f"{signals.kv_cache_usage_max} > {signals.kv_cache_alert}",
                ALERT_FOR_SECONDS,
                "warning",
                where,
                f"{spec.name}: KV cache above {signals.kv_cache_alert:.0%} on a replica",
                "Sequences are about to be preempted and recomputed; raise max_replicas or "
                "lower max_num_seqs.",
            ),
        ]
    )
    own = [
        _alert(
            alert.name,
            require_known(alert.expr),
            alert.for_seconds,
            alert.severity,
            where,
            alert.summary,
            alert.description,
        )
        for alert in serving_engine(spec).own_alerts(spec)
    ]
    return [
        _alert(
            "InferenceQueueGrowing",
            f"(({signals.requests_waiting}) > {signals.queue_alert}) and "
            f"(deriv(({signals.requests_waiting})[10m:30s]) > 0)",
            ALERT_FOR_SECONDS,
            "warning",
            where,
            f"{spec.name}: more than a full batch ({signals.queue_alert}) waiting, and rising",
            f"Requests keep queueing although the autoscaler acts ({signals.autoscaled_by}): it is "
            f"at max_replicas ({signals.max_replicas}) or cannot get capacity.",
        ),
        *kv_cache,
        _alert(
            "InferenceNoReadyReplica",
            no_replica,
            no_replica_for,
            "critical",
            where,
            f"{spec.name}: no replica is ready",
            "Nothing serves the model.",
        ),
        _alert(
            "InferenceModelLoadStuck",
            f"({signals.model_loading}) > 0",
            signals.loading_alert_seconds,
            "warning",
            where,
            f"{spec.name}: a replica has been loading beyond its budget",
            f"Model load budget {signals.load_budget_seconds} s (with node launch and image pull "
            f"{signals.rollout_budget_seconds} s); look at the replica's log.",
        ),
        *own,
    ]


def _alert(
    name: str,
    expr: str,
    for_seconds: int,
    severity: str,
    labels: Mapping[str, str],
    summary: str,
    description: str,
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": seconds(for_seconds),
        "labels": {"severity": severity, **labels},
        "annotations": {"summary": summary, "description": description},
    }


def dashboard_config_map(
    spec: ModelDeploymentSpec, signals: Signals, board_uid: str | None = None
) -> dict[str, Any]:
    """The ConfigMap holding ``spec``'s Grafana dashboard, labelled for Grafana's sidecar;
    ``board_uid`` as :func:`~eks_inference.observability.dashboards.dashboard` takes it."""
    labels = {**object_labels(spec, ROLE), names.GRAFANA_DASHBOARD_LABEL: "1"}
    board = indented_json(dashboards.dashboard(spec, signals, board_uid))
    return api_object(
        "v1",
        "ConfigMap",
        metadata(f"{spec.name}-dashboard", labels),
        {"data": {f"{spec.name}.json": board}},
    )


def monitoring_chart(spec: ModelDeploymentSpec) -> ChartRecord:
    """How ``spec``'s deployment is observed: PodMonitors, a PrometheusRule, a dashboard.

    - **PodMonitor** ``<deployment>-vllm`` (standalone vLLM: the server's ``http`` port,
      ``/metrics``) or ``<deployment>-ray`` (every Ray head and worker: the ``metrics`` port
      where Ray, Serve and vLLM through Ray's stat logger export), every 15 s, each series
      labelled ``inference_deployment=<deployment>``.
    - **PrometheusRule** ``<deployment>``: a growing queue, KV cache above 90 %, no ready
      replica, a replica stuck in model load beyond its budget.
    - **ConfigMap** ``<deployment>-dashboard``: the deployment's Grafana dashboard.

    Its needs name the Prometheus Operator CRDs, which kube-prometheus-stack installs. Within
    :func:`rendered_per_kind`, the objects of a deployment whose kind was rendered before are
    that kind's, renamed.
    """
    per_kind = _PER_KIND.get()
    objects = (
        _monitoring_objects(spec, {_DASHBOARD_UID: dashboards.uid(spec.name)})
        if per_kind is None
        else per_kind.objects(spec)
    )
    return deployment_chart(
        spec,
        ROLE,
        objects,
        PlatformNeeds(
            namespaces=(INFERENCE_NAMESPACE,),
            custom_resources=(PODMONITOR_CRD, PROMETHEUSRULE_CRD),
        ),
    )


def _monitoring_objects(
    spec: ModelDeploymentSpec, derived: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The objects of :func:`monitoring_chart`, with the dashboard uid ``derived`` gives."""
    signals = signals_of(spec)
    rules = api_object(
        MONITORING_API_VERSION,
        "PrometheusRule",
        metadata(spec.name, object_labels(spec, ROLE)),
        {"spec": {"groups": [{"name": spec.name, "rules": alert_rules(spec, signals)}]}},
    )
    board = dashboard_config_map(spec, signals, derived[_DASHBOARD_UID])
    return [*_deployment_monitors(spec), rules, board]


@contextmanager
def rendered_per_kind() -> Iterator[None]:
    """Within, :func:`monitoring_chart` renders each kind of deployment once and renames its
    objects for the other deployments of the kind
    (:class:`~eks_inference.charts.renamed.RenamedKinds`): for a platform's render, where many
    deployments may differ by their names alone. The dashboard's uid, a hash of the name, is
    computed for each deployment."""
    token = _PER_KIND.set(RenamedKinds(_monitoring_objects, {_DASHBOARD_UID: dashboards.uid}))
    try:
        yield
    finally:
        _PER_KIND.reset(token)


def _neuron_monitor_labels(pool: NodePool | None = None) -> dict[str, str]:
    labels = {_NAME_LABEL: NEURON_MONITOR, "app.kubernetes.io/part-of": PART_OF}
    if pool is not None:
        labels[names.INSTANCE_LABEL] = f"{NEURON_MONITOR}-{pool.name}"
    return labels


def neuron_pools(pools: Iterable[NodePool]) -> list[NodePool]:
    """The Inferentia2 pools among ``pools``: where neuron-monitor runs."""
    return [p for p in pools if p.accelerator is Accelerator.NEURON]


def neuron_monitor_daemon_set(pool: NodePool) -> dict[str, Any]:
    """neuron-monitor with its Prometheus exporter on every node of the Neuron ``pool``.

    The pool's selector and tolerations, so it runs on those nodes and no others; privileged
    (:data:`~eks_inference.charts.pod.PRIVILEGED_NODE_AGENT_SECURITY`), as Neuron's own
    DaemonSet is; requests equal to its limits; a writable /tmp on a read-only root; readiness
    and liveness probes on the exporter's metrics route.
    """
    labels = _neuron_monitor_labels(pool)

    def probe(period_seconds: int) -> dict[str, Any]:
        return pod.http_probe(
            METRICS_PATH,
            port=NEURON_MONITOR_PORT,
            period_seconds=period_seconds,
            timeout_seconds=_NEURON_MONITOR_PROBE_TIMEOUT_S,
            failure_threshold=_NEURON_MONITOR_PROBE_FAILURES,
        )

    container = {
        "name": NEURON_MONITOR,
        "image": NEURON_MONITOR_IMAGE,
        "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
        "command": ["/opt/bin/entrypoint.sh"],
        "args": ["--port", str(NEURON_MONITOR_PORT)],
        "ports": [
            {
                "name": NEURON_MONITOR_PORT_NAME,
                "containerPort": NEURON_MONITOR_PORT,
                "protocol": "TCP",
            }
        ],
        "env": pod.env({"GOMEMLIMIT": _NEURON_MONITOR_GO_MEMORY_LIMIT}),
        "resources": pod.resources({"cpu": _NEURON_MONITOR_CPU, "memory": _NEURON_MONITOR_MEMORY}),
        "securityContext": pod.PRIVILEGED_NODE_AGENT_SECURITY,
        "readinessProbe": probe(_NEURON_MONITOR_READINESS_PERIOD_S),
        "livenessProbe": probe(_NEURON_MONITOR_LIVENESS_PERIOD_S),
        "volumeMounts": [pod.mount("tmp", "/tmp")],
    }
    template = {
        "metadata": {"labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "priorityClassName": "system-node-critical",
            **pod.placement(pool),
            "containers": [container],
            "volumes": [pod.empty_dir("tmp", _NEURON_MONITOR_TMP)],
        },
    }
    return api_object(
        "apps/v1",
        "DaemonSet",
        metadata(f"{NEURON_MONITOR}-{pool.name}", labels, namespace=MONITORING_NAMESPACE),
        {"spec": {"selector": {"matchLabels": labels}, "template": template}},
    )


def exporters_chart(neuron_pools: Sequence[NodePool]) -> ChartRecord:
    """The exporters the platform runs from its own manifests, and their monitors.

    neuron-monitor has no Helm chart: one DaemonSet per Neuron pool
    (:func:`neuron_monitor_daemon_set`) and one PodMonitor for all of them, which labels each
    series with the node it came from (``node``), the key the dashboards join NeuronCore
    metrics to a deployment's pods by. DCGM exporter comes from its Helm chart, which
    creates its own ServiceMonitor. Applied in the monitoring namespace after
    kube-prometheus-stack (which creates it and the PodMonitor CRD).
    """
    objects = [neuron_monitor_daemon_set(pool) for pool in neuron_pools]
    if neuron_pools:
        objects.append(
            pod_monitor(
                NEURON_MONITOR,
                MONITORING_NAMESPACE,
                _neuron_monitor_labels(),
                {"matchLabels": {_NAME_LABEL: NEURON_MONITOR}},
                NEURON_MONITOR_PORT_NAME,
                [
                    {
                        "action": "replace",
                        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                        "targetLabel": "node",
                    }
                ],
            )
        )
    return ChartRecord(
        chart_id=EXPORTERS_ROLE,
        role=EXPORTERS_ROLE,
        objects=tuple(objects),
        needs=PlatformNeeds(
            namespaces=(MONITORING_NAMESPACE,) if neuron_pools else (),
            custom_resources=(PODMONITOR_CRD,) if neuron_pools else (),
        ),
    )
