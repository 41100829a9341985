"""Read a synthesized platform back: each deployment's nested template, manifests and grants.

Manifests are JSON strings inside ``Custom::AWSCDK-EKS-KubernetesResource`` properties, joined
with tokens (the bucket name arrives as a nested-stack parameter, the Neuron Ray image URI is
an ``Fn::Sub`` of pseudo parameters). :class:`Resolver` evaluates the few intrinsics that occur
the way CloudFormation would for the platform's account and region, so tests compare plain
objects and strings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from graphlib import TopologicalSorter
from typing import Any

from aws_cdk import Stack

from eks_inference.charts.artifacts_gate import COMPILE_JOB_ROLE
from eks_inference.charts.render import render_platform
from eks_inference.names import COMPONENT_LABEL
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.synthesis import STACK_NAME, Synthesized

MANIFEST_TYPE = "Custom::AWSCDK-EKS-KubernetesResource"
# The label aws_eks_v2 adds to every object it applies, so a later update can prune objects
# that left the manifest; the one difference from what the charts render.
PRUNE_LABEL_PREFIX = "aws.cdk.eks/prune-"
_SUB_VARIABLE = re.compile(r"\$\{([^}!]+)\}")


@dataclass(frozen=True)
class Resolver:
    """Evaluates ``Ref``, ``Fn::GetAtt``, ``Fn::Join`` and ``Fn::Sub`` to strings.

    ``parameters`` are a nested stack's parameters as its parent passes them; references to
    the parent resolve against ``parent`` (the model bucket's name and ARN are all that the
    deployments reference); pseudo parameters come from ``pseudo``.
    """

    parent: Mapping[str, Any]
    pseudo: Mapping[str, str]
    parameters: Mapping[str, Any]

    def __call__(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, dict) and len(value) == 1:
            ((function, argument),) = value.items()
            if function == "Fn::Join":
                separator, parts = argument
                return str(separator).join(self(part) for part in parts)
            if function == "Fn::Sub" and isinstance(argument, str):
                return _SUB_VARIABLE.sub(lambda m: self.pseudo[m.group(1)], argument)
            if function == "Ref":
                return self._ref(argument)
            if function == "Fn::GetAtt":
                resource_id, attribute = argument
                return self._get_att(resource_id, attribute)
        raise ValueError(f"cannot resolve {value!r}")

    def _ref(self, name: str) -> str:
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.parameters:
            return Resolver(self.parent, self.pseudo, {})(self.parameters[name])
        return self._bucket_name(name)

    def _get_att(self, resource_id: str, attribute: str) -> str:
        if resource_id in self.parameters:
            raise ValueError(f"{resource_id} is a parameter, not a resource")
        if attribute == "Arn":
            return f"arn:{self.pseudo['AWS::Partition']}:s3:::{self._bucket_name(resource_id)}"
        raise ValueError(f"cannot resolve {resource_id}.{attribute}")

    def _bucket_name(self, resource_id: str) -> str:
        resource = self.parent["Resources"][resource_id]
        if resource["Type"] != "AWS::S3::Bucket":
            raise ValueError(f"unexpected reference to {resource['Type']} {resource_id}")
        name: str = resource["Properties"]["BucketName"]
        return name


def manifest_resources(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The Kubernetes manifest resources of ``template``, by logical id."""
    return {
        logical_id: resource
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == MANIFEST_TYPE
    }


def pseudo_parameters(platform: PlatformSpec) -> dict[str, str]:
    """Pseudo parameters as CloudFormation sets them when deploying ``platform``."""
    assert platform.account_id is not None, "the platform names no account"
    return {
        "AWS::AccountId": platform.account_id,
        "AWS::Region": platform.region,
        "AWS::URLSuffix": "amazonaws.com",
        "AWS::Partition": "aws",
    }


@dataclass(frozen=True)
class DeployedDeployment:
    """One deployment's nested stack: its template, the parent's resource for it, a resolver."""

    name: str
    key: str
    template: dict[str, Any]
    stack_resource_id: str
    stack_resource: dict[str, Any]
    resolve: Resolver

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.template["Resources"].items()
            if resource["Type"] == resource_type
        }

    def manifests(self) -> list[tuple[str, list[dict[str, Any]]]]:
        """``(logical id, objects)`` of every manifest, in the order they are applied."""
        manifests = self.resources(MANIFEST_TYPE)
        graph = {
            logical_id: [d for d in resource.get("DependsOn", []) if d in manifests]
            for logical_id, resource in manifests.items()
        }
        order = list(TopologicalSorter(graph).static_order())
        return [
            (logical_id, json.loads(self.resolve(manifests[logical_id]["Properties"]["Manifest"])))
            for logical_id in order
        ]

    def objects(self) -> list[dict[str, Any]]:
        """Every object applied, in order, without the label aws_eks_v2 adds for pruning."""
        return [_without_prune_label(o) for _, objects in self.manifests() for o in objects]


def deployed(synth: Synthesized, platform: PlatformSpec) -> dict[str, DeployedDeployment]:
    """Every deployment of ``platform`` as synthesized in ``synth``, by name."""
    parent = synth.templates[STACK_NAME]
    pseudo = pseudo_parameters(platform)
    result = {}
    for spec in platform.deployments:
        nested = Stack.of(synth.stack.deployments[spec.name])
        resource_id = synth.stack.get_logical_id(nested.nested_stack_resource)
        resource = parent["Resources"][resource_id]
        result[spec.name] = DeployedDeployment(
            name=spec.name,
            key=nested.node.path,
            template=synth.templates[nested.node.path],
            stack_resource_id=resource_id,
            stack_resource=resource,
            resolve=Resolver(parent, pseudo, resource["Properties"].get("Parameters", {})),
        )
    return result


