"""The add-on record: what each add-on registers, and a deployment that needs what nobody provides.

Apps here are small (a cluster and the add-ons a test needs, never a whole stack), and none is
synthesized: every failure is raised while the deployment is built.
"""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack
from constructs import Construct

from eks_inference import names
from eks_inference.charts.api_key import API_KEY_SECRET_NEED
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.monitoring import PODMONITOR_CRD
from eks_inference.constructs import (
    InferenceAddons,
    InferenceCluster,
    ModelBucket,
    ModelDeployment,
    PlatformAddons,
)
from eks_inference.constructs.addons import PROVIDERS, require
from eks_inference.constructs.addons.registry import Provides
from eks_inference.specification.platform import Placement, PlatformSpec
from eks_inference.specification.provisioning import NodeProvisioning
from tests.helpers.platforms import REFERENCE_PLATFORM
from tests.helpers.synthesis import Synthesized

PLATFORM = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
STREAMER = "mistral-7b-g6e"  # standalone vLLM on L40S, exposed with the API key
RAY_GPU = "qwen25-7b-g6e"  # RayService on L40S, Mountpoint volumes
REGION = "us-east-1"


class ServingApp(Stack):
    """One stack holding a cluster, its bucket and an add-on record with no add-on in it."""

    def __init__(self, provisioning: NodeProvisioning) -> None:
        super().__init__(App(), "Serving")
        self.cluster = InferenceCluster(
            self,
            "Cluster",
            cluster_name="serving",
            node_pools=PLATFORM.node_pools,
            node_provisioning=provisioning,
        )
        self.bucket = ModelBucket(self, "Models")
        self.platform = PlatformAddons(self.cluster)

    def deploy(self, name: str, *, placement: Placement | None = None) -> ModelDeployment:
        spec = PLATFORM.deployment(name)
        return ModelDeployment(
            self,
            f"Deployment{len(self.node.children)}",
            platform=self.platform,
            bucket=self.bucket,
            spec=spec,
            placement=placement or PLATFORM.placement(spec),
            region=REGION,
            route=PLATFORM.route(spec),
        )


@pytest.fixture(scope="module")
def bare() -> ServingApp:
    """A managed-node-group cluster whose platform has no add-on."""
    return ServingApp(NodeProvisioning.MANAGED)


def _missing(app: ServingApp, name: str) -> str:
    with pytest.raises(ValueError, match=f"deployment {name!r} needs ") as raised:
        app.deploy(name)
    return str(raised.value)


def test_a_custom_resource_nobody_installs_names_kuberay(bare: ServingApp) -> None:
    assert (
        f"the CRD {names.RAYSERVICE_CRD!r}, which no add-on of the platform installs; add "
        "KubeRay (eks_inference.constructs.addons.kuberay.KubeRay)"
    ) in _missing(bare, RAY_GPU)


def test_a_mounted_prefix_without_the_driver_names_mountpoint(bare: ServingApp) -> None:
    assert (
        "Mountpoint volumes of 'models/qwen2.5-7b/', which no add-on of the platform mounts; "
        "add MountpointS3Csi (eks_inference.constructs.addons.mountpoint.MountpointS3Csi)"
    ) in _missing(bare, RAY_GPU)


def test_a_secret_nobody_makes_names_api_keys(bare: ServingApp) -> None:
    secret = f"{API_KEY_SECRET_NEED.namespace}/{API_KEY_SECRET_NEED.name}"
    assert (
        f"the Secret {secret}, which no add-on of the platform makes; add ApiKeys "
        "(eks_inference.constructs.addons.api_keys.ApiKeys)"
    ) in _missing(bare, STREAMER)


def test_an_ingress_class_nobody_serves_names_the_controller(bare: ServingApp) -> None:
    assert (
        f"the IngressClass {names.ALB_INGRESS_CLASS!r}, which no add-on of the platform "
        "serves; add LoadBalancerController "
        "(eks_inference.constructs.addons.load_balancer_controller.LoadBalancerController)"
    ) in _missing(bare, STREAMER)


