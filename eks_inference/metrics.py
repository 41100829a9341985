"""Every metric the platform reads, with the component version that emits it and where that is.

Dashboards, alert rules, autoscaler triggers and the plan's watch list only use names listed
here, and :func:`unknown_metrics` finds any other name in a PromQL expression, so a renamed
upstream metric (``vllm:gpu_cache_usage_perc`` became ``vllm:kv_cache_usage_perc``) fails a
test or a render instead of leaving a panel empty and an alert silent.

Sources, read at the pinned versions:

- **vLLM 0.34.0** (GPU, ``versions.GPU_VLLM_VERSION``; 0.29.0 in the Ray LLM image) and
  **0.16.0** (Inferentia2, the Neuron image): ``vllm/v1/metrics/loggers.py``
  (``PrometheusStatLogger``) in the ``vllm`` wheels of these releases on PyPI. Every vLLM
  metric below is registered under the same name and type in each; labels ``model_name`` and
  ``engine``. Served on the server's own port at ``/metrics``.
- **vLLM inside Ray Serve** (Ray Serve LLM on GPUs, ``ray.serve.llm`` of Ray 2.60.0): the
  engine is created with ``vllm.v1.metrics.ray_wrappers.RayPrometheusStatLogger``, which
  records the same metrics as Ray metrics, their names sanitized to ``[a-zA-Z0-9_]``
  (``vllm:num_requests_waiting`` -> ``vllm_num_requests_waiting``); Ray's exporter
  (``ray/_private/telemetry/open_telemetry_metric_recorder.py``, namespace ``ray``) prefixes
  ``ray_`` and serves them on every Ray node's metrics-export-port. See :func:`ray_exported`.
- **Ray Serve 2.60.0**: ``ray/serve/_private/router.py``, ``replica.py``,
  ``deployment_state.py`` of the ``ray`` wheel (``requirements-dev.txt`` pins it), exported
  with the ``ray_`` prefix on the metrics port of the node whose process records them.
- **DCGM exporter 4.8.2** (image ``4.5.3-4.8.2``, chart 4.8.2):
  ``etc/default-counters.csv`` at the release tag of NVIDIA/dcgm-exporter; with Kubernetes
  mapping on, each GPU series carries the ``pod``, ``namespace`` and ``container`` using it.
- **neuron-monitor** (``neuron-monitor-prometheus.py`` of ``aws-neuron-tools``, run by the
  ``public.ecr.aws/neuron/neuron-monitor`` image): the metrics the Neuron SDK's own Grafana
  dashboard reads (``src/examples/neuron-monitor/neuron-monitor-grafana.json`` of
  aws-neuron/aws-neuron-sdk) and its user guide's Prometheus companion-script section.
- **Triton 25.11** (server v2.63.0, ``versions.TRITON_RELEASE``): the core's ``src/metrics.cc``
  at r25.11 of triton-inference-server/core (and ``docs/user_guide/metrics.md`` at v2.63.0 of
  the server); prometheus-cpp exposes a counter under its registered name, with no ``_total``
  (:attr:`Kind.UNSUFFIXED_COUNTER`). Labels ``model`` and ``version``; GPU series ``gpu_uuid``.
  The vLLM backend (``src/utils/metrics.py`` at r25.11 of triton-inference-server/vllm_backend)
  adds its own ``vllm:`` families to the same ``/metrics`` when the model config sets
  ``REPORT_CUSTOM_METRICS``; labels ``model`` and ``version``.
- **kube-state-metrics 2.20.0** (chart 8.4.0, a dependency of kube-prometheus-stack 88.5.3):
  ``docs/metrics/workload/pod-metrics.md`` and ``deployment-metrics.md`` at tag v2.20.0.
- **Knative Serving 1.21.3** (``engine: kserve``): OpenTelemetry instruments of the autoscaler
  (``pkg/reconciler/autoscaling/kpa/metrics.go``) and activator
  (``pkg/activator/handler/metrics.go``) at tag knative-v1.21.3 of knative/serving, exported
  for Prometheus with ``otlptranslator.UnderscoreEscapingWithSuffixes``
  (``vendor/knative.dev/pkg/observability/metrics/prometheus_enabled.go``): dots become
  underscores and units in braces add no suffix (``kn.revision.pods.requested`` ->
  ``kn_revision_pods_requested``). Labels ``k8s_namespace_name``, ``kn_service_name``,
  ``kn_revision_name``; the platform's scrape adds the deployment's label.
- **LMCache 0.5.6** (``versions.LMCACHE_VERSION``, in a vLLM server with ``kv_cache``):
  ``lmcache/observability.py`` of the ``lmcache`` wheel on PyPI, recorded in the engine's
  worker process through Prometheus' multiprocess files, which the server's ``/metrics``
  serves when ``PROMETHEUS_MULTIPROC_DIR`` is set for both (:mod:`eks_inference.charts.
  kv_offload`).
"""

