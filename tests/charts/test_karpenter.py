"""Karpenter NodePools and EC2NodeClasses from the NodePool specs, and the scheduling check.

Objects are validated strictly against the CRDs of the pinned Karpenter release (shipped in
tests/crds/ with their source) and their core parts (metadata, taints) against
kubernetes-validate's strict Kubernetes schemas, and every rendered serving and compile pod
is held, pod by pool, against the nodes each provisioner of the platform can start, in both
modes.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from fractions import Fraction
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes_validate.utils import schema_contents
from pydantic import ValidationError
from referencing import Registry, Resource

from eks_inference import names, versions
from eks_inference.catalog import GIB, INSTANCE_TYPES
from eks_inference.charts.compile_job import active_deadline_seconds
from eks_inference.charts.contract import PlatformNeeds, PodNeed
from eks_inference.charts.deployment import compile_job_charts, deployment_charts, needs_of
from eks_inference.charts.karpenter import (
    KARPENTER_CAPACITY_TYPES,
    ami_alias,
    consolidate_after_seconds,
    karpenter_chart,
    karpenter_offers,
    platform_offers,
    termination_grace_seconds,
)
from eks_inference.charts.record import ChartRecord
from eks_inference.charts.render import KARPENTER_FILE, render_files
from eks_inference.charts.scheduling import (
    NodeOffer,
    Taint,
    allocatable,
    check_schedulable,
    managed_offer,
    quantity,
    unmet,
)
from eks_inference.names import KARPENTER_DO_NOT_DISRUPT_ANNOTATION, NODE_POOL_LABEL
from eks_inference.specification.node_pools import (
    IMDS_HOP_LIMIT,
    ROOT_DEVICE,
    NodePool,
    karpenter_pools,
)
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.startup_budget import model_load_seconds, rollout_seconds
from eks_inference.versions import KUBERNETES_VERSION
from tests.helpers.checks import found
from tests.helpers.errors import errors_by_field
from tests.helpers.objects import crd_validator, schema_errors
from tests.helpers.platforms import CRDS, REFERENCE_PLATFORM, reference
from tests.helpers.rendered import CONTEXT, variants_spec

NODE_POOL_CRD = CRDS / "karpenter.sh_nodepools.yaml"
NODE_CLASS_CRD = CRDS / "karpenter.k8s.aws_ec2nodeclasses.yaml"
RESERVATION = "cr-0123456789abcdef0"


def _reference() -> PlatformSpec:
    return PlatformSpec.from_yaml(REFERENCE_PLATFORM)


def _purchasing() -> PlatformSpec:
    """Every capacity type: spot with an on-demand fallback, reservations, plain on-demand."""
    return PlatformSpec.model_validate(
        {
            "model_bucket_name": CONTEXT.bucket_name,
            "node_provisioning": "karpenter",
            "node_pools": [
                {"name": "system", "instance_types": ["m6i.xlarge", "m7i.xlarge"], "min_size": 1},
                {
                    "name": "inf2",
                    "instance_types": ["inf2.48xlarge"],
                    "capacity_type": "RESERVED",
                    "fallback_capacity_types": ["SPOT", "ON_DEMAND"],
                    "capacity_reservation_ids": [RESERVATION],
                    "max_size": 2,
                },
                {
                    "name": "g6e",
                    "instance_types": ["g6e.2xlarge"],
                    "capacity_type": "SPOT",
                    "fallback_capacity_types": ["ON_DEMAND"],
                },
            ],
        }
    )


PLATFORMS = {"reference": _reference, "variants": variants_spec, "purchasing": _purchasing}


@pytest.fixture(scope="module", params=sorted(PLATFORMS))
def karpenter_platform(request: pytest.FixtureRequest) -> PlatformSpec:
    platform: PlatformSpec = PLATFORMS[request.param]()
    return platform.with_node_provisioning("karpenter")


def _chart(platform: PlatformSpec) -> ChartRecord:
    return karpenter_chart(
        cluster_name=platform.cluster_name,
        pools=platform.node_pools,
        deployments=platform.deployments,
    )


def _by_kind(chart: ChartRecord, kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in chart.objects if o["kind"] == kind}


def test_objects_validate_strictly_against_the_pinned_karpenter_crds(
    karpenter_platform: PlatformSpec,
) -> None:
    chart = _chart(karpenter_platform)
    validators = {
        "NodePool": crd_validator(NODE_POOL_CRD, "v1"),
        "EC2NodeClass": crd_validator(NODE_CLASS_CRD, "v1"),
    }
    assert {o["kind"] for o in chart.objects} == set(validators)
    for obj in chart.objects:
        assert schema_errors(validators[obj["kind"]], obj) == [], obj["metadata"]["name"]


def _kubernetes_validator(schema_file: str) -> jsonschema.Draft202012Validator:
    """kubernetes-validate's own strict schema of a core type, at the cluster's version."""
    directory = f"kubernetes-json-schema/v{KUBERNETES_VERSION}.0-local-strict"
    schema = schema_contents(f"{directory}/{schema_file}", KUBERNETES_VERSION)
    definitions = schema_contents(f"{directory}/_definitions.json", KUBERNETES_VERSION)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def test_metadata_labels_and_taints_validate_strictly_against_kubernetes(
    karpenter_platform: PlatformSpec,
) -> None:
    """The parts that are core Kubernetes types, against kubernetes-validate's strict schemas."""
    metadata = _kubernetes_validator("objectmeta-meta-v1.json")
    taint = _kubernetes_validator("taint-v1.json")
    for obj in _chart(karpenter_platform).objects:
        assert list(metadata.iter_errors(obj["metadata"])) == []
        if obj["kind"] == "NodePool":
            template = obj["spec"]["template"]
            assert list(metadata.iter_errors(template["metadata"])) == []
            for t in template["spec"].get("taints", []):
                assert list(taint.iter_errors(t)) == []
    assert list(metadata.iter_errors({"name": "x", "unknown": 1}))