def test_pods_on_a_pool_nothing_launches_name_karpenter() -> None:
    app = ServingApp(NodeProvisioning.KARPENTER)
    assert (
        "nodes of pool 'g6e', which is no managed node group and which no add-on of the "
        "platform launches; add KarpenterNodeProvisioning "
        "(eks_inference.constructs.addons.karpenter.KarpenterNodeProvisioning)"
    ) in _missing(app, STREAMER)


def test_a_need_no_known_add_on_provides_asks_for_a_provider(bare: ServingApp) -> None:
    with pytest.raises(ValueError, match="register its provider with the platform"):
        require(
            bare.platform,
            PlatformNeeds(custom_resources=("widgets.example.com",)),
            deployment="widgets",
        )


def test_a_hand_built_app_checks_that_its_pods_fit_their_pool() -> None:
    """Cluster, add-ons and one deployment, no stack: a GPU server placed on CPU nodes."""
    stack = Stack(App(), "HandBuilt")
    cluster = InferenceCluster(
        stack, "Cluster", cluster_name="hand-built", node_pools=PLATFORM.node_pools
    )
    bucket = ModelBucket(stack, "Models")
    addons = InferenceAddons(cluster, "Addons", cluster=cluster, model_bucket=bucket)
    spec = PLATFORM.deployment(STREAMER)
    system = cluster.system_pool
    with pytest.raises(ValueError, match="no node of pool 'system' can run this pod"):
        ModelDeployment(
            stack,
            "Mistral",
            platform=addons.platform,
            bucket=bucket,
            spec=spec,
            placement=Placement(workers=system, head=system),
            region=REGION,
        )


def test_a_provider_is_registered_once(bare: ServingApp) -> None:
    record = PlatformAddons(bare.cluster)
    first, second = Construct(bare, "First"), Construct(bare, "Second")
    record.add_crd_installer(["widgets.example.com"], first)
    record.add_crd_installer(["widgets.example.com"], first)
    with pytest.raises(ValueError, match=r"'widgets\.example\.com' already has a provider"):
        record.add_crd_installer(["widgets.example.com"], second)
    record.set_metrics(first)
    with pytest.raises(ValueError, match="already has a metrics stack"):
        record.set_metrics(second)


def test_every_need_a_chart_states_has_a_known_provider() -> None:
    """The add-ons suggested in the messages cover what the reference charts need."""
    provided = Provides(
        crds=tuple(c for cls in PROVIDERS for c in cls.PROVIDES.crds),
        secrets=tuple(s for cls in PROVIDERS for s in cls.PROVIDES.secrets),
        ingress_classes=tuple(i for cls in PROVIDERS for i in cls.PROVIDES.ingress_classes),
        mountpoint=True,
        nodes=True,
    )
    needed = Provides(
        crds=(names.RAYSERVICE_CRD, PODMONITOR_CRD),
        secrets=(API_KEY_SECRET_NEED,),
        ingress_classes=(names.ALB_INGRESS_CLASS,),
        mountpoint=True,
        nodes=True,
    )
    assert provided.covers(needed)
    assert any(cls.PROVIDES.mountpoint for cls in PROVIDERS)
    assert any(cls.PROVIDES.nodes for cls in PROVIDERS)


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_the_reference_stack_fills_one_record(reference: Synthesized) -> None:
    stack = reference.stack
    record = stack.platform_addons
    assert record is stack.addons.platform
    assert record.crd_installers[names.RAYSERVICE_CRD] is stack.addons.kuberay
    assert record.crd_installers[PODMONITOR_CRD] is stack.observability.kube_prometheus_stack
    assert record.secret_makers[API_KEY_SECRET_NEED] is stack.api_keys.manifest
    assert record.ingress_controllers[names.ALB_INGRESS_CLASS] is (
        stack.load_balancer_controller.chart
    )
    assert record.metrics is stack.observability
    assert record.mountpoint is stack.addons.mountpoint
    assert record.node_provisioner is None
    assert {offer.pool for offer in record.node_offers} == {p.name for p in PLATFORM.node_pools}
