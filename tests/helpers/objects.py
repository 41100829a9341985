"""Walk rendered objects: pod templates with the pool they must land on, containers, lookups,
and the KubeRay CRD schema that RayService objects are validated against."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from eks_inference.charts.artifacts_gate import COMPILE_JOB_ROLE
from eks_inference.names import COMPONENT_LABEL
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import CRDS

RAYSERVICE_CRD = CRDS / "ray.io_rayservices.yaml"
LEADERWORKERSET_CRD = CRDS / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
# API groups of the custom resources the charts render (KubeRay, Prometheus Operator, KEDA,
# LeaderWorkerSet): validated against their CRDs; every other object against Kubernetes' own
# schemas.
CUSTOM_RESOURCE_GROUPS = frozenset(
    {"ray.io", "monitoring.coreos.com", "keda.sh", "leaderworkerset.x-k8s.io"}
)


def is_custom_resource(obj: dict[str, Any]) -> bool:
    """True for an instance of a CRD (its API group is one of CUSTOM_RESOURCE_GROUPS)."""
    return str(obj["apiVersion"]).split("/")[0] in CUSTOM_RESOURCE_GROUPS


@dataclass(frozen=True)
class PodTemplate:
    """One pod template of a deployment and the node pool its pods must run on."""

    deployment: ModelDeploymentSpec
    role: str  # "vllm", "ray-head" or "ray-worker"
    pool: NodePool
    spec: dict[str, Any]

    @property
    def containers(self) -> list[dict[str, Any]]:
        containers: list[dict[str, Any]] = self.spec["containers"]
        return containers

    @property
    def server(self) -> dict[str, Any]:
        """The model server (or Ray) container, first in the pod."""
        return self.containers[0]

    def env(self) -> dict[str, str]:
        """Variables with literal values (not those read from a Secret, ``valueFrom``)."""
        return {e["name"]: e["value"] for e in self.server.get("env", []) if "value" in e}

    def volume(self, name: str) -> dict[str, Any]:
        return next(v for v in self.spec.get("volumes", []) if v["name"] == name)

    def mounts(self) -> dict[str, dict[str, Any]]:
        return {m["mountPath"]: m for m in self.server.get("volumeMounts", [])}


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = of_kind(objects, kind)
    return found


def serving_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A deployment's objects without its Neuron compile job (which has its own account)."""
    return [
        o
        for o in objects
        if o["metadata"].get("labels", {}).get(COMPONENT_LABEL) != COMPILE_JOB_ROLE
    ]


def pod_templates(
    platform: PlatformSpec, objects: dict[str, list[dict[str, Any]]]
) -> Iterator[PodTemplate]:
    """Every pod template rendered for ``platform``, with the pool it must be placed on."""
    for spec in platform.deployments:
        placement = platform.placement(spec)
        for obj in objects.get(spec.name, []):
            if obj["kind"] == "Deployment":
                yield PodTemplate(spec, "vllm", placement.workers, obj["spec"]["template"]["spec"])
            elif obj["kind"] == "LeaderWorkerSet":
                templates = obj["spec"]["leaderWorkerTemplate"]
                for role in ("leaderTemplate", "workerTemplate"):
                    yield PodTemplate(spec, "vllm", placement.workers, templates[role]["spec"])
            elif obj["kind"] == "RayService":
                cluster = obj["spec"]["rayClusterConfig"]
                head = cluster["headGroupSpec"]["template"]["spec"]
                yield PodTemplate(spec, "ray-head", placement.head, head)
                for group in cluster["workerGroupSpecs"]:
                    worker = group["template"]["spec"]
                    yield PodTemplate(spec, "ray-worker", placement.workers, worker)


def component_pod_template(graph: str, component: dict[str, Any]) -> dict[str, Any]:
    """A Dynamo graph component's ``podTemplate`` as a Kubernetes PodTemplate of its own, for
    the strict Kubernetes schema."""
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": f"{graph}-{component['name']}", "namespace": "inference"},
        "template": component["podTemplate"],
    }


def serve_config(ray_service: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(ray_service["spec"]["serveConfigV2"])
    return config


def _strict(schema: Any) -> Any:
    """The CRD's structural schema as JSON Schema that also rejects unknown fields.

    The API server prunes unknown fields silently, which would hide a misspelt field; here an
    object schema with ``properties`` allows nothing else unless the CRD preserves unknown
    fields. ``x-kubernetes-int-or-string`` fields carry no ``type``, so JSON Schema already
    accepts both.
    """
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        strict["additionalProperties"] = False
    return strict


@cache
def crd_validator(path: Path, version: str) -> jsonschema.Draft7Validator:
    """A strict validator of the ``version`` schema of the CRD in the YAML file ``path``."""
    # The C loader when PyYAML has it: the KubeRay CRD is 18,000 lines.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = next(d for d in yaml.load_all(path.read_text(), Loader=loader) if d)
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return jsonschema.Draft7Validator(_strict(served["schema"]["openAPIV3Schema"]))


def rayservice_validator() -> jsonschema.Draft7Validator:
    return crd_validator(RAYSERVICE_CRD, "v1")


def schema_errors(validator: jsonschema.Draft7Validator, obj: dict[str, Any]) -> list[str]:
    """Where ``obj`` breaks ``validator``'s schema (empty when valid)."""
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


def rayservice_schema_errors(service: dict[str, Any]) -> list[str]:
    """Where ``service`` breaks the KubeRay 1.7.0 RayService CRD schema (empty when valid)."""
    return schema_errors(rayservice_validator(), service)