def test_the_crd_schemas_reject_what_karpenter_rejects() -> None:
    """The validators are not vacuous: a wrong type, an unknown field and a bad pattern fail."""
    chart = _chart(_reference().with_node_provisioning("karpenter"))
    node_pool = copy.deepcopy(_by_kind(chart, "NodePool")["inf2"])
    node_pool["spec"]["disruption"]["consolidateAfter"] = "a while"
    node_pool["spec"]["template"]["spec"]["unknown"] = True
    node_class = copy.deepcopy(_by_kind(chart, "EC2NodeClass")["inf2"])
    node_class["spec"]["metadataOptions"]["httpTokens"] = "maybe"
    pool_errors = schema_errors(crd_validator(NODE_POOL_CRD, "v1"), node_pool)
    assert any("consolidateAfter" in e for e in pool_errors)
    assert any("unknown" in e for e in pool_errors)
    assert schema_errors(crd_validator(NODE_CLASS_CRD, "v1"), node_class)


def test_every_pool_but_the_system_node_group_is_a_node_pool(
    karpenter_platform: PlatformSpec,
) -> None:
    chart = _chart(karpenter_platform)
    system = karpenter_platform.system_pool
    expected = {p.name for p in karpenter_platform.node_pools if p is not system}
    if system.max_size > system.min_size:
        expected.add(system.name)
    assert set(_by_kind(chart, "NodePool")) == expected
    assert set(_by_kind(chart, "EC2NodeClass")) == expected
    for name, node_pool in _by_kind(chart, "NodePool").items():
        assert node_pool["spec"]["template"]["spec"]["nodeClassRef"] == {
            "group": "karpenter.k8s.aws",
            "kind": "EC2NodeClass",
            "name": name,
        }


