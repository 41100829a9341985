"""Which deployment renders each object, so that no two deployments render the same one.

A deployment's objects are named after it (``<name>``, ``<name>-<suffix>``), so one
deployment's name and a suffix can be another deployment's object: a Dynamo graph ``x``
scales its prefill workers with the ScaledObject ``x-prefill``, the very name an autoscaled
vLLM deployment called ``x-prefill`` gives its own. Both would be applied, the later
overwriting the earlier, and deleting either deployment would delete the object the other
still needs. The Services the deployments need are refused at validation already
(:mod:`eks_inference.specification.service_names`); every other object is refused here, once
rendered: the second deployment to render an object fails, naming the object and both
deployments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# An object's identity on the cluster: API group, kind, namespace ("" when cluster-scoped),
# name.
ObjectKey = tuple[str, str, str, str]


def object_key(obj: dict[str, Any]) -> ObjectKey:
    """The identity of ``obj`` on the cluster (the version of its API is not part of it)."""
    group, _, _ = str(obj["apiVersion"]).rpartition("/")
    metadata = obj["metadata"]
    return group, obj["kind"], metadata.get("namespace", ""), metadata["name"]


@dataclass
class ObjectOwners:
    """The deployment that rendered each object, filled one deployment at a time."""

    owners: dict[ObjectKey, str] = field(default_factory=dict)

    def claim(self, deployment: str, objects: Iterable[dict[str, Any]]) -> str | None:
        """Record ``deployment``'s ``objects``; the first of them another deployment already
        rendered, described for an error that names both (None: none was)."""
        keys = dict.fromkeys(object_key(obj) for obj in objects)
        for key in keys:
            owner = self.owners.get(key)
            if owner is not None and owner != deployment:
                _, kind, namespace, name = key
                where = f"{namespace}/{name}" if namespace else name
                return (
                    f"deployment {deployment!r} renders the {kind} {where}, which deployment "
                    f"{owner!r} renders too: rename one of them"
                )
        for key in keys:
            self.owners.setdefault(key, deployment)
        return None
