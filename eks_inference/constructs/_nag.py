"""Acknowledging cdk-nag findings precisely: one finding, one construct, one written reason.

cdk-nag 3 reads acknowledgments from the construct tree (``Validations.of(...).acknowledge``)
and matches them by exact finding id, e.g. ``AwsSolutions-IAM5[Resource::<Bucket.Arn>/p/*]``.
These helpers build those ids the way cdk-nag renders them, so an acknowledgment names the
very resource it accepts and nothing broader.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_iam as iam
from constructs import IConstruct

from eks_inference.constructs._stacks import stack_of


def acknowledge(scope: IConstruct, rule_id: str | Sequence[str], reason: str) -> None:
    """Accept ``rule_id`` (or each of several) on ``scope`` and everything below it, with the
    reason recorded."""
    rule_ids = [rule_id] if isinstance(rule_id, str) else rule_id
    if rule_ids:
        Validations.of(scope).acknowledge(
            *(Acknowledgment(id=rule, reason=reason) for rule in rule_ids)
        )


def acknowledge_each(scope: IConstruct, reasons: Mapping[str, str]) -> None:
    """Accept each finding of ``reasons`` on ``scope`` with its own reason, in one call."""
    if reasons:
        Validations.of(scope).acknowledge(
            *(Acknowledgment(id=rule, reason=reason) for rule, reason in reasons.items())
        )


def flatten_reference(scope: IConstruct, value: Any) -> str:
    """Render a (possibly tokenised) value as cdk-nag does: ``{"Ref": "X"}`` -> ``<X>``."""
    return _flatten(stack_of(scope).resolve(value))


def wildcard_resource_finding(scope: IConstruct, resource: Any) -> str:
    """The AwsSolutions-IAM5 finding id for one wildcard resource of a policy statement."""
    return f"AwsSolutions-IAM5[Resource::{flatten_reference(scope, resource)}]"


def wildcard_resource_findings(scope: IConstruct, resources: list[Any]) -> list[str]:
    """:func:`wildcard_resource_finding` for several resources, resolved in one call."""
    resolved = stack_of(scope).resolve(resources) if resources else []
    return [f"AwsSolutions-IAM5[Resource::{_flatten(value)}]" for value in resolved]


def wildcard_grant_reasons(
    scope: IConstruct, statements: Sequence[iam.PolicyStatement]
) -> tuple[dict[str, str], list[str]]:
    """The AwsSolutions-IAM5 finding of each wildcard resource of ``statements``, with a reason
    written from what they grant, and the resources that no reason can accept.

    A reason names the actions granted on that resource, the resource as cdk-nag renders it and
    the statements' conditions, all read from the statements (resolved in one call), so it
    says exactly what is granted and can never claim less. It is written only for a resource
    whose one wildcard is a trailing ``*`` after a literal part with none of IAM's pattern
    characters (``*``, ``?``, ``${``), which is what "the objects below one prefix" means; any
    other wildcard resource is returned as a problem, to fail the synth rather than be
    accepted.
    """
    # One document of the statements, resolved in one call (not one call per statement); not
    # minimized, so each statement is rendered as its own toStatementJson renders it.
    document = iam.PolicyDocument(statements=list(statements), minimize=False)
    resolved = stack_of(scope).resolve(document)["Statement"]
    granted: dict[str, tuple[dict[str, None], dict[str, None]]] = {}
    problems: list[str] = []
    for statement in resolved:
        actions = _as_list(statement.get("Action", []))
        condition = statement.get("Condition")
        for resource in _as_list(statement.get("Resource", [])):
            rendered = _flatten(resource)
            if "*" not in rendered:
                continue
            literal = "".join(_literal_parts(resource))
            if not rendered.endswith("*") or any(c in literal[:-1] for c in "*?${}"):
                problems.append(
                    f"{scope.node.path}: {rendered} has a wildcard or policy variable before "
                    "its end; a grant must name one literal key prefix"
                )
                continue
            actions_of, conditions_of = granted.setdefault(rendered, ({}, {}))
            actions_of.update(dict.fromkeys(str(a) for a in actions))
            if condition:
                conditions_of[_flatten(condition)] = None
    reasons = {
        f"AwsSolutions-IAM5[Resource::{rendered}]": (
            f"Grants {', '.join(sorted(actions))} on {rendered}"
            + (f" when {' or '.join(conditions)}" if conditions else "")
            + f" only: the trailing '*' is its one wildcard, covering the names that begin with "
            f"the literal {rendered[:-1]}."
        )
        for rendered, (actions, conditions) in granted.items()
    }
    return reasons, problems


def managed_policy_finding(policy_name: str) -> str:
    """The AwsSolutions-IAM4 finding id for an AWS managed policy attached to a role."""
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy_name}]"


def acknowledge_managed_policies(scope: IConstruct, reason: str) -> None:
    """Accept, one by one, the AWS managed policies attached to the roles under ``scope``.

    For roles that CDK itself creates (the kubectl handler, custom resource providers),
    whose managed policies are chosen by CDK; each policy is acknowledged by name.
    """
    found = scope.node.find_all()
    roles = [child for child in found if isinstance(child, iam.CfnRole)]
    if not roles:
        return
    if any(isinstance(child, Stack) and child is not scope for child in found):
        # Roles in nested stacks below scope: each resolved in its own stack.
        resolved = [stack_of(role).resolve(role.managed_policy_arns) for role in roles]
    else:
        # Every role is in scope's stack: all their policies resolved in one call, keyed by
        # index since a role without managed policies resolves to nothing.
        by_index = stack_of(scope).resolve(
            {str(i): role.managed_policy_arns for i, role in enumerate(roles)}
        )
        resolved = [(by_index or {}).get(str(i)) for i in range(len(roles))]
    for role, arns in zip(roles, resolved, strict=True):
        acknowledge(
            role, [f"AwsSolutions-IAM4[Policy::{_flatten(arn)}]" for arn in arns or []], reason
        )


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _literal_parts(node: Any) -> list[str]:
    """The strings written into a resolved value, without the references in it."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict) and "Fn::Join" in node:
        return [part for item in node["Fn::Join"][1] for part in _literal_parts(item)]
    if isinstance(node, dict) and isinstance(node.get("Fn::Sub"), str):
        return [re.sub(r"\$\{[^}]*\}", "", node["Fn::Sub"])]
    return []


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