def test_node_classes_boot_the_pinned_al2023_alias_with_the_pools_disk_and_imds(
    karpenter_platform: PlatformSpec,
) -> None:
    chart = _chart(karpenter_platform)
    pools = {p.name: p for p in karpenter_platform.node_pools}
    assert ami_alias() == f"al2023@{versions.EKS_AL2023_AMI_RELEASE}"
    assert versions.EKS_AL2023_AMI_RELEASE.startswith("v")
    for name, node_class in found(_by_kind(chart, "EC2NodeClass").items()):
        spec = node_class["spec"]
        assert spec["amiSelectorTerms"] == [{"alias": ami_alias()}]
        assert "latest" not in str(spec["amiSelectorTerms"])
        assert spec["role"] == names.karpenter_node_role_name(karpenter_platform.cluster_name)
        discovery = {names.KARPENTER_DISCOVERY_TAG: karpenter_platform.cluster_name}
        assert spec["subnetSelectorTerms"] == [{"tags": discovery}]
        assert spec["securityGroupSelectorTerms"] == [{"tags": discovery}]
        assert spec["metadataOptions"]["httpTokens"] == "required"
        assert spec["metadataOptions"]["httpPutResponseHopLimit"] == IMDS_HOP_LIMIT == 1
        (root,) = spec["blockDeviceMappings"]
        assert root["deviceName"] == ROOT_DEVICE
        assert root["rootVolume"] is True
        assert root["ebs"] == {
            "volumeSize": f"{pools[name].root_volume_gib}Gi",
            "volumeType": "gp3",
            "encrypted": True,
            "deleteOnTermination": True,
        }


def test_node_pools_carry_the_labels_pods_select_and_taints_they_tolerate(
    karpenter_platform: PlatformSpec,
) -> None:
    chart = _chart(karpenter_platform)
    pools = {p.name: p for p in karpenter_platform.node_pools}
    for name, node_pool in found(_by_kind(chart, "NodePool").items()):
        pool = pools[name]
        template = node_pool["spec"]["template"]
        assert template["metadata"]["labels"] == pool.labels
        assert pool.node_selector().items() <= template["metadata"]["labels"].items()
        taints = template["spec"].get("taints", [])
        assert taints == [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints]
        requirements = {r["key"]: r for r in template["spec"]["requirements"]}
        assert requirements["node.kubernetes.io/instance-type"]["values"] == list(
            pool.instance_types
        )


def test_capacity_types_and_reservations_come_from_the_pool() -> None:
    chart = _chart(_purchasing())
    node_pools = _by_kind(chart, "NodePool")

    def capacity(name: str) -> list[str]:
        (requirement,) = (
            r
            for r in node_pools[name]["spec"]["template"]["spec"]["requirements"]
            if r["key"] == "karpenter.sh/capacity-type"
        )
        values: list[str] = requirement["values"]
        return values

    assert capacity("inf2") == ["reserved", "spot", "on-demand"]
    assert capacity("g6e") == ["spot", "on-demand"]
    assert capacity("system") == ["on-demand"]
    assert set(KARPENTER_CAPACITY_TYPES.values()) == {"on-demand", "spot", "reserved"}
    classes = _by_kind(chart, "EC2NodeClass")
    assert classes["inf2"]["spec"]["capacityReservationSelectorTerms"] == [{"id": RESERVATION}]
    assert "capacityReservationSelectorTerms" not in classes["g6e"]["spec"]


def test_limits_hold_max_size_nodes_and_the_system_pool_beyond_its_managed_nodes() -> None:
    platform = _reference().with_node_provisioning("karpenter")
    node_pools = _by_kind(_chart(platform), "NodePool")
    inf2 = INSTANCE_TYPES["inf2.48xlarge"]
    assert node_pools["inf2"]["spec"]["limits"] == {
        "cpu": str(3 * inf2.vcpus),
        "memory": f"{3 * inf2.memory_gib}Gi",
        names.NEURONCORE_RESOURCE: str(3 * inf2.cores),
        names.NEURON_DEVICE_RESOURCE: str(3 * inf2.devices),
    }
    assert node_pools["g6e"]["spec"]["limits"][names.NVIDIA_GPU_RESOURCE] == "8"
    system = platform.system_pool
    assert node_pools["system"]["spec"]["limits"]["cpu"] == str(
        (system.max_size - system.min_size) * system.instance.vcpus
    )
    fixed = PlatformSpec.model_validate(
        {
            **platform.model_dump(mode="json", exclude_unset=True),
            "node_pools": [
                {"name": "system", "instance_types": ["m6i.2xlarge"], "min_size": 2, "max_size": 2},
                *[p.model_dump(mode="json") for p in platform.node_pools[1:]],
            ],
        }
    )
    assert [p.pool.name for p in karpenter_pools(fixed.node_pools)] == ["inf2", "g6e"]


