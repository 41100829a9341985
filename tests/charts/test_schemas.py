"""Every rendered object is valid: core kinds against Kubernetes 1.35, RayServices against the
KubeRay 1.7.0 CRD, Serve configs against Ray Serve's schema and the Neuron app's arguments."""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from eks_inference.charts.engine import NEURON_APP_BUILDER, NEURON_APP_MODULE
from eks_inference.serve.neuron_app import ServerConfig
from eks_inference.versions import KUBERNETES_VERSION
from tests.charts.conftest import REFERENCE_DATA, Rendered
from tests.charts.helpers import of_kind, serve_config

RAYSERVICE_CRD = REFERENCE_DATA / "crds" / "ray.io_rayservices.yaml"


def test_core_objects_validate_strictly_against_kubernetes(rendered: Rendered) -> None:
    """Strict mode rejects unknown fields as well as wrong types; schemas ship with the package."""
    core = [o for o in rendered.all_objects() if o["apiVersion"] != "ray.io/v1"]
    kinds = {o["kind"] for o in core}
    assert kinds >= {"PersistentVolume", "PersistentVolumeClaim", "ServiceAccount"}
    for obj in core:
        validated = kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        assert validated == KUBERNETES_VERSION, obj["metadata"]["name"]


def test_namespace_validates(rendered: Rendered) -> None:
    (namespace,) = yaml.safe_load_all(rendered.files["namespace.yaml"])
    kubernetes_validate.validate(namespace, KUBERNETES_VERSION, strict=True)
    assert namespace["metadata"]["name"] == "inference"


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
def _rayservice_validator() -> jsonschema.Draft7Validator:
    # The C loader when PyYAML has it: the CRD is 18,000 lines.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = next(d for d in yaml.load_all(RAYSERVICE_CRD.read_text(), Loader=loader) if d)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


@pytest.mark.skipif(
    not RAYSERVICE_CRD.exists(),
    reason=f"the KubeRay CRDs are read from the shared reference data, absent at {RAYSERVICE_CRD}",
)
def test_ray_services_validate_against_the_kuberay_crd(rendered: Rendered) -> None:
    services = of_kind(rendered.all_objects(), "RayService")
    assert services
    validator = _rayservice_validator()
    for service in services:
        errors = sorted(validator.iter_errors(service), key=lambda e: list(e.absolute_path))
        assert not errors, "\n".join(
            f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:10]
        )


def test_serve_configs_validate_against_ray_serve(rendered: Rendered) -> None:
    for service in of_kind(rendered.all_objects(), "RayService"):
        config = serve_config(service)
        ServeDeploySchema.model_validate(config)
        (application,) = config["applications"]
        assert application["route_prefix"] == "/"


def test_neuron_app_args_are_accepted_by_the_app(rendered: Rendered) -> None:
    """The args the chart renders build the application's own config without error."""
    for service in of_kind(rendered.all_objects(), "RayService"):
        (application,) = serve_config(service)["applications"]
        if application["import_path"] == f"{NEURON_APP_MODULE}:{NEURON_APP_BUILDER}":
            ServerConfig.model_validate(application["args"])
