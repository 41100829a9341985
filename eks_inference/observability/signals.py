"""What to watch for each deployment: the PromQL queries and the thresholds chosen, in one place.

The alert rules and scrape objects (:mod:`eks_inference.charts.monitoring`), the KEDA
autoscaler (:mod:`eks_inference.charts.autoscaling`), the Grafana dashboards
(:mod:`eks_inference.observability.dashboards`) and ``eks-inference plan`` all read
:func:`signals_of`, so a threshold on a dashboard is the threshold an alert fires at and the
plan prints. The metric names and the replica series are the engine's
(:class:`~eks_inference.observability.observed.ObservedEngine`); every query only names metrics
of :mod:`eks_inference.metrics` (checked when it is built).

Series are selected by :data:`DEPLOYMENT_LABEL`, which the deployment's PodMonitors copy from
the pods' ``app.kubernetes.io/instance`` label; exporter series that carry a pod (DCGM) or a
node (neuron-monitor) are joined to the deployment's pods through kube-state-metrics'
``kube_pod_labels`` (allowed labels: :data:`KSM_POD_LABELS`) and ``kube_pod_info``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eks_inference import metrics, names
from eks_inference.metrics import Metric, require_known
from eks_inference.observability.observed import DeploymentKind, observed_engine
from eks_inference.specification import startup_budget as load_budget
from eks_inference.specification.deployment import ModelDeploymentSpec

# The target label the deployment's PodMonitors set from the pod's instance label; Ray Serve
# metrics already carry `deployment` (the Serve deployment) and `application`, so it is not
# called either of those.
DEPLOYMENT_LABEL = "inference_deployment"
# Pod labels kube-state-metrics exports as `kube_pod_labels{label_<name>=...}`.
KSM_POD_LABELS = (names.INSTANCE_LABEL, names.COMPONENT_LABEL)
# Every target is scraped every 15 s; rates look at 2 minutes, eight scrapes, so one missed
# scrape does not break a panel or a rule.
SCRAPE_INTERVAL_SECONDS = 15
RATE_WINDOW = "2m"
# An alert's condition must hold this long before it fires, unless the budget says otherwise.
ALERT_FOR_SECONDS = 300
# KV cache: the autoscaler adds replicas above 80 % average use, so that a burst finds free
# blocks; above 90 % on any replica, sequences are about to be preempted (recomputed from
# scratch), which the KV-cache alert reports.
KV_CACHE_SCALE_TARGET = 0.8
KV_CACHE_ALERT = 0.9
# Latency percentiles the dashboards show.
PERCENTILES = (0.5, 0.95, 0.99)


def ksm_label(label: str) -> str:
    """The label kube-state-metrics gives a Kubernetes label: ``label_`` and ``[a-z0-9_]``."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)


def matchers(**labels: str) -> str:
    """PromQL label matchers: ``{key="value", ...}``."""
    return "{" + ", ".join(f'{key}="{value}"' for key, value in labels.items()) + "}"


@dataclass(frozen=True)
class Watch:
    """One thing to watch: what it is, the query, the threshold and what happens there."""

    signal: str
    query: str
    threshold: str
    consequence: str


