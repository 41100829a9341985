"""The networks the stack's internal load balancer accepts clients from, in a VPC the stack
creates and in one it is given: the cluster's VPC range, the same value the deployments'
NetworkPolicies admit the load balancer from."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2

from eks_inference.charts.ingress import ALB_ANNOTATION_PREFIX, ENDPOINT_ROLE
from eks_inference.charts.network_policy import ROLE as NETWORK_POLICY_ROLE
from eks_inference.charts.record import chart_id
from eks_inference.names import VPC_CIDR
from eks_inference.specification.platform import PlatformSpec
from eks_inference.stacks import InferenceStack
from tests.helpers.deployed import deployed
from tests.helpers.platforms import REFERENCE_PLATFORM
from tests.helpers.synthesis import Synthesized, cdk_context

pytestmark = [pytest.mark.synth, pytest.mark.xdist_group("synth")]

INBOUND_CIDRS = f"{ALB_ANNOTATION_PREFIX}inbound-cidrs"
OWN_VPC_CIDR = "10.20.0.0/16"


def _of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _serving_sources(objects: list[dict[str, Any]]) -> list[Any]:
    """The address ranges the serving port's NetworkPolicy admits (the load balancer's)."""
    (serving,) = [
        o for o in _of_kind(objects, "NetworkPolicy") if o["metadata"]["name"].endswith("-serving")
    ]
    return [
        peer["ipBlock"]["cidr"]
        for rule in serving["spec"]["ingress"]
        for peer in rule["from"]
        if "ipBlock" in peer
    ]


def test_the_reference_load_balancer_accepts_the_vpc_the_stack_creates(
    reference: Synthesized,
) -> None:
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    assert platform.endpoint is not None
    assert platform.endpoint.source_cidrs == ()
    for name, deployment in deployed(reference, platform).items():
        objects = deployment.objects()
        (ingress,) = _of_kind(objects, "Ingress")
        assert ingress["metadata"]["annotations"][INBOUND_CIDRS] == VPC_CIDR, name
        assert _serving_sources(objects) == [VPC_CIDR], name


def test_a_stack_in_a_vpc_of_its_own_accepts_that_vpc() -> None:
    """The VPC's range is a token at synth (an attribute of another stack's VPC): the Ingress
    annotation and the policy carry that one token, never the default range."""
    app = App(context=cdk_context())
    network = Stack(app, "Network")
    vpc = ec2.Vpc(network, "Vpc", ip_addresses=ec2.IpAddresses.cidr(OWN_VPC_CIDR), max_azs=2)
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    stack = InferenceStack(app, "Inference", platform=platform, vpc=vpc)
    own_range = network.resolve(vpc.vpc_cidr_block)
    assert own_range["Fn::GetAtt"][1] == "CidrBlock"
    assert set(platform.routes()) == set(stack.deployments)
    for name, deployment in stack.deployments.items():
        charts = {chart.chart_id: chart for chart in deployment.charts}
        objects = [
            o
            for role in (NETWORK_POLICY_ROLE, ENDPOINT_ROLE)
            for o in network.resolve(charts[chart_id(name, role)].to_json())
        ]
        (ingress,) = _of_kind(objects, "Ingress")
        assert ingress["metadata"]["annotations"][INBOUND_CIDRS] == own_range, name
        assert _serving_sources(objects) == [own_range], name