def test_accelerator_pools_consolidate_only_empty_nodes_after_a_model_load(
    karpenter_platform: PlatformSpec,
) -> None:
    chart = _chart(karpenter_platform)
    pools = {p.name: p for p in karpenter_platform.node_pools}
    served = []
    for name, node_pool in found(_by_kind(chart, "NodePool").items()):
        pool = pools[name]
        disruption = node_pool["spec"]["disruption"]
        grace = _seconds(node_pool["spec"]["template"]["spec"]["terminationGracePeriod"])
        on_pool = [
            d for d in karpenter_platform.deployments if d.instance_type in pool.instance_types
        ]
        if pool.instance.devices == 0:
            assert disruption["consolidationPolicy"] == "WhenEmptyOrUnderutilized"
            continue
        assert disruption["consolidationPolicy"] == "WhenEmpty"
        assert disruption["budgets"] == [{"nodes": "1"}]
        after = _seconds(disruption["consolidateAfter"])
        assert after == consolidate_after_seconds(pool, karpenter_platform.deployments)
        served += on_pool
        for deployment in on_pool:
            assert after > model_load_seconds(deployment), deployment.name
            # A drifted node is drained only once what runs on it could have finished.
            assert grace >= rollout_seconds(deployment)
            if deployment.has_compiled_artifacts:
                assert grace >= active_deadline_seconds(deployment)
        assert grace == termination_grace_seconds(pool, karpenter_platform.deployments)
        assert node_pool["spec"]["template"]["spec"]["expireAfter"] == "720h"
    # The deployments' own bounds were checked (the purchasing platform has none).
    assert served or not karpenter_platform.deployments


def _seconds(duration: str) -> int:
    units = {"h": 3600, "m": 60, "s": 1}
    total, number = 0, ""
    for char in duration:
        if char.isdigit():
            number += char
        else:
            total += int(number) * units[char]
            number = ""
    return total


