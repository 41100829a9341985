"""The synth benchmark's peer: given the reference platform as the project defines it, pinned.

The peer itself is TypeScript and is synthesized by ``make bench`` only (it needs its own npm
install); these tests hold what it is given: every manifest ``eks-inference manifests`` wrote,
each once and in order, the project's own pinned versions and node pools, and exact versions
of its npm packages.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from bench.peer import (
    ACKNOWLEDGED,
    MANIFESTS,
    MANIFESTS_INDEX,
    PEER,
    REFERENCE_PLATFORM,
    reference_facts,
)
from eks_inference import names, versions
from eks_inference.specification.node_pools import system_pool_of
from eks_inference.specification.platform import PlatformSpec

EXACT_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def _platform() -> PlatformSpec:
    return PlatformSpec.from_yaml(REFERENCE_PLATFORM)


def _indexed() -> list[str]:
    lines = MANIFESTS_INDEX.read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def test_every_manifest_is_applied_once() -> None:
    facts = reference_facts(_platform())
    applied = facts["platformManifests"] + [
        file for deployment in facts["deployments"] for file in deployment["manifests"]
    ]
    assert sorted(applied) == sorted(_indexed())
    assert facts["platformManifests"] == ["api-key.yaml", "exporters.yaml", "namespace.yaml"]
    assert Path(facts["manifestsDir"]) == MANIFESTS.resolve()


def test_each_deployment_is_applied_in_chart_order() -> None:
    platform = _platform()
    facts = reference_facts(platform)
    assert [d["name"] for d in facts["deployments"]] == [s.name for s in platform.deployments]
    for deployment in facts["deployments"]:
        files = deployment["manifests"]
        assert files, deployment["name"]
        assert all(f.startswith(deployment["name"] + "/") for f in files)
        numbers = [int(Path(f).name.split("-", 1)[0]) for f in files]
        assert numbers == sorted(numbers) == list(range(1, len(files) + 1))
        for file in files:
            objects = [o for o in yaml.safe_load_all((MANIFESTS / file).read_text()) if o]
            assert objects, file
            assert all("kind" in o for o in objects), file


def test_deployments_read_their_own_prefixes() -> None:
    facts = reference_facts(_platform())
    prefixes = {d["name"]: d["readPrefixes"] for d in facts["deployments"]}
    assert prefixes == {
        "llama3-8b-inf2": ["models/llama-3-8b/", "neuron-artifacts/"],
        "mistral-7b-g6e": ["models/mistral-7b/"],
        "qwen25-7b-g6e": ["models/qwen2.5-7b/"],
    }


def test_the_project_versions_and_namespaces_are_pinned() -> None:
    facts = reference_facts(_platform())
    assert facts["kubernetesVersion"] == versions.KUBERNETES_VERSION
    assert facts["charts"]["kubePrometheusStack"] == {
        "chart": "kube-prometheus-stack",
        "repository": versions.KUBE_PROMETHEUS_STACK_CHART.repository,
        "version": versions.KUBE_PROMETHEUS_STACK_CHART.version,
    }
    pinned = {key: chart["version"] for key, chart in facts["charts"].items()}
    assert pinned == {
        "neuron": versions.NEURON_HELM_CHART.version,
        "nvidiaDevicePlugin": versions.NVIDIA_DEVICE_PLUGIN_CHART.version,
        "kuberay": versions.KUBERAY_OPERATOR_CHART.version,
        "clusterAutoscaler": versions.CLUSTER_AUTOSCALER_CHART.version,
        "kubePrometheusStack": versions.KUBE_PROMETHEUS_STACK_CHART.version,
        "dcgmExporter": versions.DCGM_EXPORTER_CHART.version,
        "keda": versions.KEDA_CHART.version,
        "awsLoadBalancerController": versions.AWS_LOAD_BALANCER_CONTROLLER_CHART.version,
        "externalSecrets": versions.EXTERNAL_SECRETS_CHART.version,
    }
    assert facts["eksAddons"] == {
        "vpc-cni": versions.VPC_CNI_ADDON_VERSION,
        "eks-pod-identity-agent": versions.EKS_POD_IDENTITY_AGENT_ADDON_VERSION,
        "aws-ebs-csi-driver": versions.EBS_CSI_ADDON_VERSION,
    }
    assert facts["namespaces"] == {
        "kuberay": names.KUBERAY_NAMESPACE,
        "monitoring": names.MONITORING_NAMESPACE,
        "keda": names.KEDA_NAMESPACE,
    }


def test_node_pools_system_first_with_labels_and_taints() -> None:
    platform = _platform()
    pools = reference_facts(platform)["nodePools"]
    assert pools[0]["name"] == system_pool_of(platform.node_pools).name
    assert sorted(p["name"] for p in pools) == sorted(p.name for p in platform.node_pools)
    by_name = {p.name: p for p in platform.node_pools}
    for pool in pools:
        spec = by_name[pool["name"]]
        assert pool["amiType"] == spec.ami_type
        assert pool["labels"] == spec.labels
        assert pool["diskSizeGib"] == spec.root_volume_gib
        assert pool["taints"] == [{"key": t.key, "value": t.value} for t in spec.taints]
        # The peer taints with NO_SCHEDULE only.
        assert all(t.effect == "NoSchedule" for t in spec.taints)


def test_npm_packages_are_pinned_exactly_and_locked() -> None:
    package = json.loads((PEER / "package.json").read_text())
    lock = json.loads((PEER / "package-lock.json").read_text())
    wanted = {**package["dependencies"], **package["devDependencies"]}
    assert {"@aws-quickstart/eks-blueprints", "aws-cdk-lib", "cdk-nag", "yaml"} <= set(wanted)
    for name, version in wanted.items():
        assert EXACT_VERSION.match(version), (name, version)
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
    assert lock["packages"][""]["dependencies"] == package["dependencies"]


def test_acknowledged_findings_are_exact_aws_solutions_ids() -> None:
    findings = json.loads(ACKNOWLEDGED.read_text())
    assert findings == sorted(set(findings))
    assert findings
    assert all(re.match(r"^AwsSolutions-[A-Za-z]+\d+", f) for f in findings)
