"""The reference app in both modes: lint- and nag-clean, and every pod placeable exactly.

Both apps are synthesized once per session (``reference`` and ``reference_karpenter``). Pods
are read back from what CloudFormation applies (and the compile jobs from what the manifests
hold), the node offers from the templates (managed node groups) and from the NodePools the
Karpenter manifest applies, and every pod is held against every offer, table-driven.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk import App, Stack
from typer.testing import CliRunner

from eks_inference.charts import pod
from eks_inference.charts.artifacts_gate import COMPILE_JOB_ROLE
from eks_inference.charts.contract import PodNeed
from eks_inference.charts.karpenter import karpenter_chart, karpenter_offers
from eks_inference.charts.render import KARPENTER_FILE, render_platform
from eks_inference.charts.scheduling import INSTANCE_TYPE_LABEL, NodeOffer, Taint, unmet
from eks_inference.cli.main import app as cli
from eks_inference.constructs import InferenceCluster, KarpenterNodeProvisioning, PlatformAddons
from eks_inference.names import COMPONENT_LABEL, NODE_POOL_LABEL
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.platform import PlatformSpec
from eks_inference.stacks import build_app
from tests.helpers.deployed import MANIFEST_TYPE, deployed
from tests.helpers.platforms import REFERENCE_PLATFORM, reference
from tests.helpers.synthesis import STACK_NAME, Synthesized, cfn_lint_errors

MANAGED = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
KARPENTER = MANAGED.with_node_provisioning("karpenter")
LATEST = re.compile(r"(?<![A-Za-z])latest(?![A-Za-z])")
_EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
    "NO_EXECUTE": "NoExecute",
}


def _synth(request: pytest.FixtureRequest, mode: str) -> Synthesized:
    name = "reference" if mode == "managed" else "reference_karpenter"
    synth: Synthesized = request.getfixturevalue(name)
    return synth


@pytest.mark.parametrize("mode", ["managed", "karpenter"])
@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_cdk_nag_cfn_lint_and_pins_are_clean(request: pytest.FixtureRequest, mode: str) -> None:
    synth = _synth(request, mode)
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    assert report["pluginReports"] == []
    for name, template in synth.templates.items():
        assert cfn_lint_errors(template) == [], name
        assert not LATEST.findall(json.dumps(template)), name


def _managed_offers(synth: Synthesized) -> list[NodeOffer]:
    """A node group's labels, taints, instance types and root volume, from the template."""
    resources = synth.templates[STACK_NAME]["Resources"]
    offers = []
    for group in synth.resources("AWS::EKS::Nodegroup").values():
        props = group["Properties"]
        template_id = props["LaunchTemplate"]["Id"]["Ref"]
        data = resources[template_id]["Properties"]["LaunchTemplateData"]
        (root,) = data["BlockDeviceMappings"]
        assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
        labels = {k: frozenset({v}) for k, v in props["Labels"].items()}
        labels[INSTANCE_TYPE_LABEL] = frozenset(props["InstanceTypes"])
        offers.append(
            NodeOffer(
                pool=props["Labels"][NODE_POOL_LABEL],
                provisioner=f"node group {props['Labels'][NODE_POOL_LABEL]}",
                labels=labels,
                taints=tuple(
                    Taint(t["Key"], t.get("Value"), _EFFECTS[t["Effect"]])
                    for t in props.get("Taints", [])
                ),
                instance_types=tuple(props["InstanceTypes"]),
                root_volume_gib=root["Ebs"]["VolumeSize"],
                karpenter=False,
            )
        )
    return offers


def _applied_node_pools(synth: Synthesized) -> list[dict[str, Any]]:
    manifests = [r for k, r in synth.resources(MANIFEST_TYPE).items() if "KarpenterNodePools" in k]
    return [o for m in manifests for o in json.loads(m["Properties"]["Manifest"])]


def _offers(synth: Synthesized) -> list[NodeOffer]:
    return [*_managed_offers(synth), *karpenter_offers(_applied_node_pools(synth))]


def _pod_needs(synth: Synthesized, platform: PlatformSpec) -> list[PodNeed]:
    """Every serving pod CloudFormation applies and every compile pod the manifests hold."""
    objects: dict[str, list[dict[str, Any]]] = {
        name: d.objects() for name, d in deployed(synth, platform).items()
    }
    for name, rendered in render_platform(platform).items():
        objects[name] += [
            o for o in rendered if o["metadata"]["labels"].get(COMPONENT_LABEL) == COMPILE_JOB_ROLE
        ]
    needs = []
    for name, applied in objects.items():
        spec = platform.deployment(name)
        placement = platform.placement(spec)
        packed = spec.replicas_per_node
        for obj in applied:
            owner = f"{obj['kind']}/{obj['metadata']['name']}"
            if obj["kind"] in ("Deployment", "Job"):
                template = obj["spec"]["template"]["spec"]
                per_node = packed if obj["kind"] == "Deployment" else 1
                needs.append(
                    pod.scheduling_need(
                        (owner, "template"), placement.workers, template, per_node=per_node
                    )
                )
            if obj["kind"] == "RayService":
                cluster = obj["spec"]["rayClusterConfig"]
                head = cluster["headGroupSpec"]["template"]["spec"]
                needs.append(pod.scheduling_need((owner, "head"), placement.head, head))
                for group in cluster["workerGroupSpecs"]:
                    worker = group["template"]["spec"]
                    needs.append(
                        pod.scheduling_need(
                            (owner, "worker"), placement.workers, worker, per_node=packed
                        )
                    )
    return needs


