"""The pieces NetworkPolicies are written with: pod selectors, peers, ports, rules, policies.

Plain JSON, no cdk8s, shared by the deployment's policy chart
(:mod:`eks_inference.charts.network_policy`) and the engines that allow flows of their own
(:meth:`~eks_inference.charts.serving.ServingEngine.network_policies`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eks_inference.charts.metadata import api_object, metadata
from eks_inference.charts.pod import Json
from eks_inference.names import COMPONENT_LABEL, INSTANCE_LABEL
from eks_inference.specification.deployment import ModelDeploymentSpec

NETWORK_POLICY_API_VERSION = "networking.k8s.io/v1"
# The label Kubernetes gives every namespace, valued with its name (immutable).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def components(spec: ModelDeploymentSpec, components: Sequence[str]) -> Json:
    """Selector of ``spec``'s pods of any of ``components``."""
    return {
        "matchLabels": {INSTANCE_LABEL: spec.name},
        "matchExpressions": [
            {"key": COMPONENT_LABEL, "operator": "In", "values": list(components)}
        ],
    }


def peer(namespace: str, pod_labels: Mapping[str, str]) -> Json:
    """The pods labelled ``pod_labels`` in ``namespace``."""
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
        "podSelector": {"matchLabels": dict(pod_labels)},
    }


def ports(*ports: int | str, protocol: str = "TCP") -> list[Json]:
    """``ports`` (numbers, or container port names resolved on the receiving pod) over one
    protocol."""
    return [{"port": port, "protocol": protocol} for port in ports]


def rule(direction: str, peers: list[Json], ports: list[Json]) -> Json:
    """A rule admitting ``peers`` (``direction`` ``from`` for ingress, ``to`` for egress)."""
    return {direction: peers, "ports": ports}


def policy(
    name: str,
    labels: Mapping[str, str],
    pods: Json,
    *,
    ingress: list[Json] | None = None,
    egress: list[Json] | None = None,
) -> Json:
    """A NetworkPolicy selecting ``pods``, for the directions it is given rules for.

    ``policyTypes`` is written out: a policy with no egress rules would otherwise not be
    taken for an egress policy, and an empty list of rules allows nothing.
    """
    body: Json = {"podSelector": pods, "policyTypes": []}
    if ingress is not None:
        body["policyTypes"].append("Ingress")
        body["ingress"] = ingress
    if egress is not None:
        body["policyTypes"].append("Egress")
        body["egress"] = egress
    return api_object(
        NETWORK_POLICY_API_VERSION, "NetworkPolicy", metadata(name, labels), {"spec": body}
    )
