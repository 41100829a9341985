"""Acknowledging cdk-nag findings precisely: one finding, one construct, one written reason.

cdk-nag 3 reads acknowledgments from the construct tree (``Validations.of(...).acknowledge``)
and matches them by exact finding id, e.g. ``AwsSolutions-IAM5[Resource::<Bucket.Arn>/p/*]``.
These helpers build those ids the way cdk-nag renders them, so an acknowledgment names the
very resource it accepts and nothing broader.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_iam as iam
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule_id: str | Sequence[str], reason: str) -> None:
    """Accept ``rule_id`` (or each of several) on ``scope`` and everything below it, with the
    reason recorded."""
    rule_ids = [rule_id] if isinstance(rule_id, str) else rule_id
    if rule_ids:
        Validations.of(scope).acknowledge(
            *(Acknowledgment(id=rule, reason=reason) for rule in rule_ids)
        )


def flatten_reference(scope: IConstruct, value: Any) -> str:
    """Render a (possibly tokenised) value as cdk-nag does: ``{"Ref": "X"}`` -> ``<X>``."""
    return _flatten(Stack.of(scope).resolve(value))


def wildcard_resource_finding(scope: IConstruct, resource: Any) -> str:
    """The AwsSolutions-IAM5 finding id for one wildcard resource of a policy statement."""
    return f"AwsSolutions-IAM5[Resource::{flatten_reference(scope, resource)}]"


def wildcard_resource_findings(scope: IConstruct, resources: list[Any]) -> list[str]:
    """:func:`wildcard_resource_finding` for several resources, resolved in one call."""
    resolved = Stack.of(scope).resolve(resources) if resources else []
    return [f"AwsSolutions-IAM5[Resource::{_flatten(value)}]" for value in resolved]


def managed_policy_finding(policy_name: str) -> str:
    """The AwsSolutions-IAM4 finding id for an AWS managed policy attached to a role."""
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy_name}]"


def acknowledge_managed_policies(scope: IConstruct, reason: str) -> None:
    """Accept, one by one, the AWS managed policies attached to the roles under ``scope``.

    For roles that CDK itself creates (the kubectl handler, custom resource providers),
    whose managed policies are chosen by CDK; each policy is acknowledged by name.
    """
    for child in scope.node.find_all():
        if isinstance(child, iam.CfnRole):
            arns = Stack.of(child).resolve(child.managed_policy_arns) or []
            acknowledge(
                child, [f"AwsSolutions-IAM4[Policy::{_flatten(arn)}]" for arn in arns], reason
            )


def _flatten(node: Any) -> str:
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict):
        if "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return str(delimiter).join(_flatten(item) for item in items)
        if "Fn::Sub" in node:
            return _flatten(node["Fn::Sub"])
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{_flatten(resource)}.{_flatten(attribute)}>"
        if "Fn::ImportValue" in node:
            return _flatten(node["Fn::ImportValue"])
        if "Ref" in node:
            return f"<{_flatten(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"))
