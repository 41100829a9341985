"""Monitors scrape pods that exist on ports they declare; rules read known metrics and parse;
every monitoring object is valid for its CRD (Prometheus Operator 0.93.1) or Kubernetes 1.35."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from eks_inference.catalog import Accelerator
from eks_inference.charts.monitoring import exporters_chart, neuron_pools
from eks_inference.metrics import unknown_metrics
from eks_inference.names import GRAFANA_DASHBOARD_LABEL, INFERENCE_NAMESPACE
from eks_inference.observability.observed import observed_engine
from eks_inference.observability.signals import DEPLOYMENT_LABEL, signals_of
from eks_inference.serve.api_key_auth import METRICS_PATH
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import KUBERNETES_VERSION
from tests.helpers.checks import found
from tests.helpers.objects import crd_validator, of_kind, schema_errors
from tests.helpers.observed import (
    AUTOSCALED,
    PODMONITOR_CRD,
    PROMETHEUSRULE_CRD,
    PROMTOOL,
    PROMTOOL_MISSING,
    autoscaled_objects,
    pod_label_from_meta,
    pods,
    promtool_check_rules,
    sanitized,
    selects,
)
from tests.helpers.rendered import Rendered

ALERTS = {
    "InferenceQueueGrowing",
    "InferenceKVCacheNearlyFull",
    "InferenceNoReadyReplica",
    "InferenceModelLoadStuck",
}


def _platforms(rendered: Rendered) -> list[tuple[PlatformSpec, dict[str, list[dict[str, Any]]]]]:
    return [(rendered.platform, rendered.objects), (AUTOSCALED, autoscaled_objects())]


def _exporters(platform: PlatformSpec) -> list[dict[str, Any]]:
    return list(exporters_chart(neuron_pools(platform.node_pools)).objects)


def _check_monitor(monitor: dict[str, Any], objects: list[dict[str, Any]]) -> list[Any]:
    """The pods ``monitor`` selects among ``objects``; each declares every scraped port."""
    namespace = monitor["metadata"]["namespace"]
    selected = [
        p
        for p in pods(objects)
        if p.namespace == namespace and selects(monitor["spec"]["selector"], p.labels)
    ]
    name = monitor["metadata"]["name"]
    assert selected, f"PodMonitor {name} selects no rendered pod"
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        for pod in selected:
            assert endpoint["port"] in pod.port_names, (name, endpoint["port"], pod.port_names)
    return selected


def test_every_deployment_monitor_selects_its_pods_on_a_declared_port(rendered: Rendered) -> None:
    """Each PodMonitor picks at least one pod the charts render, and names a port it has."""
    for platform, objects in _platforms(rendered):
        for spec in platform.deployments:
            monitors = of_kind(objects[spec.name], "PodMonitor")
            assert monitors, spec.name
            covered: list[Any] = []
            for monitor in monitors:
                selected = _check_monitor(monitor, objects[spec.name])
                covered += selected
                # The deployment label comes from a label every selected pod carries.
                (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
                (relabel,) = [
                    r for r in endpoint["relabelings"] if r["targetLabel"] == DEPLOYMENT_LABEL
                ]
                (source,) = relabel["sourceLabels"]
                for pod in selected:
                    values = {sanitized(k): v for k, v in pod.labels.items()}
                    assert values[pod_label_from_meta(source)] == spec.name
            # Every pod of a deployment is scraped: vLLM pods, or Ray head and workers alike.
            assert len(covered) == len(list(pods(objects[spec.name]))), spec.name


def test_monitors_select_no_other_deployments_pods(rendered: Rendered) -> None:
    for platform, objects in _platforms(rendered):
        everything = [o for objs in objects.values() for o in objs]
        for spec in platform.deployments:
            for monitor in of_kind(objects[spec.name], "PodMonitor"):
                selected = [
                    p for p in pods(everything) if selects(monitor["spec"]["selector"], p.labels)
                ]
                for pod in found(selected):
                    assert pod.labels["app.kubernetes.io/instance"] == spec.name


def test_neuron_monitor_runs_on_neuron_pools_only_and_is_scraped(rendered: Rendered) -> None:
    for platform, _ in _platforms(rendered):
        objects = _exporters(platform)
        daemon_sets = of_kind(objects, "DaemonSet")
        neuron = [p for p in platform.node_pools if p.accelerator is Accelerator.NEURON]
        assert len(daemon_sets) == len(neuron)
        for pool, daemon_set in zip(neuron, daemon_sets, strict=True):
            pod = daemon_set["spec"]["template"]["spec"]
            assert pod["nodeSelector"] == pool.node_selector()
            assert pod["tolerations"] == pool.tolerations()
            (container,) = pod["containers"]
            (port,) = container["ports"]
            for probe in ("readinessProbe", "livenessProbe"):
                # The route and port Prometheus scrapes: the exporter answers there once it runs.
                get = container[probe]["httpGet"]
                assert (get["path"], get["port"]) == (METRICS_PATH, port["containerPort"])
            kubernetes_validate.validate(daemon_set, KUBERNETES_VERSION, strict=True)
        if neuron:
            (monitor,) = of_kind(objects, "PodMonitor")
            assert len(_check_monitor(monitor, objects)) == len(neuron)
            (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
            assert endpoint["relabelings"][0]["targetLabel"] == "node"
            assert not schema_errors(crd_validator(PODMONITOR_CRD, "v1"), monitor)


def test_monitoring_objects_validate_against_the_operator_crds(rendered: Rendered) -> None:
    validators = {
        "PodMonitor": crd_validator(PODMONITOR_CRD, "v1"),
        "PrometheusRule": crd_validator(PROMETHEUSRULE_CRD, "v1"),
    }
    seen = set()
    for _, objects in _platforms(rendered):
        for obj in (o for objs in objects.values() for o in objs):
            if obj["kind"] in validators:
                seen.add(obj["kind"])
                assert obj["apiVersion"] == "monitoring.coreos.com/v1"
                assert not schema_errors(validators[obj["kind"]], obj), obj["metadata"]["name"]
    assert seen == set(validators)


def test_dashboards_ship_in_configmaps_grafana_loads(rendered: Rendered) -> None:
    for platform, objects in _platforms(rendered):
        for spec in platform.deployments:
            (config_map,) = [
                o
                for o in of_kind(objects[spec.name], "ConfigMap")
                if o["metadata"]["labels"].get(GRAFANA_DASHBOARD_LABEL) == "1"
            ]
            assert config_map["metadata"]["namespace"] == INFERENCE_NAMESPACE
            assert list(config_map["data"]) == [f"{spec.name}.json"]
            kubernetes_validate.validate(config_map, KUBERNETES_VERSION, strict=True)


def _rules(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (rule,) = of_kind(objects, "PrometheusRule")
    (group,) = rule["spec"]["groups"]
    rules: list[dict[str, Any]] = group["rules"]
    return rules


def test_four_alerts_per_deployment_on_known_metrics_with_budgets(rendered: Rendered) -> None:
    for platform, objects in _platforms(rendered):
        for spec in platform.deployments:
            rules = {r["alert"]: r for r in _rules(objects[spec.name])}
            # Beside the four, the engine's own (vLLM's with adapters: LoraAdaptersWaiting).
            own = {alert.name for alert in observed_engine(spec).own_alerts(spec)}
            assert set(rules) == ALERTS | own, spec.name
            signals = signals_of(spec)
            for rule in rules.values():
                assert not unknown_metrics(rule["expr"]), (spec.name, rule["alert"])
                assert rule["labels"][DEPLOYMENT_LABEL] == spec.name
            assert f"> {signals.kv_cache_alert}" in rules["InferenceKVCacheNearlyFull"]["expr"]
            loading = rules["InferenceModelLoadStuck"]["for"]
            expected = (
                signals.load_budget_seconds
                if spec.engine == "vllm"
                else signals.rollout_budget_seconds
            )
            assert loading == f"{expected}s" == f"{signals.loading_alert_seconds}s"
            no_replica = rules["InferenceNoReadyReplica"]["expr"]
            assert signals.replicas_ready in no_replica
            # A deployment that scales to zero on purpose alerts only when requests wait.
            waits = signals.requests_waiting in no_replica
            assert waits is (spec.scaling.min_replicas == 0), spec.name


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_rule_files_pass_promtool(rendered: Rendered, tmp_path: Path) -> None:
    groups = [
        group
        for _, objects in _platforms(rendered)
        for name in objects
        for rule in of_kind(objects[name], "PrometheusRule")
        for group in rule["spec"]["groups"]
    ]
    result = promtool_check_rules(groups, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    own = sum(
        len(observed_engine(spec).own_alerts(spec))
        for platform, _ in _platforms(rendered)
        for spec in platform.deployments
    )
    assert f"SUCCESS: {4 * len(groups) + own} rules found" in result.stdout
