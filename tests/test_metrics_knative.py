"""Knative's metric names as the pinned release exports them: each instrument of
``tests/upstream/knative-serving-v1.21.3-metrics.txt`` translated to its Prometheus name the
way the vendored otlptranslator does, against the names :mod:`eks_inference.metrics` lists."""

from __future__ import annotations

import re

import pytest

from eks_inference import metrics, names, versions
from eks_inference.engines.kserve.knative import knative_pod_monitor
from eks_inference.metrics import KNOWN_SERIES, Kind
from eks_inference.specification.cold_start import cold_start
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REPO

EXCERPTS = REPO / "tests" / "upstream" / "knative-serving-v1.21.3-metrics.txt"


def _sections() -> dict[str, str]:
    text = EXCERPTS.read_text()
    parts = re.split(r"^== (\S+)\n", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


SECTIONS = _sections()
NAMER = SECTIONS["vendor/github.com/prometheus/otlptranslator/metric_namer.go"]
UNIT_MAP = dict(re.findall(r'^\s*"([^"]+)":\s*"([^"]*)",', NAMER, flags=re.MULTILINE))
_KINDS = {"Gauge": Kind.GAUGE, "Counter": Kind.COUNTER, "Histogram": Kind.HISTOGRAM}


def _instruments(section: str) -> dict[str, tuple[Kind, str]]:
    """Instrument name -> (Prometheus kind, OpenTelemetry unit), as the section creates them."""
    found = {}
    pattern = r'meter\.(\w+)\(\s*"([^"]+)",.*?WithUnit\("([^"]*)"\)'
    for constructor, name, unit in re.findall(pattern, SECTIONS[section], flags=re.DOTALL):
        (kind,) = (k for suffix, k in _KINDS.items() if constructor.endswith(suffix))
        found[name] = (kind, unit)
    return found


def exported_name(name: str, unit: str, kind: Kind) -> str:
    """otlptranslator's normalizeName with suffixes (UnderscoreEscapingWithSuffixes): name
    tokens of [a-zA-Z0-9:], the unit's suffix unless annotated in braces or already there,
    ``total`` last for counters, ``ratio`` for gauges of unit ``1``."""
    tokens = [t for t in re.split(r"[^a-zA-Z0-9:]+", name) if t]
    main, _, per = unit.partition("/")
    main = main.strip()
    if main and not re.search(r"[{}]", main):
        suffix = UNIT_MAP.get(main, main)
        if suffix and suffix not in tokens:
            tokens.append(suffix)
    assert not per, "no instrument the platform reads has a per-unit"
    if kind is Kind.COUNTER:
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if unit == "1" and kind is Kind.GAUGE:
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    return "_".join(tokens)


def test_the_translation_is_the_one_knative_configures() -> None:
    exporter = SECTIONS["vendor/knative.dev/pkg/observability/metrics/prometheus_enabled.go"]
    assert "otlptranslator.UnderscoreEscapingWithSuffixes" in exporter
    # The rules the port above follows, as the vendored translator writes them.
    assert (
        'strings.ContainsAny(mainUnitOTel, "{}")'
        in SECTIONS["vendor/github.com/prometheus/otlptranslator/unit_namer.go"]
    )
    assert 'append(removeItem(nameTokens, "total"), "total")' in NAMER
    assert UNIT_MAP["s"] == "seconds"
    assert exported_name("http.server.duration", "s", Kind.HISTOGRAM) == (
        "http_server_duration_seconds"
    )


def test_every_knative_metric_the_platform_reads_is_exported_so() -> None:
    instruments = {
        **_instruments("pkg/reconciler/autoscaling/kpa/metrics.go"),
        **_instruments("pkg/activator/handler/metrics.go"),
    }
    exported = {exported_name(n, unit, kind): kind for n, (kind, unit) in instruments.items()}
    assert len(metrics.KNATIVE_METRICS) == 4
    for metric in metrics.KNATIVE_METRICS:
        assert exported.get(metric.name) is metric.kind, metric.name
    assert metrics.KNATIVE.version == versions.KNATIVE_SERVING_VERSION


def test_the_ready_count_is_what_the_autoscaler_observes_as_pods_count() -> None:
    """kn.revision.pods.count is described as allocated pods but observes the ready count."""
    kpa = SECTIONS["pkg/reconciler/autoscaling/kpa/metrics.go"]
    assert "o.ObserveInt64(m.actualPods, int64(m.pc.ready), m.opt)" in kpa
    assert '"kn.revision.pods.count"' in kpa.split("m.actualPods = must(")[1].split("))")[0]
    assert "o.ObserveInt64(m.requestedPods, int64(m.pc.want), m.opt)" in kpa
    assert metrics.KNATIVE_PODS_READY.name == "kn_revision_pods_count"


@pytest.mark.parametrize(
    "section",
    ["pkg/reconciler/autoscaling/kpa/kpa.go", "pkg/activator/handler/concurrency_reporter.go"],
)
def test_the_series_carry_the_labels_the_scrape_relabels(section: str) -> None:
    """The autoscaler's and activator's series carry the namespace and Knative Service, which
    the platform's PodMonitor maps to the deployment's label."""
    keys = dict(
        re.findall(
            r'(\w+Key)\s*=\s*attributekey\.String\("([^"]+)"\)', SECTIONS["pkg/metrics/key.go"]
        )
    )
    used = set(re.findall(r"metrics\.(\w+Key)\.With", SECTIONS[section]))
    labels = {keys[key].replace(".", "_") for key in used}
    (relabel,) = knative_pod_monitor()["spec"]["podMetricsEndpoints"][0]["metricRelabelings"]
    assert set(relabel["sourceLabels"]) <= labels
    assert relabel["sourceLabels"] == ["k8s_namespace_name", "kn_service_name"]
    assert relabel["regex"].startswith(f"{names.INFERENCE_NAMESPACE};")


def test_the_activators_request_histogram_cannot_time_a_cold_start() -> None:
    """Why the platform reads the autoscaler's pod counts for cold starts: the activator's
    request duration histogram tops out at 10 s, below every planned cold start."""
    handler = SECTIONS["vendor/go.opentelemetry.io/otel/semconv/v1.37.0/httpconv/metric.go"]
    assert '"http.server.request.duration"' in handler
    assert 'metric.WithUnit("s")' in handler
    name = exported_name("http.server.request.duration", "s", Kind.HISTOGRAM)
    assert name == "http_server_request_duration_seconds"
    assert f"{name}_bucket" not in KNOWN_SERIES
    server = SECTIONS[
        "vendor/go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp/internal/semconv/"
        "server.go"
    ]
    bounds = [float(b) for b in re.findall(r"\d+(?:\.\d+)?", server.split("Boundaries(")[1])]
    example = PlatformSpec.from_yaml(REPO / "examples" / "kserve-platform.yaml")
    assert max(bounds) == 10
    for spec in example.deployments:
        assert cold_start(spec).total_seconds > 10 * max(bounds)
    assert "otelhttp.WithMeterProvider(mp)" in SECTIONS["cmd/activator/main.go"]
    # While spare capacity is below this many requests, the activator proxies warm traffic.
    assert "TargetBurstCapacity:           211," in SECTIONS["pkg/autoscaler/config/config.go"]
