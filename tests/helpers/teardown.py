"""The order in which CloudFormation deletes a synthesized app, read from its templates.

CloudFormation deletes a resource before everything it depends on: what its ``DependsOn``
names and what its properties reference (``Ref``, ``Fn::GetAtt``, ``Fn::Sub``). A nested
stack's resources are all deleted before its ``AWS::CloudFormation::Stack`` resource in the
parent is, so they are deleted before everything that resource depends on too.
:class:`DeletionOrder` follows both, across every template of a :class:`Synthesized` app.

Objects a controller turns into AWS resources (:func:`controlled_objects`) are found in the
manifests CloudFormation applies, and the Helm releases whose workloads claim volumes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.helpers.deployed import MANIFEST_TYPE
from tests.helpers.synthesis import Synthesized

HELM_TYPE = "Custom::AWSCDK-EKS-HelmChart"
CLAIMS = "volume claims"
Node = tuple[str, str]
"""A resource: ``(template key, logical id)``, keyed as :class:`Synthesized` keys templates."""
_SUB_REFERENCE = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}")


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def references(value: Any) -> Iterator[str]:
    """Logical ids (and parameters, pseudo parameters) that ``value`` references."""
    if isinstance(value, list):
        for item in value:
            yield from references(item)
    elif isinstance(value, dict):
        for function, argument in value.items():
            if function == "Ref":
                yield argument
            elif function == "Fn::GetAtt":
                yield argument[0] if isinstance(argument, list) else argument.split(".")[0]
            elif function == "Fn::Sub":
                text, variables = (argument, {}) if isinstance(argument, str) else argument
                yield from (m for m in _SUB_REFERENCE.findall(text) if m not in variables)
                yield from references(variables)
            else:
                yield from references(argument)


@dataclass
class DeletionOrder:
    """Which resources CloudFormation deletes after which, in every template of an app."""

    synth: Synthesized
    dependencies: dict[Node, set[Node]] = field(init=False)
    _after: dict[Node, frozenset[Node]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        files = {path.name: key for key, path in self.synth.template_files.items()}
        stack_resource: dict[str, Node] = {}
        for key, template in self.synth.templates.items():
            for logical_id, resource in template["Resources"].items():
                if resource["Type"] == "AWS::CloudFormation::Stack":
                    nested = files[resource["Metadata"]["aws:asset:path"]]
                    stack_resource[nested] = (key, logical_id)
        self.dependencies = {}
        for key, template in self.synth.templates.items():
            ids = template["Resources"].keys()
            for logical_id, resource in template["Resources"].items():
                named = _as_list(resource.get("DependsOn", []))
                referenced = references(resource.get("Properties", {}))
                depends = {(key, d) for d in (*named, *referenced) if d in ids}
                if key in stack_resource:
                    depends.add(stack_resource[key])
                self.dependencies[(key, logical_id)] = depends

    def deleted_after(self, node: Node) -> frozenset[Node]:
        """Every resource CloudFormation deletes only once ``node`` is deleted."""
        if node not in self._after:
            found: set[Node] = set()
            stack = list(self.dependencies[node])
            while stack:
                current = stack.pop()
                if current not in found:
                    found.add(current)
                    stack.extend(self.dependencies[current])
            self._after[node] = frozenset(found)
        return self._after[node]

    def resources(self, resource_type: str) -> Iterator[tuple[Node, dict[str, Any]]]:
        """``(node, resource)`` of every resource of ``resource_type`` in every template."""
        for key, logical_id, resource in self.synth.all_resources(resource_type):
            yield (key, logical_id), resource

    def helm_release(self, chart: str) -> Node:
        """The one Helm release of ``chart``."""
        (node,) = [n for n, r in self.resources(HELM_TYPE) if r["Properties"]["Chart"] == chart]
        return node

    def eks_addon(self, name: str) -> Node:
        """The one EKS managed add-on called ``name``."""
        (node,) = [
            n for n, r in self.resources("AWS::EKS::Addon") if r["Properties"]["AddonName"] == name
        ]
        return node

    def nodegroup(self, label: str, pool: str) -> Node:
        """The managed node group of the pool whose nodes carry ``label: pool``."""
        (node,) = [
            n
            for n, r in self.resources("AWS::EKS::Nodegroup")
            if r["Properties"].get("Labels", {}).get(label) == pool
        ]
        return node


def manifest_objects(resource: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The objects a manifest custom resource applies; tokens (a file system's DNS name, a
    bucket's) read as ``TOKEN``."""
    manifest = resource["Properties"]["Manifest"]
    if isinstance(manifest, dict):
        separator, parts = manifest["Fn::Join"]
        manifest = separator.join(p if isinstance(p, str) else "TOKEN" for p in parts)
    objects: list[dict[str, Any]] = json.loads(manifest)
    return objects