@dataclass(frozen=True)
class Signals:
    """The queries and thresholds of one deployment (see :func:`signals_of`)."""

    deployment: str
    kind: DeploymentKind
    accelerator_unit: str
    # None when the engine exports no such metric (EngineMetrics.running, .kv_cache).
    requests_running: str | None
    requests_waiting: str
    kv_cache_usage_max: str | None
    kv_cache_usage_avg: str | None
    generation_tokens_per_second: str
    prompt_tokens_per_second: str
    replicas_ready: str
    replicas_wanted: str
    accelerator_utilization: str
    accelerator_memory: str
    cost_per_million_tokens: str
    model_loading: str
    time_to_first_token: dict[float, str]
    inter_token_latency: dict[float, str]
    e2e_latency: dict[float, str]
    # Thresholds.
    queue_per_replica: int
    queue_alert: int
    kv_cache_scale_target: float
    kv_cache_alert: float
    load_budget_seconds: int
    rollout_budget_seconds: int
    loading_alert_seconds: int
    scale_in_window_seconds: int
    min_replicas: int
    max_replicas: int
    price_per_node_hour: float
    replicas_per_node: int
    autoscaled_by: str
    queue_threshold: str

    def queries(self) -> dict[str, str]:
        """Every query, by a name, for checks that must see all of them."""
        listed: dict[str, str | None] = {
            "requests_running": self.requests_running,
            "requests_waiting": self.requests_waiting,
            "kv_cache_usage_max": self.kv_cache_usage_max,
            "kv_cache_usage_avg": self.kv_cache_usage_avg,
            "generation_tokens_per_second": self.generation_tokens_per_second,
            "prompt_tokens_per_second": self.prompt_tokens_per_second,
            "replicas_ready": self.replicas_ready,
            "replicas_wanted": self.replicas_wanted,
            "accelerator_utilization": self.accelerator_utilization,
            "accelerator_memory": self.accelerator_memory,
            "cost_per_million_tokens": self.cost_per_million_tokens,
            "model_loading": self.model_loading,
        }
        found = {name: expr for name, expr in listed.items() if expr is not None}
        for label, table in (
            ("ttft", self.time_to_first_token),
            ("itl", self.inter_token_latency),
            ("e2e", self.e2e_latency),
        ):
            found.update({f"{label}_p{round(q * 100)}": expr for q, expr in table.items()})
        return found

    def watch_list(self) -> tuple[Watch, ...]:
        """What an operator should watch, with the thresholds the platform acts on."""
        kv_cache = (
            ()
            if self.kv_cache_usage_max is None
            else (
                Watch(
                    "KV-cache use",
                    self.kv_cache_usage_max,
                    f"> {self.kv_cache_alert:.0%} on any replica",
                    "alert: sequences are about to be preempted; raise max_replicas or lower "
                    "max_num_seqs",
                ),
            )
        )
        return (
            Watch(
                "requests waiting",
                self.requests_waiting,
                self.queue_threshold,
                self.autoscaled_by,
            ),
            *kv_cache,
            Watch(
                "ready replicas",
                self.replicas_ready,
                f"< 1 (bounds {self.min_replicas}-{self.max_replicas})",
                "alert: nothing serves the model",
            ),
            Watch(
                "replica loading",
                self.model_loading,
                f"longer than {self.loading_alert_seconds} s",
                "alert: a replica is stuck in model load beyond its budget",
            ),
            Watch(
                "time to first token p95",
                self.time_to_first_token[0.95],
                "dashboard",
                "rises with queueing and long prompts",
            ),
            Watch(
                "cost per 1M generated tokens",
                self.cost_per_million_tokens,
                f"${self.price_per_node_hour:.2f} per node-hour, "
                f"{self.replicas_per_node} replica(s) per node",
                "dashboard",
            ),
        )


