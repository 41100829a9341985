"""The jsii request counter (``python -m bench.jsii_calls``) and the stack facts kept in Python.

The counter must see every request a block sends, name its kind, target and call site, and
stop counting when the block ends. The stack helpers must give Node.js's own answers
(``Stack.of``, ``nested_stack_parent``, ``region``) and, for a nested stack whose creator
recorded it, give them without a request.
"""

from __future__ import annotations

import inspect

import pytest
from aws_cdk import App, Environment, NestedStack, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from bench.jsii_calls import counting
from eks_inference.constructs._stacks import (
    outermost_stack,
    parent_stack,
    record_construct,
    record_nested_stack,
    region_of,
    stack_of,
)

THIS_FILE = "tests/bench/test_jsii_calls.py"


def test_counter_counts_each_request_by_kind_target_and_call_site() -> None:
    app = App()
    stack = Stack(app, "Counted")
    with counting() as calls:
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"))
        arn = role.role_arn
    assert arn.startswith("${Token[")
    report = calls.as_dict()
    assert report["by_target"]["create aws_iam.Role"]["requests"] == 1
    assert report["by_target"]["create aws_iam.ServicePrincipal"]["requests"] == 1
    assert report["by_target"]["get aws_iam.Role.roleArn"]["requests"] == 1
    assert report["by_kind"]["create"]["requests"] == 2
    assert report["by_kind"]["get"]["requests"] == 1
    assert report["total"] == calls.total == 3
    sites = report["by_site"]
    assert (
        sites[
            f"{THIS_FILE}:{line} (test_counter_counts_each_request_by_kind_target_and_call_site)"
        ]["requests"]
        == 2
    )
    assert all(row["seconds"] >= 0 for row in report["by_kind"].values())
    # Requests after the block are not counted.
    iam.Role(stack, "Later", assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"))
    assert calls.total == 3


@pytest.mark.parametrize("region", [None, "eu-west-1"])
def test_stack_facts_agree_with_node_and_recorded_ones_cost_no_request(region: str | None) -> None:
    app = App()
    env = Environment(region=region) if region else None
    parent = Stack(app, "Parent", env=env)
    recorded = NestedStack(parent, "Recorded")
    record_nested_stack(recorded, parent)
    inner = Construct(recorded, "Inner")
    record_construct(inner, recorded)
    unrecorded = NestedStack(Construct(parent, "Group"), "Unrecorded")
    leaf = Construct(unrecorded, "Leaf")

    assert stack_of(leaf) is Stack.of(leaf) is unrecorded
    assert parent_stack(unrecorded) is unrecorded.nested_stack_parent is parent
    assert outermost_stack(unrecorded) is parent
    assert region_of(unrecorded) == unrecorded.region == parent.region
    assert region_of(parent)  # read once, then remembered

    with counting() as calls:
        assert stack_of(parent) is parent
        assert stack_of(inner) is recorded
        assert parent_stack(recorded) is parent
        assert outermost_stack(recorded) is parent
        answered = region_of(recorded)
        # Asked of Node.js once above: remembered.
        assert stack_of(leaf) is unrecorded
    assert calls.total == 0
    assert answered == recorded.region == parent.region
    if region is not None:
        assert answered == region
