"""Every object's labels and metadata, its canonical field order and its size bound.

Objects carry the standard labels
(https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/) and explicit,
stable names; :func:`api_object` assembles an object in the field order ``kubectl`` prints, and
:func:`check_object_size` refuses one the API server would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from eks_inference.names import COMPONENT_LABEL, INFERENCE_NAMESPACE, INSTANCE_LABEL
from eks_inference.specification.deployment import ModelDeploymentSpec

# The value of the standard labels part-of and managed-by.
PART_OF = "eks-inference"


def object_labels(spec: ModelDeploymentSpec, component: str) -> dict[str, str]:
    """Labels of every object (and pod) belonging to ``spec``'s ``component``."""
    return {
        INSTANCE_LABEL: spec.name,
        COMPONENT_LABEL: component,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": PART_OF,
    }


def selector_labels(spec: ModelDeploymentSpec, component: str) -> dict[str, str]:
    """The labels that pick out ``spec``'s ``component`` pods: instance and component."""
    return {INSTANCE_LABEL: spec.name, COMPONENT_LABEL: component}


def metadata(
    name: str,
    labels: Mapping[str, str],
    *,
    namespace: str | None = INFERENCE_NAMESPACE,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Object metadata with an explicit, stable name, in the inference namespace by default.

    Names are explicit rather than generated so that clients, dashboards and runbooks can rely
    on them (the vLLM Service is reachable as ``<deployment>.inference.svc:8000``). Pass
    ``namespace=None`` for cluster-scoped objects.
    """
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def api_object(
    api_version: str,
    kind: str,
    meta: Mapping[str, Any],
    body: Mapping[str, Any],
    *,
    canonical_order: bool = True,
) -> dict[str, Any]:
    """A Kubernetes object: ``apiVersion``, ``kind``, ``metadata``, then ``body``'s fields.

    With ``canonical_order`` every mapping's keys are sorted (as ``kubectl`` prints them), so
    the YAML reads the same however the object was assembled. A custom resource whose
    fields are written in a deliberate reading order (the RayService) keeps its order.
    """
    fields = _sorted_keys(body) if canonical_order else dict(body)
    return {"apiVersion": api_version, "kind": kind, "metadata": _sorted_keys(meta), **fields}


def service_account(name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The ServiceAccount ``name`` of a deployment's pods, which never mounts its token.

    No pod of the platform calls the Kubernetes API with its account; AWS access comes from
    Pod Identity, which projects a token of its own. A pod that needs the API (the Ray head,
    for its autoscaler) asks for the token in its own spec.
    """
    return api_object(
        "v1", "ServiceAccount", metadata(name, labels), {"automountServiceAccountToken": False}
    )


def cluster_ip_service(
    name: str,
    labels: Mapping[str, str],
    selector: Mapping[str, str],
    ports: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The in-cluster Service ``name`` of the pods ``selector`` matches, on ``ports``."""
    return api_object(
        "v1",
        "Service",
        metadata(name, labels),
        {"spec": {"type": "ClusterIP", "selector": dict(selector), "ports": list(ports)}},
    )


# Values that are returned as they are; checked by exact type first because the abstract
# class check below costs more than the copy, and nearly every value is one of these.
_LEAVES = frozenset({str, int, bool, float, type(None)})


def _sorted_keys(value: Any) -> Any:
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is dict or isinstance(value, Mapping):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


# The API server refuses a request body over 3 MiB and etcd a value over 1.5 MiB; a ConfigMap's
# data may not exceed 1 MiB. Any object above 1 MiB comes from a runaway input, not a design.
MAX_OBJECT_BYTES = 1024 * 1024


def check_object_size(obj: Mapping[str, Any]) -> None:
    """Refuse an object larger than :data:`MAX_OBJECT_BYTES` as JSON, naming it."""
    # ASCII text (non-ASCII characters escaped): its length is its size in bytes.
    size = len(json.dumps(obj, separators=(",", ":")))
    if size > MAX_OBJECT_BYTES:
        meta = obj.get("metadata", {})
        raise ValueError(
            f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name')} renders to "
            f"{size:,} bytes, more than the {MAX_OBJECT_BYTES:,} bytes a Kubernetes object may "
            "hold; look for an oversized value in the deployment's spec"
        )