def signals_of(spec: ModelDeploymentSpec) -> Signals:
    """The queries and thresholds of ``spec``.

    - **Queue**: the autoscaler (KEDA for standalone vLLM, Serve for Ray) adds a replica per
      quarter batch (``max_num_seqs / 4``) waiting, the same allowance Serve's
      ``max_ongoing_requests`` gives a replica beyond its batch; the alert fires when a whole
      batch waits and the queue still rises for five minutes (the autoscaler is at its bound
      or cannot get capacity).
    - **KV cache**: scale out above 80 % average use, alert above 90 % on any replica.
    - **Replicas**: alert with none ready for five minutes; a RayService that scales to zero
      only when requests wait and none has come up within the rollout budget.
    - **Model load**: alert when a replica has loaded for longer than its budget
      (:func:`eks_inference.specification.startup_budget.model_load_seconds`); for Ray Serve, when
      Serve's
      target replica count is not reached within the rollout budget (node, image, load).
    - **Scale-in**: only after load has stayed low for the rollout budget, longer than a model
      load: a replica removed and wanted back costs a node launch, a pull and a load.
    - **Cost**: the catalog's on-demand price per node-hour (the plan's price), times the
      nodes the ready replicas occupy, over the generated tokens.
    """
    engine = observed_engine(spec)
    vocabulary = engine.metrics(spec)
    labels = {DEPLOYMENT_LABEL: spec.name}
    selector = matchers(**labels)
    pods = _deployment_pods(spec)

    def total(metric: Metric) -> str:
        return f"sum({metric.one()}{selector})"

    def rate(metric: Metric) -> str:
        return f"sum(rate({metric.one()}{selector}[{RATE_WINDOW}]))"

    def quantiles(metric: Metric) -> dict[float, str]:
        bucket = f"rate({metric.bucket()}{selector}[{RATE_WINDOW}])"
        return {q: f"histogram_quantile({q}, sum by (le) ({bucket}))" for q in PERCENTILES}

    waiting = " + ".join(f"({total(m)} or vector(0))" for m in vocabulary.waiting)
    kv_cache = vocabulary.kv_cache
    replicas = engine.replica_series(spec, labels, pods)
    ready = replicas.ready
    generation = rate(vocabulary.generation_tokens)
    per_node = spec.replicas_per_node
    price = spec.instance.price_per_hour
    cost = f"(ceil(({ready}) / {per_node}) * {price}) / (({generation}) * 3600 > 0) * 1000000"
    utilization, memory = _accelerator(spec, pods)
    queue_per_replica = max(1, spec.limits.max_num_seqs // 4)
    rollout = load_budget.rollout_seconds(spec)
    built = Signals(
        deployment=spec.name,
        kind=engine.kind(spec),
        accelerator_unit="NeuronCore" if spec.on_neuron else "GPU",
        requests_running=None if vocabulary.running is None else total(vocabulary.running),
        requests_waiting=waiting,
        kv_cache_usage_max=None if kv_cache is None else f"max({kv_cache.one()}{selector})",
        kv_cache_usage_avg=None if kv_cache is None else f"avg({kv_cache.one()}{selector})",
        generation_tokens_per_second=generation,
        prompt_tokens_per_second=rate(vocabulary.prompt_tokens),
        replicas_ready=ready,
        replicas_wanted=replicas.wanted,
        accelerator_utilization=utilization,
        accelerator_memory=memory,
        cost_per_million_tokens=cost,
        model_loading=replicas.loading,
        time_to_first_token=quantiles(vocabulary.ttft),
        inter_token_latency=quantiles(vocabulary.itl),
        e2e_latency=quantiles(vocabulary.e2e),
        queue_per_replica=queue_per_replica,
        queue_alert=spec.limits.max_num_seqs,
        kv_cache_scale_target=KV_CACHE_SCALE_TARGET,
        kv_cache_alert=KV_CACHE_ALERT,
        load_budget_seconds=load_budget.model_load_seconds(spec),
        rollout_budget_seconds=rollout,
        loading_alert_seconds=replicas.loading_alert_seconds,
        scale_in_window_seconds=rollout,
        min_replicas=spec.scaling.min_replicas,
        max_replicas=spec.scaling.max_replicas,
        price_per_node_hour=price,
        replicas_per_node=per_node,
        autoscaled_by=engine.autoscaler(spec),
        queue_threshold=engine.queue_threshold(queue_per_replica, spec.limits.max_num_seqs),
    )
    for expr in built.queries().values():
        require_known(expr)
    return built


def _deployment_pods(spec: ModelDeploymentSpec) -> str:
    """``kube_pod_labels`` of ``spec``'s pods, one series per pod (value 1), for joins."""
    labels = matchers(
        namespace=names.INFERENCE_NAMESPACE, **{ksm_label(names.INSTANCE_LABEL): spec.name}
    )
    return f"max by (namespace, pod) ({metrics.KSM_POD_LABELS.one()}{labels})"


def _accelerator(spec: ModelDeploymentSpec, pods: str) -> tuple[str, str]:
    """Utilization and memory use (0 to 1) of the accelerators serving ``spec``.

    GPUs: DCGM attributes each GPU to the pod using it, so the series join the deployment's
    pods directly. NeuronCores: neuron-monitor reports per node (its PodMonitor adds the
    node), so the series join the nodes the deployment's pods run on; a node shared with
    another deployment is counted for both.
    """
    if not spec.on_neuron:
        util = f"{metrics.DCGM_GPU_UTIL.one()} * on(namespace, pod) group_left() {pods}"
        used = f"{metrics.DCGM_FB_USED.one()} * on(namespace, pod) group_left() {pods}"
        free = f"{metrics.DCGM_FB_FREE.one()} * on(namespace, pod) group_left() {pods}"
        return f"avg({util}) / 100", f"sum({used}) / (sum({used}) + sum({free}))"
    info = matchers(namespace=names.INFERENCE_NAMESPACE)
    nodes = (
        f"max by (node) ({metrics.KSM_POD_INFO.one()}{info} * on(namespace, pod) "
        f"group_left() {pods})"
    )
    device = matchers(memory_location="neuron_device")
    hbm_bytes = spec.instance.cores * spec.instance.memory_per_core_bytes
    util = f"avg({metrics.NEURONCORE_UTILIZATION.one()} * on(node) group_left() {nodes})"
    memory = (
        f"sum({metrics.NEURON_RUNTIME_MEMORY.one()}{device} * on(node) group_left() {nodes})"
        f" / (count({nodes}) * {hbm_bytes})"
    )
    return util, memory


def seconds(value: int) -> str:
    """A Prometheus duration of whole seconds."""
    return f"{value}s"
