"""The observability add-ons in the synthesized reference app: pinned, placed on their pools,
bounded, and applied before the deployments' monitors and autoscalers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from eks_inference import names, versions
from eks_inference.constructs.addons.observability import STORAGE_CLASS, ObservabilityOptions
from eks_inference.observability.signals import KSM_POD_LABELS
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REFERENCE_PLATFORM
from tests.helpers.synthesis import STACK_NAME, Synthesized

pytestmark = [pytest.mark.synth, pytest.mark.xdist_group("synth")]

PLATFORM = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
SYSTEM = PLATFORM.system_pool
GPU = next(p for p in PLATFORM.node_pools if p.name == "g6e")
NEURON = next(p for p in PLATFORM.node_pools if p.name == "inf2")
ON_SYSTEM = {"nodeSelector": SYSTEM.node_selector(), "tolerations": SYSTEM.tolerations()}


def _chart(reference: Synthesized, name: str) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (logical_id, r)
        for logical_id, r in reference.resources("Custom::AWSCDK-EKS-HelmChart").items()
        if r["Properties"]["Chart"] == name
    ]
    return found


def _values(chart: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = json.loads(chart["Properties"]["Values"])
    return values


def test_charts_are_pinned_in_the_versions_module(reference: Synthesized) -> None:
    for pinned in (
        versions.KUBE_PROMETHEUS_STACK_CHART,
        versions.DCGM_EXPORTER_CHART,
        versions.KEDA_CHART,
    ):
        _, chart = _chart(reference, pinned.chart)
        assert chart["Properties"]["Version"] == pinned.version
        assert chart["Properties"]["Repository"] == pinned.repository


def test_prometheus_and_grafana_run_on_the_system_pool_with_bounded_storage(
    reference: Synthesized,
) -> None:
    _, chart = _chart(reference, versions.KUBE_PROMETHEUS_STACK_CHART.chart)
    assert chart["Properties"]["Namespace"] == names.MONITORING_NAMESPACE
    values = _values(chart)
    spec = values["prometheus"]["prometheusSpec"]
    for placed in (
        spec,
        values["prometheusOperator"],
        values["alertmanager"]["alertmanagerSpec"],
        values["grafana"],
        values["kube-state-metrics"],
    ):
        assert {k: placed[k] for k in ON_SYSTEM} == ON_SYSTEM
    defaults = ObservabilityOptions()
    assert (spec["retention"], spec["retentionSize"]) == (
        defaults.retention,
        defaults.retention_size,
    )
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == STORAGE_CLASS
    assert claim["resources"]["requests"]["storage"] == defaults.prometheus_volume
    # Monitors and rules from every namespace.
    assert spec["podMonitorSelectorNilUsesHelmValues"] is False
    assert spec["ruleSelectorNilUsesHelmValues"] is False
    assert values["grafana"]["sidecar"]["dashboards"]["label"] == names.GRAFANA_DASHBOARD_LABEL
    assert values["grafana"]["adminPassword"] == ""
    assert values["fullnameOverride"] == names.KUBE_PROMETHEUS_STACK_NAME
    assert values["kube-state-metrics"]["metricLabelsAllowlist"] == [
        f"pods=[{','.join(KSM_POD_LABELS)}]"
    ]


def test_grafana_reads_dashboards_only_from_the_platforms_namespaces(
    reference: Synthesized,
) -> None:
    logical_id, chart = _chart(reference, versions.KUBE_PROMETHEUS_STACK_CHART.chart)
    grafana = _values(chart)["grafana"]
    # The Grafana chart (12.11.1, kube-prometheus-stack 88.5.3's) joins the list with commas
    # into the sidecar's NAMESPACE, and with rbac.namespaced creates a Role in each of
    # rbac.namespaces and its own namespace instead of a ClusterRole.
    assert grafana["sidecar"]["dashboards"]["searchNamespace"] == ["inference", "monitoring"]
    assert grafana["rbac"] == {"namespaced": True, "namespaces": ["inference"]}
    # Those Roles need the inference namespace to exist when the chart is installed.
    (namespace,) = [
        k
        for k, r in reference.resources("Custom::AWSCDK-EKS-KubernetesResource").items()
        if '"kind":"Namespace"' in str(r["Properties"]["Manifest"])
        and '"name":"inference"' in str(r["Properties"]["Manifest"])
    ]
    assert namespace in reference.templates[STACK_NAME]["Resources"][logical_id]["DependsOn"]


def test_dcgm_exporter_runs_on_the_gpu_pool_with_pod_attribution(reference: Synthesized) -> None:
    _, chart = _chart(reference, versions.DCGM_EXPORTER_CHART.chart)
    values = _values(chart)
    terms = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    (term,) = terms
    assert {e["key"]: e["values"] for e in term["matchExpressions"]} == {
        k: [v] for k, v in GPU.labels.items()
    }
    for toleration in GPU.tolerations():
        assert toleration in values["tolerations"]
    assert values["serviceMonitor"]["honorLabels"] is True
    assert values["image"]["tag"] == versions.DCGM_EXPORTER_IMAGE_TAG


def test_keda_runs_on_the_system_pool(reference: Synthesized) -> None:
    _, chart = _chart(reference, versions.KEDA_CHART.chart)
    assert chart["Properties"]["Namespace"] == names.KEDA_NAMESPACE
    values = _values(chart)
    assert {k: values[k] for k in ON_SYSTEM} == ON_SYSTEM


def test_ebs_csi_driver_has_its_own_pod_identity(reference: Synthesized) -> None:
    (addon,) = [
        a
        for a in reference.resources("AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == "aws-ebs-csi-driver"
    ]
    assert addon["Properties"]["AddonVersion"] == versions.EBS_CSI_ADDON_VERSION
    (association,) = addon["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "ebs-csi-controller-sa"


def _manifests(template: dict[str, Any]) -> dict[str, str]:
    return {
        logical_id: json.dumps(r["Properties"]["Manifest"])
        for logical_id, r in template["Resources"].items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    }


def test_neuron_monitor_runs_on_the_neuron_pool_after_the_stack(reference: Synthesized) -> None:
    main = reference.templates[STACK_NAME]
    (logical_id,) = [k for k, m in _manifests(main).items() if "neuron-monitor" in m]
    objects = json.loads(main["Resources"][logical_id]["Properties"]["Manifest"])
    kinds = {o["kind"]: o for o in objects}
    assert set(kinds) == {"DaemonSet", "PodMonitor"}
    pod = kinds["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == NEURON.node_selector()
    assert pod["tolerations"] == NEURON.tolerations()
    kps, _ = _chart(reference, versions.KUBE_PROMETHEUS_STACK_CHART.chart)
    assert kps in main["Resources"][logical_id]["DependsOn"]


def test_each_deployment_is_monitored_after_the_operator_installs_its_crds(
    reference: Synthesized,
) -> None:
    kps, _ = _chart(reference, versions.KUBE_PROMETHEUS_STACK_CHART.chart)
    main = reference.templates[STACK_NAME]
    for spec in PLATFORM.deployments:
        nested = reference.nested(f"{STACK_NAME}/Deployment-{spec.name}")
        monitors = [m for m in _manifests(nested).values() if "PodMonitor" in m]
        assert len(monitors) == 1, spec.name
        assert "PrometheusRule" in monitors[0]
        assert names.GRAFANA_DASHBOARD_LABEL in monitors[0]
        (stack,) = [
            r
            for r in main["Resources"].values()
            if r["Type"] == "AWS::CloudFormation::Stack"
            and f"Deployment-{spec.name}" in json.dumps(r.get("Metadata", {}))
        ]
        assert kps in stack["DependsOn"], spec.name