@dataclass(frozen=True)
class Controlled:
    """Something CloudFormation applies that a controller turns into AWS resources."""

    node: Node
    kind: str
    """Its kind, or ``volume claims`` for a Helm release whose workloads claim volumes."""
    what: str
    """What it is, e.g. ``Ingress inference/mistral-7b-g6e``."""
    controller: str
    """The chart (Helm release) or EKS add-on name of its controller."""
    nodes_and_cluster: bool
    """Whether its AWS resources are made and deleted by a controller on the system nodes
    (the load balancer, instances, a dynamically provisioned volume); a static volume only
    needs its driver, and the file system the template holds."""


def controlled_objects(
    order: DeletionOrder,
    *,
    ingress_controllers: Mapping[str, str],
    node_provisioner_kinds: frozenset[str],
    node_provisioner: str,
    csi_drivers: Mapping[str, str],
    provisioned_storage_classes: Mapping[str, str],
    claiming_releases: Mapping[str, str],
) -> list[Controlled]:
    """Every controller-owned object of the app, with its controller.

    ``ingress_controllers``: IngressClass -> chart of its controller (a Service of type
    ``LoadBalancer`` counts as the first class's); ``node_provisioner_kinds`` are made into
    instances by the ``node_provisioner`` chart; ``csi_drivers``: a static PersistentVolume's
    CSI driver -> its add-on; ``provisioned_storage_classes``: a claim's StorageClass -> the
    add-on whose driver creates its volume; ``claiming_releases``: a Helm chart whose
    workloads claim volumes -> the add-on that creates them.
    """
    found: list[Controlled] = []
    for node, resource in order.resources(MANIFEST_TYPE):
        for obj in manifest_objects(resource):
            kind = obj["kind"]
            meta = obj["metadata"]
            what = f"{kind} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " ")
            spec = obj.get("spec", {})
            if kind == "Ingress":
                controller = ingress_controllers[spec["ingressClassName"]]
                found.append(Controlled(node, kind, what, controller, nodes_and_cluster=True))
            elif kind == "Service" and spec.get("type") == "LoadBalancer":
                controller = next(iter(ingress_controllers.values()))
                found.append(Controlled(node, kind, what, controller, nodes_and_cluster=True))
            elif kind in node_provisioner_kinds:
                found.append(Controlled(node, kind, what, node_provisioner, nodes_and_cluster=True))
            elif kind == "PersistentVolume":
                driver = csi_drivers[spec["csi"]["driver"]]
                found.append(Controlled(node, kind, what, driver, nodes_and_cluster=False))
            elif kind == "PersistentVolumeClaim" and not spec.get("volumeName"):
                driver = provisioned_storage_classes[spec["storageClassName"]]
                found.append(Controlled(node, kind, what, driver, nodes_and_cluster=True))
    for node, resource in order.resources(HELM_TYPE):
        chart = resource["Properties"]["Chart"]
        if chart in claiming_releases:
            what = f"the volume claims of Helm release {resource['Properties']['Release']}"
            driver = claiming_releases[chart]
            found.append(Controlled(node, CLAIMS, what, driver, nodes_and_cluster=True))
    return found