@pytest.mark.parametrize("mode", ["managed", "karpenter"])
@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_every_applied_pod_fits_exactly_the_pool_meant_for_it(
    request: pytest.FixtureRequest, mode: str
) -> None:
    platform = MANAGED if mode == "managed" else KARPENTER
    synth = _synth(request, mode)
    offers = _offers(synth)
    expected_offers = {"managed": {"system", "inf2", "g6e"}, "karpenter": {"system", "inf2", "g6e"}}
    assert {o.pool for o in offers} == expected_offers[mode]
    assert any(o.karpenter for o in offers) == (mode == "karpenter")
    needs = _pod_needs(synth, platform)
    # vLLM; a Ray head and worker, twice; the Neuron compile job.
    assert len(needs) == 6
    for need in needs:
        fits = {o.provisioner for o in offers if not unmet(need, o)}
        meant = {o.provisioner for o in offers if o.pool == need.pool}
        assert fits == meant, (need.path, fits, meant)


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_a_karpenter_node_pool_is_built_from_the_same_spec_as_the_node_group_it_replaces(
    reference: Synthesized, reference_karpenter: Synthesized
) -> None:
    """Labels, taints, instance types and root volume agree across the two modes."""
    managed = {o.pool: o for o in _managed_offers(reference)}
    karpenter = {o.pool: o for o in karpenter_offers(_applied_node_pools(reference_karpenter))}
    for name in ("inf2", "g6e"):
        assert karpenter[name].taints == managed[name].taints
        assert karpenter[name].instance_types == managed[name].instance_types
        assert karpenter[name].root_volume_gib == managed[name].root_volume_gib
        assert managed[name].labels.items() <= karpenter[name].labels.items()


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_the_serving_objects_do_not_depend_on_the_mode(
    reference: Synthesized, reference_karpenter: Synthesized
) -> None:
    managed = {n: d.objects() for n, d in deployed(reference, MANAGED).items()}
    karpenter = {n: d.objects() for n, d in deployed(reference_karpenter, KARPENTER).items()}
    assert karpenter == managed


def test_an_unknown_node_provisioning_context_is_refused() -> None:
    with pytest.raises(ValueError, match="context node_provisioning 'fargate' is not one of"):
        build_app(MANAGED, app=App(context={"node_provisioning": "fargate"}))


def test_a_platform_that_cannot_run_karpenter_is_refused_before_synth() -> None:
    data = reference()
    data["node_pools"][0]["min_size"] = 0
    with pytest.raises(ValueError, match=r"node_pools\.0\.min_size"):
        build_app(
            PlatformSpec.model_validate(data), app=App(context={"node_provisioning": "karpenter"})
        )


def test_karpenter_needs_a_cluster_in_karpenter_mode() -> None:
    stack = Stack(App(), "Managed")
    cluster = InferenceCluster(
        stack,
        "Cluster",
        cluster_name="managed",
        node_pools=[NodePool(name="system", instance_types=("m6i.xlarge",), min_size=1)],
    )
    with pytest.raises(ValueError, match=r"node_provisioning=NodeProvisioning\.KARPENTER"):
        KarpenterNodeProvisioning(stack, "Karpenter", platform=PlatformAddons(cluster))
    with pytest.raises(ValueError, match="cannot launch into Capacity Reservations"):
        InferenceCluster(
            stack,
            "Reserved",
            cluster_name="reserved",
            node_pools=[
                NodePool(name="system", instance_types=("m6i.xlarge",), min_size=1),
                NodePool(
                    name="inf2",
                    instance_types=("inf2.48xlarge",),
                    capacity_type="RESERVED",
                    capacity_reservation_ids=("cr-0123456789abcdef0",),
                ),
            ],
        )


def test_the_manifests_command_writes_the_karpenter_objects_in_karpenter_mode(
    tmp_path: Path,
) -> None:
    """What `make synth` runs (`eks-inference manifests`) on a Karpenter-mode platform file."""
    data = reference()
    data["node_provisioning"] = "karpenter"
    platform_file = tmp_path / "deployments.yaml"
    platform_file.write_text(yaml.safe_dump(data))
    out = tmp_path / "k8s_manifests"
    result = CliRunner().invoke(
        cli, ["manifests", "--platform", str(platform_file), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    written = list(yaml.safe_load_all((out / KARPENTER_FILE).read_text()))
    expected = karpenter_chart(
        cluster_name=KARPENTER.cluster_name,
        pools=KARPENTER.node_pools,
        deployments=KARPENTER.deployments,
    ).to_json()
    assert written == expected
    managed_out = tmp_path / "managed"
    result = CliRunner().invoke(
        cli, ["manifests", "--platform", str(REFERENCE_PLATFORM), "--out", str(managed_out)]
    )
    assert result.exit_code == 0, result.output
    assert not (managed_out / KARPENTER_FILE).exists()
