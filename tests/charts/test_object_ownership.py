"""Two deployments never render one object: the second is refused, naming the object and
both deployments, by ``eks-inference manifests`` (exit 2, one line, the field) and by the CDK
app (the one line it exits 2 with), before anything is written or applied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from eks_inference.charts.ownership import ObjectOwners
from eks_inference.ops.errors import BadInput
from tests.helpers.cli import run_cli
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REPO, platform_data
from tests.helpers.synthesis import cdk_context

EXAMPLE = REPO / "examples" / "dynamo.yaml"
CLASH = (
    "deployment 'llama-70b-disagg-prefill' renders the ScaledObject "
    "inference/llama-70b-disagg-prefill, which deployment 'llama-70b-disagg' renders too: "
    "rename one of them"
)


def _clashing(tmp_path: Path) -> Path:
    """The Dynamo example with its disaggregated graph autoscaled, whose prefill workers'
    ScaledObject is ``<graph>-prefill``, beside an autoscaled vLLM deployment of that name."""
    data = platform_data(EXAMPLE)
    graph = data["deployments"][0]
    graph["scaling"] = {"min_replicas": 1, "max_replicas": 2, "autoscale": True}
    for group in ("prefill", "decode"):
        graph["options"][group].pop("replicas", None)
    data["deployments"].append(
        {
            "name": f"{graph['name']}-prefill",
            "model": "mistral-7b",
            "instance_type": "g6e.2xlarge",
            "engine": "vllm",
            "scaling": {"min_replicas": 1, "max_replicas": 2, "autoscale": True},
            "weights": {"prefix": "models/mistral-7b/"},
        }
    )
    for pool in data["node_pools"]:
        if pool["name"] == "g6e-2xl":
            pool["max_size"] = 10
        if pool["name"] == "g6e-48xl":
            # At max_replicas the graph's workers span two nodes, over the pool's EFA.
            pool.update(zones=[0], max_size=4)
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_manifests_refuses_a_second_deployment_rendering_an_object_and_writes_nothing(
    tmp_path: Path,
) -> None:
    out = tmp_path / "k8s_manifests"
    result = run_cli("manifests", "--platform", _clashing(tmp_path), "--out", out, cwd=tmp_path)
    one_line_error(result, 2, f"deployments.2.name: {CLASH}")
    assert not out.exists()


@pytest.mark.synth
def test_the_cdk_app_refuses_it_too(tmp_path: Path) -> None:
    from aws_cdk import App

    from eks_inference.stacks.entry import build

    with pytest.raises(BadInput) as refused:
        build(App(context=cdk_context(), outdir=str(tmp_path / "cdk.out")), _clashing(tmp_path))
    assert refused.value.format_message() == CLASH
    assert refused.value.exit_code == 2


def _object(kind: str, name: str, namespace: str | None = "inference") -> dict[str, Any]:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "keda.sh/v1alpha1", "kind": kind, "metadata": metadata}


def test_an_object_is_one_deployments_and_only_its_identity_counts() -> None:
    owners = ObjectOwners()
    assert owners.claim("a", [_object("ScaledObject", "a"), _object("ConfigMap", "a")]) is None
    # The same deployment again, the same name of another kind or namespace: no clash.
    assert owners.claim("a", [_object("ScaledObject", "a")]) is None
    assert (
        owners.claim("b", [_object("PodMonitor", "a"), _object("ScaledObject", "a", "x")]) is None
    )
    clash = owners.claim("c", [_object("ScaledObject", "c"), _object("ScaledObject", "a")])
    assert clash == (
        "deployment 'c' renders the ScaledObject inference/a, which deployment 'a' renders "
        "too: rename one of them"
    )
    # A refused deployment claims nothing.
    assert owners.claim("d", [_object("ScaledObject", "c")]) is None
    cluster_scoped = [_object("PersistentVolume", "pv", None)]
    assert owners.claim("e", cluster_scoped) is None
    assert owners.claim("f", cluster_scoped) == (
        "deployment 'f' renders the PersistentVolume pv, which deployment 'e' renders too: "
        "rename one of them"
    )