def _templates(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """``(owner and path, pod template)`` of every pod template in ``objects``."""
    found = []
    for obj in objects:
        owner = f"{obj['kind']}/{obj['metadata']['name']}"
        spec = obj.get("spec", {})
        if obj["kind"] in ("Deployment", "Job"):
            found.append((f"{owner} template", spec["template"]))
        if obj["kind"] == "RayService":
            cluster = spec["rayClusterConfig"]
            found.append((f"{owner} head", cluster["headGroupSpec"]["template"]))
            for group in cluster["workerGroupSpecs"]:
                found.append((f"{owner} worker", group["template"]))
    return found


@pytest.mark.parametrize("platform_name", ["reference", "variants"])
def test_serving_and_compile_pods_say_how_long_karpenter_must_not_move_them(
    platform_name: str,
) -> None:
    """Loading pods for their rollout budget; Ray heads and compile jobs for as long as they run."""
    rendered = render_files(PLATFORMS[platform_name](), CONTEXT)
    platform = PLATFORMS[platform_name]()
    seen = set()
    for path, text in rendered.items():
        deployment = path.split("/")[0]
        for obj in yaml.safe_load_all(text):
            for where, template in _templates([obj] if obj else []):
                annotation = template["metadata"]["annotations"][
                    KARPENTER_DO_NOT_DISRUPT_ANNOTATION
                ]
                spec = platform.deployment(deployment)
                if where.endswith(("head",)) or where.startswith("Job/"):
                    assert annotation == "true", where
                else:
                    assert annotation == f"{rollout_seconds(spec)}s", where
                    assert rollout_seconds(spec) > model_load_seconds(spec)
                seen.add(where.split(" ")[1] if " " in where else where)
    assert {"template", "head", "worker"} <= seen


def _needs(platform: PlatformSpec) -> dict[str, PlatformNeeds]:
    needs = {}
    for spec in platform.deployments:
        placement = platform.placement(spec)
        rendered = deployment_charts(spec, placement, CONTEXT)
        charts = [*rendered.charts, *compile_job_charts(rendered)]
        needs[spec.name] = needs_of(charts)
    return needs


def _offers(platform: PlatformSpec) -> tuple[NodeOffer, ...]:
    if platform.node_provisioning == "managed":
        return platform_offers(platform)
    return platform_offers(platform, karpenter_offers(_chart(platform).objects))


def _cases() -> list[tuple[str, str]]:
    return [(p, m) for p in ("reference", "variants") for m in ("managed", "karpenter")]


@pytest.mark.parametrize(("platform_name", "mode"), _cases())
def test_every_pod_fits_exactly_the_pool_meant_for_it(platform_name: str, mode: str) -> None:
    """Pod by provisioner: the pod's own pool can run it, and no other pool can."""
    platform = PLATFORMS[platform_name]().with_node_provisioning(mode)  # type: ignore[arg-type]
    offers = _offers(platform)
    needs = [n for deployment in _needs(platform).values() for n in deployment.pods]
    kinds = {str(n.path[0]).split("/")[0] for n in needs}
    assert kinds == {"Deployment", "RayService", "Job"}
    for need in needs:
        for offer in offers:
            reasons = unmet(need, offer)
            if offer.pool == need.pool:
                assert reasons == [], (need.path, offer.provisioner)
            else:
                assert reasons, (need.path, offer.provisioner)
    check_schedulable(platform, _needs(platform), offers)


def _pod(needs: dict[str, PlatformNeeds], deployment: str, kind: str) -> PodNeed:
    return next(n for n in needs[deployment].pods if str(n.path[0]).startswith(kind))


def _errors(platform: PlatformSpec, offers: tuple[NodeOffer, ...]) -> dict[str, str]:
    with pytest.raises(ValidationError) as raised:
        check_schedulable(platform, _needs(platform), offers)
    return errors_by_field(raised.value)


def _karpenter_offers_after(
    platform: PlatformSpec, pool: str, change: Any
) -> tuple[NodeOffer, ...]:
    objects = copy.deepcopy(list(_chart(platform).objects))
    (node_pool,) = (o for o in objects if o["kind"] == "NodePool" and o["metadata"]["name"] == pool)
    change(node_pool["spec"]["template"])
    return platform_offers(platform, karpenter_offers(objects))


def _managed_offers_after(platform: PlatformSpec, pool: str, change: Any) -> tuple[NodeOffer, ...]:
    return tuple(change(o) if o.pool == pool else o for o in platform_offers(platform))


MISTRAL = "deployments.1.Deployment/mistral-7b-g6e.spec.template"


@pytest.mark.parametrize("mode", ["managed", "karpenter"])
def test_a_taint_the_pods_do_not_tolerate_fails_with_their_field_path(mode: str) -> None:
    platform = _reference().with_node_provisioning(mode)  # type: ignore[arg-type]
    if mode == "karpenter":
        offers = _karpenter_offers_after(
            platform,
            "g6e",
            lambda t: t["spec"]["taints"].append(
                {"key": "example.com/dedicated", "value": "batch", "effect": "NoSchedule"}
            ),
        )
    else:
        offers = _managed_offers_after(
            platform,
            "g6e",
            lambda o: dataclasses.replace(
                o, taints=(*o.taints, Taint("example.com/dedicated", "batch", "NoSchedule"))
            ),
        )
    errors = _errors(platform, offers)
    assert "example.com/dedicated=batch:NoSchedule, which it does not tolerate" in errors[MISTRAL]
    assert "no node of pool 'g6e' can run this pod" in errors[MISTRAL]
    # Both g6e deployments' pods fail; the inf2 deployment's do not.
    assert {k.split(".")[1] for k in errors} == {"1", "2"}


@pytest.mark.parametrize("mode", ["managed", "karpenter"])
def test_a_label_the_pods_do_not_select_fails_with_their_field_path(mode: str) -> None:
    platform = _reference().with_node_provisioning(mode)  # type: ignore[arg-type]
    if mode == "karpenter":

        def relabel(template: dict[str, Any]) -> None:
            template["metadata"]["labels"][NODE_POOL_LABEL] = "gpus"

        offers = _karpenter_offers_after(platform, "g6e", relabel)
    else:
        offers = _managed_offers_after(
            platform,
            "g6e",
            lambda o: dataclasses.replace(
                o, labels={**o.labels, NODE_POOL_LABEL: frozenset({"gpus"})}
            ),
        )
    errors = _errors(platform, offers)
    assert f"it selects {NODE_POOL_LABEL}=g6e, which its nodes lack" in errors[MISTRAL]


def test_an_instance_type_too_small_for_the_pods_fails() -> None:
    """A NodePool offering a smaller Inferentia2 size cannot hold TP 8 (nor the memory)."""
    platform = _reference().with_node_provisioning("karpenter")

    def shrink(template: dict[str, Any]) -> None:
        for requirement in template["spec"]["requirements"]:
            if requirement["key"] == "node.kubernetes.io/instance-type":
                requirement["values"] = ["inf2.8xlarge"]

    errors = _errors(platform, _karpenter_offers_after(platform, "inf2", shrink))
    worker = (
        "deployments.0.RayService/llama3-8b-inf2.spec.rayClusterConfig.workerGroupSpecs.0.template"
    )
    job = next(k for k in errors if ".Job/llama3-8b-inf2-compile-" in k)
    # The three workers an inf2.48xlarge holds, and the compile job alone, cannot fit.
    assert "3 such pods exceed what one node can allocate (inf2.8xlarge:" in errors[worker]
    assert f"{names.NEURONCORE_RESOURCE} 24 > 2" in errors[worker]
    assert "its requests exceed what one node can allocate (inf2.8xlarge:" in errors[job]
    assert f"{names.NEURONCORE_RESOURCE} 8 > 2" in errors[job]


def test_a_pod_another_accelerator_pool_could_run_fails() -> None:
    """An inf2 NodePool carrying g6e's label and tolerating nothing takes g6e's pods too."""
    platform = _reference().with_node_provisioning("karpenter")

    def mimic(template: dict[str, Any]) -> None:
        template["metadata"]["labels"] = {NODE_POOL_LABEL: "g6e"}
        template["spec"]["taints"] = []
        for requirement in template["spec"]["requirements"]:
            if requirement["key"] == "node.kubernetes.io/instance-type":
                requirement["values"] = ["g6e.2xlarge"]

    objects = copy.deepcopy(list(_chart(platform).objects))
    for obj in objects:
        if obj["kind"] == "NodePool" and obj["metadata"]["name"] == "inf2":
            mimic(obj["spec"]["template"])
    offers = platform_offers(platform, karpenter_offers(objects))
    errors = _errors(platform, offers)
    assert "nodes of Karpenter NodePool 'inf2' can run it too" in errors[MISTRAL]


def test_a_pool_no_provisioner_starts_fails() -> None:
    platform = _reference()
    offers = tuple(o for o in platform_offers(platform) if o.pool != "inf2")
    errors = _errors(platform, offers)
    assert any("which no provisioner of the platform starts" in m for m in errors.values())


def test_karpenter_reserves_memory_the_managed_nodes_do_not() -> None:
    """g6e.2xlarge by hand: 64 GiB, 7.5% hypervisor, 11 MiB x 58 pods + 255 MiB, 100 MiB."""
    g6e = INSTANCE_TYPES["g6e.2xlarge"]
    managed = allocatable(g6e, 200, karpenter=False)
    karpenter = allocatable(g6e, 200, karpenter=True)
    mib = 1024**2
    assert managed["memory"] == (65536 - 893 - 100) * mib
    assert karpenter["memory"] == (65536 - math.ceil(65536 * 0.075) - 893 - 100) * mib
    # kube-reserved CPU for 8 vCPUs: 60 + 10 + 10 + 10 millicores.
    assert managed["cpu"] == Fraction(8) - Fraction(90, 1000)
    assert managed["ephemeral-storage"] == 200 * GIB - GIB - 20 * GIB
    assert managed[names.NVIDIA_GPU_RESOURCE] == 1
    assert managed["pods"] == 58


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Fraction(1, 10)),
        ("8Gi", Fraction(8 * GIB)),
        ("2", Fraction(2)),
        ("1e3", Fraction(1000)),
        ("1.5G", Fraction(1_500_000_000)),
    ],
)
def test_quantities(text: str, value: Fraction) -> None:
    assert quantity(text) == value


