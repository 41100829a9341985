"""The EC2NodeClasses of pools with EFA, and the nodes Karpenter is then known to offer.

A pool with ``efa`` lists its nodes' network interfaces (the primary ENA interface and one
EFA-only interface per network card), selects its cluster placement group and adds its EFA
security group, both by the names the CloudFormation side gives them. Each class is valid
against the pinned Karpenter 1.14.1 CRD's schema; the CRD's CEL rules on those fields, which
the schema validator does not evaluate, are each written out here and held against the
rendered class (a rule the pinned CRD gains or changes fails the test until it is written
out too). Karpenter counts a node's ``vpc.amazonaws.com/efa`` from the EFA-only interfaces of
its class, and so do the offers the scheduling check reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
import yaml

from eks_inference.catalog import INSTANCE_TYPES
from eks_inference.charts.contract import PodNeed, Toleration
from eks_inference.charts.karpenter import karpenter_chart, karpenter_offers, node_class
from eks_inference.charts.scheduling import NodeOffer, allocatable, unmet
from eks_inference.names import EFA_RESOURCE, KARPENTER_DISCOVERY_TAG, NODE_POOL_LABEL
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.checks import found
from tests.helpers.objects import crd_validator, schema_errors
from tests.helpers.platforms import CRDS, REPO

EXAMPLE = REPO / "examples" / "multi-node.yaml"
NODE_CLASS_CRD = CRDS / "karpenter.k8s.aws_ec2nodeclasses.yaml"
CLUSTER = "eks-inference-multi-node"
EFA_CARDS = {"p5": 32, "g6e": 4}
Spec = dict[str, Any]


def _platform() -> PlatformSpec:
    return PlatformSpec.from_yaml(EXAMPLE).with_node_provisioning("karpenter")


def _objects() -> list[dict[str, Any]]:
    platform = _platform()
    return karpenter_chart(
        cluster_name=platform.cluster_name,
        pools=platform.node_pools,
        deployments=platform.deployments,
    ).to_json()


def _classes() -> dict[str, Spec]:
    return {o["metadata"]["name"]: o for o in _objects() if o["kind"] == "EC2NodeClass"}


def _pairs(interfaces: list[Spec]) -> list[tuple[int, int]]:
    return [(x["networkCardIndex"], x["deviceIndex"]) for x in interfaces]


def _primary(interfaces: list[Spec]) -> bool:
    return not interfaces or any(
        (x["networkCardIndex"], x["deviceIndex"], x["interfaceType"]) == (0, 0, "interface")
        for x in interfaces
    )


def _unique_with_one_efa_per_card(interfaces: list[Spec]) -> bool:
    pairs = _pairs(interfaces)
    efa_cards = [x["networkCardIndex"] for x in interfaces if x["interfaceType"] == "efa-only"]
    return all(pairs.count(p) == 1 for p in pairs) and all(
        efa_cards.count(card) == 1 for card in efa_cards
    )


def _one_of_name_or_id(selector: Spec) -> bool:
    return ("name" in selector) != ("id" in selector)


# Each CEL rule of the pinned CRD on the fields EFA sets, as Python: field -> rule -> check.
CEL_RULES: dict[str, dict[str, Callable[[Any], bool]]] = {
    "networkInterfaces": {
        "self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 "
        "&& x.interfaceType == 'interface')": _primary,
        "self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && "
        "x.deviceIndex == y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || "
        "self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == "
        "'efa-only').size() == 1))": _unique_with_one_efa_per_card,
    },
    "placementGroupSelector": {
        "has(self.name) || has(self.id)": lambda s: "name" in s or "id" in s,
        "!(has(self.name) && has(self.id))": _one_of_name_or_id,
    },
    "securityGroupSelectorTerms": {
        "self.size() != 0": lambda terms: len(terms) != 0,
        "self.all(x, has(x.tags) || has(x.id) || has(x.name))": lambda terms: all(
            {"tags", "id", "name"} & set(t) for t in terms
        ),
        "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))": lambda terms: (
            not all("id" in t and ("tags" in t or "name" in t) for t in terms)
        ),
        "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))": lambda terms: (
            not all("name" in t and ("tags" in t or "id" in t) for t in terms)
        ),
    },
}


def _pinned_rules() -> dict[str, list[str]]:
    """The CEL rules of the pinned CRD's v1 schema on each field of :data:`CEL_RULES`."""
    crd = next(d for d in yaml.safe_load_all(NODE_CLASS_CRD.read_text()) if d)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    return {
        field: [v["rule"] for v in spec[field].get("x-kubernetes-validations", [])]
        for field in CEL_RULES
    }


def test_the_cel_rules_written_out_are_the_pinned_crds() -> None:
    pinned = _pinned_rules()
    for field, rules in CEL_RULES.items():
        assert sorted(pinned[field]) == sorted(rules), field