# The account pseudo parameter resolves to, for a platform that names none (its templates are
# environment-agnostic): the manifests are rendered for the same account to compare.
_ANY_ACCOUNT = "111122223333"


def applied_differences(synth: Synthesized, platform: PlatformSpec) -> tuple[int, list[str]]:
    """How many objects ``synth`` applies, and how that differs from what
    :func:`~eks_inference.charts.render.render_platform` writes for ``platform``.

    Each deployment's nested stack must apply, in one manifest resource, exactly the objects
    written for it (the Neuron compile job only when ``neuron.run_compile_job``: the files
    always hold it), in the order written, each equal to the written one once its tokens are
    resolved and the pruning label taken off. A deployment on an FSx for Lustre file system
    the stack creates cannot be rendered outside CDK (its id is known once deployed): it is
    checked for one manifest resource only.
    """
    if platform.account_id is None:
        platform = platform.model_copy(update={"account_id": _ANY_ACCOUNT})
    renderable = [spec for spec in platform.deployments if not _on_a_created_file_system(spec)]
    rendered = render_platform(platform.model_copy(update={"deployments": renderable}))
    differences: list[str] = []
    compared = 0
    deployments = deployed(synth, platform)
    if set(rendered) != {spec.name for spec in renderable}:
        differences.append(f"deployments {sorted(rendered)} rendered of {sorted(deployments)}")
    for name, deployment in deployments.items():
        resources = deployment.resources(MANIFEST_TYPE)
        if len(resources) != 1:
            differences.append(f"{name}: {len(resources)} manifest resources, not one")
        if name not in rendered:
            continue
        expected = [
            o
            for o in rendered.get(name, [])
            if platform.deployment(name).neuron_options.run_compile_job
            or o["metadata"]["labels"][COMPONENT_LABEL] != COMPILE_JOB_ROLE
        ]
        applied = deployment.objects()
        if [_identity(o) for o in applied] != [_identity(o) for o in expected]:
            differences.append(f"{name}: applies {[_identity(o) for o in applied]}")
            continue
        differences += [
            f"{name}: {_identity(ours)} differs"
            for ours, theirs in zip(applied, expected, strict=True)
            if ours != theirs
        ]
        compared += len(applied)
    return compared, differences


def _on_a_created_file_system(spec: ModelDeploymentSpec) -> bool:
    lustre = spec.weights.fsx
    return spec.weights.loader == "fsx" and (lustre is None or lustre.file_system_id is None)


def _identity(obj: Mapping[str, Any]) -> str:
    metadata = obj["metadata"]
    return f"{obj['kind']} {metadata.get('namespace', '')}/{metadata['name']}"


def _without_prune_label(obj: dict[str, Any]) -> dict[str, Any]:
    labels = obj.get("metadata", {}).get("labels", {})
    pruning = [k for k in labels if k.startswith(PRUNE_LABEL_PREFIX)]
    assert len(pruning) == 1, f"{obj['kind']} {obj['metadata'].get('name')}: {pruning}"
    kept = {k: v for k, v in labels.items() if k not in pruning}
    metadata = {**obj["metadata"], "labels": kept}
    if not kept:
        del metadata["labels"]
    return {**obj, "metadata": metadata}


@dataclass(frozen=True)
class Statement:
    """One IAM policy statement, resolved, with the principal (role logical id) it applies to."""

    template: str
    role: str
    actions: frozenset[str]
    resources: tuple[str, ...]
    conditions: dict[str, Any]
    effect: str


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statements(
    synth: Synthesized, platform: PlatformSpec, resolvers: Mapping[str, Resolver]
) -> Iterator[Statement]:
    """Every statement of every identity policy in every template, by the role it applies to.

    Covers ``AWS::IAM::Policy`` and ``AWS::IAM::ManagedPolicy`` (through their ``Roles``) and
    roles' inline ``Policies``. ``resolvers`` gives each nested template's resolver (by
    template key); the parent's resolves against itself.
    """
    parent = synth.templates[STACK_NAME]
    pseudo = pseudo_parameters(platform)
    for key, template in synth.templates.items():
        resolve = resolvers.get(key, Resolver(parent, pseudo, {}))
        for logical_id, resource in template["Resources"].items():
            props = resource.get("Properties", {})
            documents: list[tuple[str, dict[str, Any]]] = []
            if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                documents = [(r["Ref"], props["PolicyDocument"]) for r in props.get("Roles", [])]
            elif resource["Type"] == "AWS::IAM::Role":
                documents = [(logical_id, p["PolicyDocument"]) for p in props.get("Policies", [])]
            for role, document in documents:
                for statement in document["Statement"]:
                    yield Statement(
                        template=key,
                        role=role,
                        actions=frozenset(_as_list(statement.get("Action", []))),
                        resources=tuple(
                            _resolve_lenient(resolve, r)
                            for r in _as_list(statement.get("Resource", []))
                        ),
                        conditions=statement.get("Condition", {}),
                        effect=statement["Effect"],
                    )


def _resolve_lenient(resolve: Resolver, value: Any) -> str:
    """A resource ARN as a string; tokens that are not the bucket's are kept as their JSON."""
    try:
        return resolve(value)
    except (ValueError, KeyError):
        return json.dumps(value, sort_keys=True)