def test_a_managed_offer_is_the_node_group_of_the_pool() -> None:
    pool = NodePool(name="gpus", instance_types=("g6e.2xlarge",), max_size=2)
    offer = managed_offer(pool)
    assert offer.labels[NODE_POOL_LABEL] == frozenset({"gpus"})
    assert offer.taints == (Taint(names.NVIDIA_GPU_RESOURCE, "true", "NoSchedule"),)
    assert not offer.karpenter


def test_manifests_hold_the_karpenter_objects_only_in_karpenter_mode() -> None:
    platform = _reference()
    assert KARPENTER_FILE not in render_files(platform, CONTEXT)
    karpenter = platform.with_node_provisioning("karpenter")
    files = render_files(karpenter, CONTEXT)
    objects = list(yaml.safe_load_all(files[KARPENTER_FILE]))
    assert objects == [*_chart(karpenter).to_json()]
    # The serving manifests do not depend on the mode.
    managed_files = render_files(platform, CONTEXT)
    assert {k: v for k, v in files.items() if k != KARPENTER_FILE} == managed_files


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (
            {"node_provisioning": "karpenter", "pool": {"min_size": 0}},
            "node_pools.0.min_size",
            "runs Karpenter itself and nothing else starts its first node",
        ),
        (
            {"node_provisioning": "karpenter", "cluster_name": "c" * 47},
            "cluster_name",
            "use a cluster name of at most 46 characters",
        ),
        (
            {"gpu": {"capacity_type": "RESERVED", "capacity_reservation_ids": [RESERVATION]}},
            "node_pools.2.capacity_type",
            "cannot launch into Capacity Reservations; use node_provisioning: karpenter",
        ),
        (
            {"gpu": {"capacity_type": "SPOT", "fallback_capacity_types": ["ON_DEMAND"]}},
            "node_pools.2.fallback_capacity_types",
            "fallbacks need node_provisioning: karpenter",
        ),
        (
            {
                "node_provisioning": "karpenter",
                "pool": {"capacity_type": "RESERVED", "capacity_reservation_ids": [RESERVATION]},
            },
            "node_pools.0.capacity_type",
            "managed node group, which cannot launch into Capacity Reservations",
        ),
    ],
)
def test_platform_rules_of_each_mode(edit: dict[str, Any], field: str, message: str) -> None:
    data: dict[str, Any] = reference()
    for key in ("node_provisioning", "cluster_name"):
        if key in edit:
            data[key] = edit[key]
    data["node_pools"][0].update(edit.get("pool", {}))
    data["node_pools"][2].update(edit.get("gpu", {}))
    with pytest.raises(ValidationError) as raised:
        PlatformSpec.model_validate(data)
    errors = errors_by_field(raised.value)
    assert message in errors[field], errors


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ({"capacity_type": "RESERVED"}, "RESERVED capacity needs capacity_reservation_ids"),
        ({"capacity_reservation_ids": [RESERVATION]}, "only used with RESERVED capacity"),
        (
            {"capacity_type": "ON_DEMAND", "fallback_capacity_types": ["SPOT"]},
            "set capacity_type: SPOT and list ON_DEMAND as its fallback",
        ),
        ({"capacity_type": "SPOT", "fallback_capacity_types": ["SPOT"]}, "repeat one"),
        (
            {"capacity_type": "RESERVED", "capacity_reservation_ids": ["r-1"]},
            "are not Capacity Reservation ids",
        ),
    ],
)
def test_capacity_rules_of_a_pool(pool: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        NodePool.model_validate({"name": "g6e", "instance_types": ["g6e.2xlarge"], **pool})