from __future__ import annotations

import functools
import re

from eks_inference.metric_types import Kind as Kind
from eks_inference.metric_types import Metric as Metric
from eks_inference.metric_types import Source as Source

VLLM = Source(
    "vLLM",
    "0.34.0 (GPU; 0.29.0 in Ray LLM) and 0.16.0 (Neuron)",
    "vllm/v1/metrics/loggers.py (PrometheusStatLogger) of each wheel on PyPI",
)
RAY = Source("Ray Serve", "2.60.0", "ray/serve/_private/{router,replica,deployment_state}.py")
DCGM = Source(
    "DCGM exporter", "4.8.2 (4.5.3-4.8.2)", "etc/default-counters.csv at NVIDIA/dcgm-exporter"
)
NEURON_MONITOR = Source(
    "neuron-monitor",
    "neuron-monitor-prometheus.py (aws-neuron-tools)",
    "aws-neuron-sdk src/examples/neuron-monitor/neuron-monitor-grafana.json and the "
    "neuron-monitor user guide",
)
KUBE_STATE_METRICS = Source(
    "kube-state-metrics", "2.20.0", "docs/metrics/workload/{pod,deployment}-metrics.md"
)
KNATIVE = Source(
    "Knative Serving",
    "1.21.3",
    "pkg/reconciler/autoscaling/kpa/metrics.go, pkg/activator/handler/metrics.go",
)