@pytest.mark.parametrize("pool", sorted(EFA_CARDS))
def test_the_node_class_lists_one_efa_per_network_card(pool: str) -> None:
    spec = _classes()[pool]["spec"]
    interfaces = spec["networkInterfaces"]
    cards = EFA_CARDS[pool]
    assert [(x["networkCardIndex"], x["deviceIndex"], x["interfaceType"]) for x in interfaces] == [
        (0, 0, "interface"),
        (0, 1, "efa-only"),
        *((card, 0, "efa-only") for card in range(1, cards)),
    ]
    name = f"efa-{CLUSTER}-{pool}"
    assert spec["placementGroupSelector"] == {"name": name}
    assert spec["securityGroupSelectorTerms"] == [
        {"tags": {KARPENTER_DISCOVERY_TAG: CLUSTER}},
        {"name": name},
    ]


@pytest.mark.parametrize("pool", sorted(EFA_CARDS))
def test_the_node_class_is_valid_against_the_pinned_crd_and_its_cel_rules(pool: str) -> None:
    node_class_obj = _classes()[pool]
    assert schema_errors(crd_validator(NODE_CLASS_CRD, "v1"), node_class_obj) == []
    spec = node_class_obj["spec"]
    for field, rules in CEL_RULES.items():
        for rule, check in rules.items():
            assert check(spec[field]), f"{field}: {rule}"


def test_the_cel_checks_refuse_what_the_crd_refuses() -> None:
    """The checks written out are not vacuous: each refuses a layout the rule refuses."""
    interfaces = CEL_RULES["networkInterfaces"]
    no_primary = [{"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"}]
    two_efas = [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
        {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"},
    ]
    rules = list(interfaces.values())
    assert not rules[0](no_primary)
    assert not rules[1](two_efas)
    assert not CEL_RULES["placementGroupSelector"]["!(has(self.name) && has(self.id))"](
        {"name": "a", "id": "pg-1"}
    )


def test_other_pools_get_no_interfaces_and_no_placement() -> None:
    classes = _classes()
    assert set(classes) == {"system", *EFA_CARDS}
    system = classes["system"]["spec"]
    assert "networkInterfaces" not in system
    assert "placementGroupSelector" not in system
    # A GPU pool of an instance type with EFA but serving on one node leaves it off.
    single = NodePool(name="g6e-single", instance_types=("g6e.48xlarge",), zones=(0,))
    spec = node_class(CLUSTER, single)["spec"]
    assert "networkInterfaces" not in spec
    assert "placementGroupSelector" not in spec
    assert spec["securityGroupSelectorTerms"] == [{"tags": {KARPENTER_DISCOVERY_TAG: CLUSTER}}]


def test_karpenter_offers_count_the_efa_only_interfaces() -> None:
    offers = {o.pool: o for o in karpenter_offers(_objects())}
    assert {pool: offers[pool].efa_interfaces for pool in offers} == {
        "system": 0,
        **EFA_CARDS,
    }


def _efa_pod(offer: NodeOffer, efas: int) -> PodNeed:
    """A pod of ``offer``'s pool requesting ``efas`` EFA interfaces, tolerating its taints."""
    return PodNeed(
        path=("LeaderWorkerSet/test",),
        pool=offer.pool,
        node_selector=((NODE_POOL_LABEL, offer.pool),),
        tolerations=tuple(Toleration(t.key, "Exists", None, t.effect) for t in offer.taints),
        requests=((("cpu", "1"), ("memory", "1Gi"), (EFA_RESOURCE, str(efas))),),
    )


@pytest.mark.parametrize("pool", sorted(EFA_CARDS))
def test_a_pod_requesting_every_efa_fits_a_karpenter_node(pool: str) -> None:
    offer = next(o for o in karpenter_offers(_objects()) if o.pool == pool)
    free = allocatable(
        INSTANCE_TYPES[offer.instance_types[0]],
        offer.root_volume_gib,
        karpenter=True,
        efa_interfaces=offer.efa_interfaces,
    )
    assert free[EFA_RESOURCE] == Fraction(EFA_CARDS[pool])
    assert unmet(_efa_pod(offer, EFA_CARDS[pool]), offer) == []
    assert found(unmet(_efa_pod(offer, EFA_CARDS[pool] + 1), offer))
    # A class without the interfaces would leave the pod Pending.
    assert found(unmet(_efa_pod(offer, 1), dataclasses.replace(offer, efa_interfaces=0)))


@pytest.mark.parametrize(
    "instance_type", sorted(name for name, t in INSTANCE_TYPES.items() if t.efa)
)
def test_every_instance_type_with_efa_gets_a_valid_class_of_its_card_count(
    instance_type: str,
) -> None:
    pool = NodePool(name="fabric", instance_types=(instance_type,), zones=(0,), efa=True)
    node_class_obj = node_class(CLUSTER, pool)
    assert schema_errors(crd_validator(NODE_CLASS_CRD, "v1"), node_class_obj) == []
    spec = node_class_obj["spec"]
    for field, rules in CEL_RULES.items():
        for rule, check in rules.items():
            assert check(spec[field]), f"{field}: {rule}"
    efa_only = [x for x in spec["networkInterfaces"] if x["interfaceType"] == "efa-only"]
    assert len(efa_only) == INSTANCE_TYPES[instance_type].efa_interfaces == pool.efa_interfaces
