"""Every rendered object is valid: core kinds against Kubernetes 1.35, RayServices against the
KubeRay 1.7.0 CRD, Serve configs against Ray Serve's schema and the Neuron app's arguments."""

from __future__ import annotations

import kubernetes_validate
import yaml
from ray.serve.schema import ServeDeploySchema

from eks_inference.engines.rayservice.serve_config import NEURON_APP_BUILDER, NEURON_APP_MODULE
from eks_inference.serve.neuron.config import ServerConfig
from eks_inference.versions import KUBERNETES_VERSION
from tests.helpers.checks import found
from tests.helpers.objects import (
    is_custom_resource,
    of_kind,
    rayservice_schema_errors,
    serve_config,
)
from tests.helpers.rendered import Rendered


def test_core_objects_validate_strictly_against_kubernetes(rendered: Rendered) -> None:
    """Strict mode rejects unknown fields as well as wrong types; schemas ship with the package."""
    core = [o for o in rendered.all_objects() if not is_custom_resource(o)]
    kinds = {o["kind"] for o in core}
    assert kinds >= {"PersistentVolume", "PersistentVolumeClaim", "ServiceAccount", "NetworkPolicy"}
    for obj in core:
        validated = kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        assert validated == KUBERNETES_VERSION, obj["metadata"]["name"]


def test_namespace_and_its_default_deny_policy_validate(rendered: Rendered) -> None:
    namespace, policy = yaml.safe_load_all(rendered.files["namespace.yaml"])
    for obj in (namespace, policy):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    assert namespace["metadata"]["name"] == "inference"
    assert policy["kind"] == "NetworkPolicy"


def test_ray_services_validate_against_the_kuberay_crd(rendered: Rendered) -> None:
    services = of_kind(rendered.all_objects(), "RayService")
    assert services
    for service in services:
        assert not rayservice_schema_errors(service)


def test_serve_configs_validate_against_ray_serve(rendered: Rendered) -> None:
    for service in found(of_kind(rendered.all_objects(), "RayService")):
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