# vLLM's engine metrics (the standalone server's /metrics).
VLLM_REQUESTS_RUNNING = Metric(
    "vllm:num_requests_running", Kind.GAUGE, VLLM, "requests in the engine's running batch"
)
VLLM_REQUESTS_WAITING = Metric(
    "vllm:num_requests_waiting", Kind.GAUGE, VLLM, "requests queued for a batch slot"
)
VLLM_KV_CACHE_USAGE = Metric(
    "vllm:kv_cache_usage_perc", Kind.GAUGE, VLLM, "share of KV-cache blocks in use, 0 to 1"
)
VLLM_TIME_TO_FIRST_TOKEN = Metric(
    "vllm:time_to_first_token_seconds", Kind.HISTOGRAM, VLLM, "time to first token"
)
VLLM_INTER_TOKEN_LATENCY = Metric(
    "vllm:inter_token_latency_seconds", Kind.HISTOGRAM, VLLM, "time between output tokens"
)
VLLM_E2E_LATENCY = Metric(
    "vllm:e2e_request_latency_seconds", Kind.HISTOGRAM, VLLM, "request latency, end to end"
)
VLLM_PROMPT_TOKENS = Metric("vllm:prompt_tokens", Kind.COUNTER, VLLM, "prefill tokens processed")
VLLM_GENERATION_TOKENS = Metric("vllm:generation_tokens", Kind.COUNTER, VLLM, "tokens generated")
VLLM_PREEMPTIONS = Metric(
    "vllm:num_preemptions", Kind.COUNTER, VLLM, "requests preempted for lack of KV cache"
)
VLLM_METRICS = (
    VLLM_REQUESTS_RUNNING,
    VLLM_REQUESTS_WAITING,
    VLLM_KV_CACHE_USAGE,
    VLLM_TIME_TO_FIRST_TOKEN,
    VLLM_INTER_TOKEN_LATENCY,
    VLLM_E2E_LATENCY,
    VLLM_PROMPT_TOKENS,
    VLLM_GENERATION_TOKENS,
    VLLM_PREEMPTIONS,
)
# With LoRA adapters (GPU vLLM 0.34.0, only when --enable-lora): one series per combination of
# adapters running and waiting (each label a comma-joined list of adapter names) and max_lora,
# set to the time it was last seen; the series of the latest time is the current state.
VLLM_LORA_REQUESTS_INFO = Metric(
    "vllm:lora_requests_info",
    Kind.GAUGE,
    VLLM,
    "adapters with requests running and waiting (labels), as of the time it holds",
)
# Names vLLM no longer emits at the pinned versions; a query on them would read nothing.
# gpu_cache_usage_perc was renamed kv_cache_usage_perc (deprecated in 0.9, removed later);
# time_per_output_token_seconds became inter_token_latency_seconds.
REMOVED_VLLM_METRICS = frozenset(
    {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"}
)

# Ray's exporter prefix and the characters Ray metric names may hold.
RAY_PREFIX = "ray_"
_RAY_NAME_DISALLOWED = re.compile(r"[^a-zA-Z0-9_]")


def ray_exported(metric: Metric) -> Metric:
    """``metric`` as it leaves a Ray node when vLLM records it through Ray's stat logger."""
    name = RAY_PREFIX + _RAY_NAME_DISALLOWED.sub("_", metric.name)
    source = Source(
        "vLLM in Ray Serve LLM",
        f"{metric.source.version}; Ray 2.60.0",
        "vllm/v1/metrics/ray_wrappers.py (RayPrometheusStatLogger) through Ray's exporter",
    )
    return Metric(name, metric.kind, source, metric.meaning)


RAY_VLLM_METRICS = tuple(ray_exported(m) for m in VLLM_METRICS)

# Ray Serve's own metrics: routers (in every proxy and handle) and the controller (head).
SERVE_QUEUED = Metric(
    "ray_serve_deployment_queued_queries",
    Kind.GAUGE,
    RAY,
    "requests waiting in routers to be assigned a replica",
)
SERVE_ONGOING = Metric(
    "ray_serve_num_ongoing_requests_at_replicas",
    Kind.GAUGE,
    RAY,
    "requests assigned to replicas and not finished",
)
SERVE_REPLICAS_HEALTHY = Metric(
    "ray_serve_deployment_replica_healthy",
    Kind.GAUGE,
    RAY,
    "healthy replicas of a Serve deployment (the controller's count)",
)
SERVE_TARGET_REPLICAS = Metric(
    "ray_serve_autoscaling_target_replicas",
    Kind.GAUGE,
    RAY,
    "replicas Serve's autoscaler is trying to reach",
)
SERVE_PROCESSING_LATENCY = Metric(
    "ray_serve_deployment_processing_latency_ms",
    Kind.HISTOGRAM,
    RAY,
    "time a replica spends on a request, in milliseconds",
)
SERVE_REQUESTS = Metric(
    "ray_serve_deployment_request_counter", Kind.COUNTER, RAY, "requests a replica processed"
)
SERVE_METRICS = (
    SERVE_QUEUED,
    SERVE_ONGOING,
    SERVE_REPLICAS_HEALTHY,
    SERVE_TARGET_REPLICAS,
    SERVE_PROCESSING_LATENCY,
    SERVE_REQUESTS,
)

TRITON = Source("Triton", "25.11 (server 2.63.0)", "src/metrics.cc of triton-inference-server/core")
TRITON_VLLM = Source(
    "Triton vLLM backend",
    "r25.11 (vLLM 0.11.0)",
    "src/utils/metrics.py of triton-inference-server/vllm_backend",
)
TRITON_REQUEST_SUCCESS = Metric(
    "nv_inference_request_success", Kind.UNSUFFIXED_COUNTER, TRITON, "requests that succeeded"
)
TRITON_REQUEST_FAILURE = Metric(
    "nv_inference_request_failure", Kind.UNSUFFIXED_COUNTER, TRITON, "requests that failed"
)
TRITON_QUEUE_DURATION = Metric(
    "nv_inference_queue_duration_us",
    Kind.UNSUFFIXED_COUNTER,
    TRITON,
    "cumulative microseconds requests waited in the scheduling queue",
)
TRITON_COMPUTE_DURATION = Metric(
    "nv_inference_compute_infer_duration_us",
    Kind.UNSUFFIXED_COUNTER,
    TRITON,
    "cumulative microseconds the backends spent executing requests",
)
TRITON_PENDING_REQUESTS = Metric(
    "nv_inference_pending_request_count",
    Kind.GAUGE,
    TRITON,
    "requests awaiting execution by a backend",
)
TRITON_GPU_UTILIZATION = Metric(
    "nv_gpu_utilization", Kind.GAUGE, TRITON, "GPU utilization, 0 to 1 (label gpu_uuid)"
)
TRITON_GPU_MEMORY_USED = Metric(
    "nv_gpu_memory_used_bytes", Kind.GAUGE, TRITON, "GPU memory used, bytes (label gpu_uuid)"
)
TRITON_GPU_MEMORY_TOTAL = Metric(
    "nv_gpu_memory_total_bytes", Kind.GAUGE, TRITON, "GPU memory, bytes (label gpu_uuid)"
)
TRITON_VLLM_PROMPT_TOKENS = Metric(
    "vllm:prompt_tokens_total", Kind.COUNTER, TRITON_VLLM, "prefill tokens processed"
)
TRITON_VLLM_GENERATION_TOKENS = Metric(
    "vllm:generation_tokens_total", Kind.COUNTER, TRITON_VLLM, "tokens generated"
)
TRITON_VLLM_TIME_TO_FIRST_TOKEN = Metric(
    "vllm:time_to_first_token_seconds", Kind.HISTOGRAM, TRITON_VLLM, "time to first token"
)
# The backend keeps the name vLLM itself has since replaced (inter_token_latency_seconds).
TRITON_VLLM_TIME_PER_OUTPUT_TOKEN = Metric(
    "vllm:time_per_output_token_seconds", Kind.HISTOGRAM, TRITON_VLLM, "time per output token"
)
TRITON_VLLM_E2E_LATENCY = Metric(
    "vllm:e2e_request_latency_seconds", Kind.HISTOGRAM, TRITON_VLLM, "request latency, end to end"
)
TRITON_METRICS = (
    TRITON_REQUEST_SUCCESS,
    TRITON_REQUEST_FAILURE,
    TRITON_QUEUE_DURATION,
    TRITON_COMPUTE_DURATION,
    TRITON_PENDING_REQUESTS,
    TRITON_GPU_UTILIZATION,
    TRITON_GPU_MEMORY_USED,
    TRITON_GPU_MEMORY_TOTAL,
    TRITON_VLLM_PROMPT_TOKENS,
    TRITON_VLLM_GENERATION_TOKENS,
    TRITON_VLLM_TIME_TO_FIRST_TOKEN,
    TRITON_VLLM_TIME_PER_OUTPUT_TOKEN,
    TRITON_VLLM_E2E_LATENCY,
)

DCGM_GPU_UTIL = Metric("DCGM_FI_DEV_GPU_UTIL", Kind.GAUGE, DCGM, "GPU utilization, percent")
DCGM_FB_USED = Metric("DCGM_FI_DEV_FB_USED", Kind.GAUGE, DCGM, "GPU memory used, MiB")
DCGM_FB_FREE = Metric("DCGM_FI_DEV_FB_FREE", Kind.GAUGE, DCGM, "GPU memory free, MiB")
DCGM_METRICS = (DCGM_GPU_UTIL, DCGM_FB_USED, DCGM_FB_FREE)

NEURONCORE_UTILIZATION = Metric(
    "neuroncore_utilization_ratio",
    Kind.GAUGE,
    NEURON_MONITOR,
    "NeuronCore utilization, 0 to 1, per core (label neuroncore)",
)
NEURON_RUNTIME_MEMORY = Metric(
    "neuron_runtime_memory_used_bytes",
    Kind.GAUGE,
    NEURON_MONITOR,
    "memory the Neuron runtime uses (label memory_location: host or neuron_device)",
)
NEURON_EXECUTION_ERRORS = Metric(
    "execution_errors", Kind.COUNTER, NEURON_MONITOR, "failed executions (label error_type)"
)
NEURON_MONITOR_METRICS = (NEURONCORE_UTILIZATION, NEURON_RUNTIME_MEMORY, NEURON_EXECUTION_ERRORS)

KSM_POD_READY = Metric(
    "kube_pod_status_ready", Kind.GAUGE, KUBE_STATE_METRICS, "pod Ready condition (label condition)"
)
KSM_CONTAINER_RUNNING = Metric(
    "kube_pod_container_status_running",
    Kind.GAUGE,
    KUBE_STATE_METRICS,
    "1 while a container runs",
)
KSM_POD_LABELS = Metric(
    "kube_pod_labels",
    Kind.GAUGE,
    KUBE_STATE_METRICS,
    "pod labels allowed by --metric-labels-allowlist, as label_<name>",
)
KSM_POD_INFO = Metric("kube_pod_info", Kind.GAUGE, KUBE_STATE_METRICS, "pod's node and more")
KSM_DEPLOYMENT_AVAILABLE = Metric(
    "kube_deployment_status_replicas_available",
    Kind.GAUGE,
    KUBE_STATE_METRICS,
    "available replicas of a Deployment",
)
KSM_DEPLOYMENT_SPEC_REPLICAS = Metric(
    "kube_deployment_spec_replicas", Kind.GAUGE, KUBE_STATE_METRICS, "desired replicas"
)
KUBE_STATE_METRICS_METRICS = (
    KSM_POD_READY,
    KSM_CONTAINER_RUNNING,
    KSM_POD_LABELS,
    KSM_POD_INFO,
    KSM_DEPLOYMENT_AVAILABLE,
    KSM_DEPLOYMENT_SPEC_REPLICAS,
)

# Knative Serving's autoscaler (per revision) and activator, for engine: kserve.
KNATIVE_PODS_REQUESTED = Metric(
    "kn_revision_pods_requested",
    Kind.GAUGE,
    KNATIVE,
    "pods the autoscaler asked Kubernetes for (0 while scaled to zero)",
)
KNATIVE_PODS_READY = Metric(
    "kn_revision_pods_count",
    Kind.GAUGE,
    KNATIVE,
    "pods ready to serve (the autoscaler observes its ready count under this name; 0 at zero)",
)
KNATIVE_PODS_NOT_READY = Metric(
    "kn_revision_pods_not_ready_count",
    Kind.GAUGE,
    KNATIVE,
    "pods allocated but not ready: starting, pulling or loading the model",
)
KNATIVE_ACTIVATOR_CONCURRENCY = Metric(
    "kn_revision_request_concurrency",
    Kind.GAUGE,
    KNATIVE,
    "requests the activator holds or proxies (all of them while no replica is ready)",
)
KNATIVE_METRICS = (
    KNATIVE_PODS_REQUESTED,
    KNATIVE_PODS_READY,
    KNATIVE_PODS_NOT_READY,
    KNATIVE_ACTIVATOR_CONCURRENCY,
)

# NVIDIA Dynamo 1.6.1 (engine: dynamo). The frontend's HTTP service metrics are named
# `dynamo_frontend_<name>` (name_prefix.FRONTEND and frontend_service in dynamo/prometheus_names.py
# of the ai-dynamo==1.6.1 wheel, generated from lib/runtime/src/metrics/prometheus_names.rs),
# served on its HTTP port at /metrics. The vLLM workers re-export vLLM 0.31.0's own metrics
# (prefixes "vllm:" and "lmcache:", dynamo/vllm/main.py) on their system port; NIXL's transfer
# times are vLLM's (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py of the vllm
# 0.31.0 wheel), recorded by the decode workers that pull the KV cache.
DYNAMO = Source(
    "NVIDIA Dynamo",
    "1.6.1",
    "dynamo/prometheus_names.py (name_prefix, frontend_service) of the ai-dynamo wheel",
)
VLLM_NIXL = Source(
    "vLLM",
    "0.31.0 (Dynamo's workers)",
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py",
)
DYNAMO_FRONTEND_INFLIGHT = Metric(
    "dynamo_frontend_inflight_requests", Kind.GAUGE, DYNAMO, "requests the frontend is serving"
)
DYNAMO_FRONTEND_QUEUED = Metric(
    "dynamo_frontend_queued_requests",
    Kind.GAUGE,
    DYNAMO,
    "requests waiting in the frontend for their first token",
)
DYNAMO_FRONTEND_TTFT = Metric(
    "dynamo_frontend_time_to_first_token_seconds",
    Kind.HISTOGRAM,
    DYNAMO,
    "time to first token at the frontend (routing, prefill and the KV transfer included)",
)
DYNAMO_FRONTEND_ITL = Metric(
    "dynamo_frontend_inter_token_latency_seconds",
    Kind.HISTOGRAM,
    DYNAMO,
    "time between output tokens at the frontend",
)
DYNAMO_FRONTEND_REQUEST_DURATION = Metric(
    "dynamo_frontend_request_duration_seconds",
    Kind.HISTOGRAM,
    DYNAMO,
    "request latency at the frontend, end to end",
)
VLLM_NIXL_TRANSFER_TIME = Metric(
    "vllm:nixl_xfer_time_seconds",
    Kind.HISTOGRAM,
    VLLM_NIXL,
    "duration of one NIXL KV-cache transfer from a prefill worker",
)
DYNAMO_METRICS = (
    DYNAMO_FRONTEND_INFLIGHT,
    DYNAMO_FRONTEND_QUEUED,
    DYNAMO_FRONTEND_TTFT,
    DYNAMO_FRONTEND_ITL,
    DYNAMO_FRONTEND_REQUEST_DURATION,
    VLLM_NIXL_TRANSFER_TIME,
)
# The endpoint picker and its proxy (``routing``): the EPP's counters and the prefix indexer's
# histogram (labels ``status``; ``plugin_name``, ``plugin_type``), and Envoy's per-cluster
# request counter, exported at /stats/prometheus with the cluster's name as the tag
# ``envoy_cluster_name`` (Envoy's default tag extraction, cluster.<name>.upstream_rq_total).
LLM_D_ROUTER = Source(
    "llm-d-router endpoint picker",
    "v0.10.0",
    "pkg/epp/metrics/llm_d_router_metrics.go and pkg/epp/framework/plugins/requestcontrol/"
    "dataproducer/approximateprefix/metrics.go at tag v0.10.0 of llm-d/llm-d-router",
)
ENVOY = Source(
    "Envoy",
    "1.33.2",
    "cluster manager statistics (upstream_rq_total) and the admin /stats/prometheus output",
)
EPP_SCHEDULER_ATTEMPTS = Metric(
    "llm_d_epp_scheduler_attempts_total",
    Kind.COUNTER,
    LLM_D_ROUTER,
    "the picker's scheduling attempts, by status (success or failure)",
)
EPP_PREFIX_HIT_RATIO = Metric(
    "llm_d_epp_prefix_indexer_hit_ratio",
    Kind.HISTOGRAM,
    LLM_D_ROUTER,
    "share of a prompt's prefix the picker found cached on the replica it looked up, 0 to 1",
)
ENVOY_CLUSTER_REQUESTS = Metric(
    "envoy_cluster_upstream_rq_total",
    Kind.COUNTER,
    ENVOY,
    "requests the proxy sent to one of its clusters (envoy_cluster_name)",
)
ROUTING_METRICS = (EPP_SCHEDULER_ATTEMPTS, EPP_PREFIX_HIT_RATIO, ENVOY_CLUSTER_REQUESTS)

LMCACHE = Source(
    "LMCache",
    "0.5.6 (versions.LMCACHE_VERSION)",
    "lmcache/observability.py (PrometheusLogger) of the lmcache wheel on PyPI",
)
# LMCache in a vLLM server with kv_cache; labels model_name, worker_id, role and
# served_model_name. 0.5.6 counts hits over its tiers together: no series says which tier hit.
LMCACHE_REQUESTED_TOKENS = Metric(
    "lmcache:num_requested_tokens", Kind.COUNTER, LMCACHE, "prompt tokens asked of LMCache"
)
LMCACHE_HIT_TOKENS = Metric(
    "lmcache:num_hit_tokens", Kind.COUNTER, LMCACHE, "of those, tokens read back from a tier"
)
LMCACHE_CPU_TIER_BYTES = Metric(
    "lmcache:local_cache_usage", Kind.GAUGE, LMCACHE, "bytes the CPU tier holds"
)
LMCACHE_DISK_TIER_BYTES = Metric(
    "lmcache:local_storage_usage", Kind.GAUGE, LMCACHE, "bytes the local disk tier holds"
)
LMCACHE_METRICS = (
    LMCACHE_REQUESTED_TOKENS,
    LMCACHE_HIT_TOKENS,
    LMCACHE_CPU_TIER_BYTES,
    LMCACHE_DISK_TIER_BYTES,
)

ALL_METRICS: tuple[Metric, ...] = (
    *VLLM_METRICS,
    VLLM_LORA_REQUESTS_INFO,
    *RAY_VLLM_METRICS,
    *SERVE_METRICS,
    *DCGM_METRICS,
    *NEURON_MONITOR_METRICS,
    *KUBE_STATE_METRICS_METRICS,
    *KNATIVE_METRICS,
    *TRITON_METRICS,
    *DYNAMO_METRICS,
    *ROUTING_METRICS,
    *LMCACHE_METRICS,
)
KNOWN_SERIES: frozenset[str] = frozenset(s for m in ALL_METRICS for s in m.series)
"""Every series name an expression of this project may read."""

# PromQL words that look like metric names but are not: keywords, aggregation operators and
# their modifiers. Functions are recognised by the parenthesis that follows them.
_PROMQL_WORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "atan2",
        "inf",
        "nan",
        "sum",
        "avg",
        "min",
        "max",
        "count",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "group",
    }
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_NUMBER_UNIT = re.compile(r"\b\d+(?:\.\d+)?(?:[eE][-+]?\d+)?[a-z]*\b")


# Every chart's alerts, dashboards and scalers check the same few dozen expressions.
@functools.lru_cache(maxsize=4096)
def metric_names(expr: str) -> frozenset[str]:
    """The metric names a PromQL expression reads.

    Enough of PromQL for the expressions this project writes: strings, label matchers,
    range and subquery brackets, grouping label lists and numbers (with duration units) are
    removed; what remains is an identifier per metric, function or keyword, and functions
    are the identifiers followed by ``(``.
    """
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _NUMBER_UNIT.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        word, call = match.group(1), match.group(2)
        if call or word in _PROMQL_WORDS:
            continue
        names.add(word)
    return frozenset(names)


def unknown_metrics(expr: str) -> frozenset[str]:
    """Metric names ``expr`` reads that no pinned emitter exposes (empty when all are known)."""
    return metric_names(expr) - KNOWN_SERIES


def require_known(expr: str) -> str:
    """``expr``, after checking that every metric it reads is one the pinned versions emit."""
    unknown = unknown_metrics(expr)
    if unknown:
        raise ValueError(
            f"PromQL reads metrics no pinned component emits: {sorted(unknown)} in {expr!r}; "
            "use names listed in eks_inference.metrics"
        )
    return expr
