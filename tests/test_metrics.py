"""The metric allow-list: names as the pinned emitters expose them, and the PromQL name finder."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from eks_inference import metrics, versions
from eks_inference.engines.rayservice.engine import serve_replica_deployment
from eks_inference.metrics import (
    KNOWN_SERIES,
    REMOVED_VLLM_METRICS,
    Kind,
    Metric,
    metric_names,
    ray_exported,
    require_known,
    unknown_metrics,
)
from eks_inference.observability.signals import signals_of
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REPO


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("vllm:num_requests_waiting", {"vllm:num_requests_waiting"}),
        (
            'sum(rate(vllm:generation_tokens_total{inference_deployment="a-b", x=~"y.*"}[2m]))',
            {"vllm:generation_tokens_total"},
        ),
        (
            "histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket"
            "[5m])))",
            {"vllm:time_to_first_token_seconds_bucket"},
        ),
        (
            "avg(a_metric * on(namespace, pod) group_left() max by (namespace, pod) "
            '(kube_pod_labels{label_x="up"}))',
            {"a_metric", "kube_pod_labels"},
        ),
        # Strings that look like names, numbers with exponents, keywords and offsets.
        ('count(up{job="vllm:num_requests_running"} offset 1h) > 1e6 and bool 2', {"up"}),
        ("deriv((sum(x) or vector(0))[10m:30s]) > 0 unless y", {"x", "y"}),
        ("(ceil((sum(r)) / 3) * 12.98) / ((sum(t)) * 3600 > 0) * 1000000", {"r", "t"}),
        ("sum(a) without (instance) + ignoring(job) b", {"a", "b"}),
    ],
)
def test_metric_names_are_found_and_nothing_else(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_series_names_follow_the_prometheus_conventions() -> None:
    source = metrics.VLLM
    assert Metric("c", Kind.COUNTER, source, "").series == ("c_total",)
    assert Metric("c_total", Kind.COUNTER, source, "").series == ("c_total",)
    assert Metric("h", Kind.HISTOGRAM, source, "").series == ("h_bucket", "h_sum", "h_count")
    assert Metric("g", Kind.GAUGE, source, "").series == ("g",)
    with pytest.raises(ValueError, match="histogram"):
        Metric("h", Kind.HISTOGRAM, source, "").one()
    with pytest.raises(ValueError, match="not a histogram"):
        Metric("g", Kind.GAUGE, source, "").bucket()


def test_removed_vllm_metrics_are_not_allowed() -> None:
    """vllm:gpu_cache_usage_perc and time_per_output_token were renamed; using them fails."""
    for name in REMOVED_VLLM_METRICS:
        assert name not in KNOWN_SERIES
        assert unknown_metrics(f"max({name})") == {name}
        with pytest.raises(ValueError, match=re.escape(name)):
            require_known(f"max({name})")
    assert "vllm:kv_cache_usage_perc" in KNOWN_SERIES
    assert "vllm:inter_token_latency_seconds_bucket" in KNOWN_SERIES


def test_ray_exports_vllm_metrics_sanitized_and_prefixed() -> None:
    exported = ray_exported(metrics.VLLM_REQUESTS_WAITING)
    assert exported.name == "ray_vllm_num_requests_waiting"
    assert ray_exported(metrics.VLLM_GENERATION_TOKENS).series == (
        "ray_vllm_generation_tokens_total",
    )
    assert ray_exported(metrics.VLLM_TIME_TO_FIRST_TOKEN).bucket() == (
        "ray_vllm_time_to_first_token_seconds_bucket"
    )


def _ray_source(relative: str) -> str:
    return resources.files("ray").joinpath(relative).read_text(encoding="utf-8")


def test_serve_metrics_are_registered_by_the_pinned_ray() -> None:
    """Each Ray Serve name, less Ray's ``ray_`` prefix, is registered in Ray 2.60's source."""
    sources = "".join(
        _ray_source(f"serve/_private/{module}.py")
        for module in ("router", "replica", "deployment_state", "autoscaling_state")
    )
    for metric in metrics.SERVE_METRICS:
        registered = metric.name.removeprefix(metrics.RAY_PREFIX)
        assert f'"{registered}"' in sources, metric.name
    recorder = _ray_source("_private/telemetry/open_telemetry_metric_recorder.py")
    assert 'NAMESPACE = "ray"' in recorder
    assert 'name=f"{NAMESPACE}_{name}"' in recorder


def test_ray_serve_llm_names_its_replica_deployment_as_the_signals_do() -> None:
    """The Serve deployment the replica queries select is the one Ray Serve LLM 2.60 builds."""
    builder = _ray_source("llm/_internal/serve/core/server/builder.py")
    assert 'name_prefix or f"{deployment_cls.__name__}:"' in builder
    assert 'llm_config.model_id.replace("/", "--").replace(".", "_")' in builder
    platform = PlatformSpec.from_yaml(REPO / "deployments.yaml")
    gpu = next(d for d in platform.deployments if d.engine == "rayservice" and not d.on_neuron)
    assert serve_replica_deployment(gpu) == "LLMServer:Qwen--Qwen2_5-7B-Instruct"


def test_every_signal_of_the_reference_platform_reads_known_metrics() -> None:
    platform = PlatformSpec.from_yaml(REPO / "deployments.yaml")
    for spec in platform.deployments:
        for name, expr in signals_of(spec).queries().items():
            assert not unknown_metrics(expr), (spec.name, name, expr)
            assert metric_names(expr), (spec.name, name)


def test_sources_name_the_pinned_versions() -> None:
    """Each list was read at the version the project pins; a version bump must re-read it."""
    neuron_vllm = versions.NEURON_VLLM_IMAGE.split(":")[1].split("-")[0]
    assert versions.GPU_VLLM_VERSION in metrics.VLLM.version
    assert neuron_vllm in metrics.VLLM.version
    assert metrics.RAY.version == versions.RAY_VERSION
    assert versions.DCGM_EXPORTER_CHART.version in metrics.DCGM.version
    image = metrics.DCGM.version.split("(")[1].rstrip(")")
    assert versions.DCGM_EXPORTER_IMAGE_TAG.startswith(image)
    for metric in metrics.ALL_METRICS:
        assert metric.meaning, metric.name
