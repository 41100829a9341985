"""Cross-references in what CloudFormation applies: pods, node groups, images, IAM, manifests.

The objects are read back from the reference app's synthesized templates (the manifests inside
each deployment's nested stack), with tokens resolved as CloudFormation would for the
platform's account and region, and checked against the node groups and policies of the same
templates and against what ``render_platform`` writes to ``k8s_manifests/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import pytest

from eks_inference import names
from eks_inference.serve.image import asset_image_uri
from eks_inference.specification.node_pools import Taint
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.checks import found
from tests.helpers.deployed import (
    DeployedDeployment,
    Statement,
    applied_differences,
    deployed,
    statements,
)
from tests.helpers.platforms import REFERENCE_PLATFORM
from tests.helpers.synthesis import STACK_NAME, Synthesized

pytestmark = [pytest.mark.synth, pytest.mark.xdist_group("synth")]

PLATFORM = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
ACCELERATORS = (names.NEURONCORE_RESOURCE, names.NEURON_DEVICE_RESOURCE, names.NVIDIA_GPU_RESOURCE)


@dataclass(frozen=True)
class Pod:
    """A pod template found in an applied object, and where."""

    deployment: str
    owner: str  # "<kind>/<name>"
    path: str  # JSON path of the template inside the object
    spec: dict[str, Any]

    @property
    def containers(self) -> list[dict[str, Any]]:
        return [*self.spec.get("initContainers", []), *self.spec["containers"]]


def _pods(deployment: str, obj: dict[str, Any]) -> Iterator[Pod]:
    """Every pod template (``template.spec.containers``) anywhere in ``obj``."""
    owner = f"{obj['kind']}/{obj['metadata']['name']}"

    def walk(node: Any, path: str) -> Iterator[Pod]:
        if isinstance(node, dict):
            template = node.get("template")
            if isinstance(template, dict) and "containers" in template.get("spec", {}):
                yield Pod(deployment, owner, f"{path}.template", template["spec"])
            for key, value in node.items():
                yield from walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, f"{path}[{i}]")

    yield from walk(obj, "")


@pytest.fixture(scope="module")
def deployments(reference: Synthesized) -> dict[str, DeployedDeployment]:
    return deployed(reference, PLATFORM)


@pytest.fixture(scope="module")
def pods(deployments: dict[str, DeployedDeployment]) -> list[Pod]:
    found = [
        pod
        for name, deployment in deployments.items()
        for obj in deployment.objects()
        for pod in _pods(name, obj)
    ]
    # vLLM Deployment; Ray head + worker, twice.
    assert len(found) == 5
    return found


@pytest.fixture(scope="module")
def nodegroups(reference: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        logical_id: resource["Properties"]
        for logical_id, resource in reference.resources("AWS::EKS::Nodegroup").items()
    }


def _kubernetes_effect(effect: str) -> str:
    """``NO_SCHEDULE`` (EKS API) as ``NoSchedule`` (Kubernetes), by the one mapping there is."""
    (match,) = (
        e
        for e in ("NoSchedule", "PreferNoSchedule", "NoExecute")
        if Taint(key="k", value="v", effect=e).cloudformation_effect == effect
    )
    return match


def _tolerates(tolerations: list[dict[str, str]], taint: dict[str, str]) -> bool:
    effect = _kubernetes_effect(taint["Effect"])
    return any(
        t.get("key") == taint["Key"]
        and t.get("effect", effect) == effect
        and (
            t.get("operator") == "Exists"
            or (t.get("operator", "Equal") == "Equal" and t.get("value") == taint["Value"])
        )
        for t in tolerations
    )


def _nodegroup_for(pod: Pod, nodegroups: dict[str, dict[str, Any]]) -> dict[str, Any]:
    selector = pod.spec.get("nodeSelector", {})
    assert selector, f"{pod.owner}{pod.path} has no nodeSelector"
    matching = [
        props
        for props in nodegroups.values()
        if selector.items() <= props.get("Labels", {}).items()
    ]
    assert len(matching) == 1, f"{pod.owner}{pod.path}: {selector} matches {len(matching)} groups"
    return matching[0]


def test_every_pod_selects_one_node_group_and_tolerates_its_taints(
    pods: list[Pod], nodegroups: dict[str, dict[str, Any]]
) -> None:
    for pod in pods:
        group = _nodegroup_for(pod, nodegroups)
        for taint in group.get("Taints", []):
            assert _tolerates(pod.spec.get("tolerations", []), taint), (pod.owner, taint)


def test_ray_heads_request_no_accelerator_and_run_on_an_untainted_group(
    pods: list[Pod], nodegroups: dict[str, dict[str, Any]]
) -> None:
    heads = [p for p in pods if ".headGroupSpec." in p.path]
    assert len(heads) == 2
    for head in heads:
        assert not _nodegroup_for(head, nodegroups).get("Taints"), head.owner
        for container in head.containers:
            for side in ("requests", "limits"):
                amounts = container["resources"].get(side, {})
                assert not set(amounts) & set(ACCELERATORS), (head.owner, container["name"])


def test_every_container_has_bounded_resources_and_a_pinned_image(pods: list[Pod]) -> None:
    for pod in pods:
        for container in pod.containers:
            where = f"{pod.owner}{pod.path} {container['name']}"
            for side in ("requests", "limits"):
                amounts = container["resources"][side]
                assert {"cpu", "memory"} <= set(amounts), where
            image: str = container["image"]
            name, _, tag = image.rpartition("/")[2].partition(":")
            digest = "@sha256:" in image
            assert name, f"{where}: {image}"
            assert tag or digest, f"{where}: {image} has no tag"
            assert tag.split("@")[0] != "latest", f"{where}: {image}"


def test_accelerator_workers_request_their_tensor_parallel_devices(pods: list[Pod]) -> None:
    for pod in found(p for p in pods if ".headGroupSpec." not in p.path):
        spec = PLATFORM.deployment(pod.deployment)
        resource = names.NEURONCORE_RESOURCE if spec.on_neuron else names.NVIDIA_GPU_RESOURCE
        (server, *_) = pod.spec["containers"]
        assert server["resources"]["limits"][resource] == str(spec.tensor_parallel_size)


def test_volumes_name_the_bucket_and_prefixes_the_mountpoint_role_reads(
    reference: Synthesized, deployments: dict[str, DeployedDeployment]
) -> None:
    resolvers = {d.key: d.resolve for d in deployments.values()}
    (mountpoint_role,) = (k for k in reference.resources("AWS::IAM::Role") if "MountpointRole" in k)
    readable = [
        s
        for s in statements(reference, PLATFORM, resolvers)
        if s.template == STACK_NAME and s.role == mountpoint_role
    ]
    bucket_arn = f"arn:aws:s3:::{PLATFORM.model_bucket_name}"
    volumes = 0
    for deployment in deployments.values():
        for obj in deployment.objects():
            if obj["kind"] != "PersistentVolume":
                continue
            volumes += 1
            attributes = obj["spec"]["csi"]["volumeAttributes"]
            assert attributes["bucketName"] == PLATFORM.model_bucket_name
            options = dict(o.partition(" ")[::2] for o in obj["spec"]["mountOptions"])
            assert options["region"] == PLATFORM.region
            prefix = options["prefix"]
            assert _lists(readable, bucket_arn, prefix), prefix
            assert _reads(readable, f"{bucket_arn}/{prefix}config.json"), prefix
    assert volumes == 3


def test_streamed_weights_are_readable_by_the_pods_own_role(
    reference: Synthesized, deployments: dict[str, DeployedDeployment]
) -> None:
    resolvers = {d.key: d.resolve for d in deployments.values()}
    bucket_arn = f"arn:aws:s3:::{PLATFORM.model_bucket_name}"
    for name, deployment in deployments.items():
        spec = PLATFORM.deployment(name)
        if spec.weights.loader != "runai_streamer":
            continue
        (server,) = (o for o in deployment.objects() if o["kind"] == "Deployment")
        args = server["spec"]["template"]["spec"]["containers"][0]["args"]
        model = args[0]
        assert model == f"s3://{PLATFORM.model_bucket_name}/{spec.weights.prefix}"
        (association,) = deployment.resources("AWS::EKS::PodIdentityAssociation").values()
        role = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
        granted = [
            s
            for s in statements(reference, PLATFORM, resolvers)
            if s.template == deployment.key and s.role == role
        ]
        assert _lists(granted, bucket_arn, spec.weights.prefix)
        assert _reads(granted, f"{bucket_arn}/{spec.weights.prefix}model.safetensors")


def _lists(granted: list[Statement], bucket_arn: str, prefix: str) -> bool:
    return any(
        "s3:ListBucket" in s.actions
        and bucket_arn in s.resources
        and prefix in s.conditions.get("StringLike", {}).get("s3:prefix", [])
        for s in granted
    )


def _reads(granted: list[Statement], object_arn: str) -> bool:
    return any(
        "s3:GetObject" in s.actions and any(fnmatchcase(object_arn, r) for r in s.resources)
        for s in granted
    )


def test_cloudformation_applies_exactly_what_render_platform_writes(
    reference: Synthesized,
) -> None:
    compared, differences = applied_differences(reference, PLATFORM)
    assert differences == []
    assert compared == sum(len(d.objects()) for d in deployed(reference, PLATFORM).values())


def test_the_neuron_ray_image_is_the_asset_k8s_manifests_name(
    deployments: dict[str, DeployedDeployment], pods: list[Pod]
) -> None:
    expected = asset_image_uri(PLATFORM.account_id, PLATFORM.region)
    neuron_ray = [
        p
        for p in pods
        if PLATFORM.deployment(p.deployment).on_neuron and p.owner.startswith("RayService/")
    ]
    assert len(neuron_ray) == 2
    for pod in neuron_ray:
        assert {c["image"] for c in pod.spec["containers"]} == {expected}
