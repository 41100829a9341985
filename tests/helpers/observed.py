"""Helpers for the monitoring and autoscaling tests: the CRD schemas shipped with the tests, a
platform whose standalone vLLM deployments autoscale, pod templates with their labels, label
selectors, and promtool."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from eks_inference.charts.render import render_platform
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import CRDS
from tests.helpers.rendered import CONTEXT

PODMONITOR_CRD = CRDS / "monitoring.coreos.com_podmonitors.yaml"
PROMETHEUSRULE_CRD = CRDS / "monitoring.coreos.com_prometheusrules.yaml"
SCALEDOBJECT_CRD = CRDS / "keda.sh_scaledobjects.yaml"

# Debian's `prometheus` package ships promtool (apt-get install -y prometheus).
PROMTOOL = shutil.which("promtool")
PROMTOOL_MISSING = "promtool not installed (Debian: apt-get install -y prometheus)"

AUTOSCALED = PlatformSpec.model_validate(
    {
        "model_bucket_name": CONTEXT.bucket_name,
        "node_pools": [
            {"name": "system", "instance_types": ["m6i.2xlarge"], "min_size": 2, "max_size": 3},
            {"name": "g6e", "instance_types": ["g6e.2xlarge"], "max_size": 6},
            {"name": "inf2", "instance_types": ["inf2.48xlarge"], "max_size": 2},
        ],
        "deployments": [
            {
                "name": "mistral-auto",
                "model": "mistral-7b",
                "instance_type": "g6e.2xlarge",
                "engine": "vllm",
                "limits": {"max_model_len": 8192, "max_num_seqs": 16},
                "scaling": {"min_replicas": 1, "max_replicas": 5, "autoscale": True},
                "weights": {"prefix": "models/mistral-7b/", "loader": "runai_streamer"},
            },
            {
                "name": "llama-neuron-auto",
                "model": "llama-3-8b",
                "instance_type": "inf2.48xlarge",
                "engine": "vllm",
                "tensor_parallel_size": 8,
                "scaling": {"min_replicas": 2, "max_replicas": 4, "autoscale": True},
                "weights": {"prefix": "models/llama-3-8b/"},
                "neuron": {"compiled_artifacts_prefix": "neuron-artifacts/"},
            },
        ],
    }
)


@cache
def autoscaled_objects() -> dict[str, list[dict[str, Any]]]:
    """:data:`AUTOSCALED` rendered once."""
    return render_platform(AUTOSCALED, CONTEXT)


@dataclass(frozen=True)
class Pod:
    """A pod template as a monitor sees it: namespace, labels and container ports by name."""

    namespace: str
    labels: Mapping[str, str]
    spec: Mapping[str, Any]

    @property
    def port_names(self) -> set[str]:
        return {
            port["name"]
            for container in self.spec["containers"]
            for port in container.get("ports", [])
            if "name" in port
        }

    def port_number(self, name: str) -> int:
        for container in self.spec["containers"]:
            for port in container.get("ports", []):
                if port.get("name") == name:
                    return int(port["containerPort"])
        raise KeyError(name)


def pods(objects: list[dict[str, Any]]) -> Iterator[Pod]:
    """Every pod template among ``objects`` (Deployments, DaemonSets, Ray heads and workers)."""
    for obj in objects:
        namespace = obj["metadata"].get("namespace", "")
        templates = []
        if obj["kind"] in ("Deployment", "DaemonSet"):
            templates = [obj["spec"]["template"]]
        elif obj["kind"] == "RayService":
            cluster = obj["spec"]["rayClusterConfig"]
            templates = [cluster["headGroupSpec"]["template"]]
            templates += [group["template"] for group in cluster["workerGroupSpecs"]]
        for template in templates:
            yield Pod(namespace, template["metadata"]["labels"], template["spec"])


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a Kubernetes label selector matches ``labels``."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values", [])
        matched = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not matched:
            return False
    return True


def pod_label_from_meta(meta_label: str) -> str:
    """``__meta_kubernetes_pod_label_app_kubernetes_io_instance`` -> its sanitized pod label."""
    prefix = "__meta_kubernetes_pod_label_"
    assert meta_label.startswith(prefix), meta_label
    return meta_label.removeprefix(prefix)


def sanitized(label: str) -> str:
    """A Kubernetes label name as Prometheus service discovery writes it."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in label)


def promtool_check_rules(
    groups: list[dict[str, Any]], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """``promtool check rules`` on a rule file holding ``groups``."""
    assert PROMTOOL is not None
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return subprocess.run(
        [PROMTOOL, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def promtool_test_rules(
    groups: list[dict[str, Any]], tests: list[dict[str, Any]], tmp_path: Path
) -> None:
    """``promtool test rules``: ``tests`` (input series, then the alerts expected at given
    times) against a rule file holding ``groups``, evaluated every minute; fails with
    promtool's report unless every test passes."""
    assert PROMTOOL is not None
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    (tmp_path / "test.yaml").write_text(
        yaml.safe_dump(
            {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests},
            sort_keys=False,
        )
    )
    result = subprocess.run(
        [PROMTOOL, "test", "rules", str(tmp_path / "test.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
