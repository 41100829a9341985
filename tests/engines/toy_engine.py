"""A toy engine written outside the package, as a contributor would write a new one.

``engine: toy`` serves vLLM's OpenAI server on GPUs as a fixed-size Deployment behind a Service
named ``<deployment>-toy``: different enough from the built-in engines (its own Service name,
component, option, capability, rules and dashboard title) that the tests see every place that
asks the engine, and small enough to read in one sitting. Its option ``options.extra_paths``
names paths its server answers beside ``/v1`` (vLLM's ``/tokenize``, say), which it serves
through the :class:`~eks_inference.specification.capabilities.ServesExtraApiPaths` capability;
its option ``options.warm_replicas`` is checked by a rule of its own against the replica count.
``docs/adding-an-engine.md`` walks through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field

from eks_inference.catalog import Accelerator
from eks_inference.catalog.sizing import pod_resources
from eks_inference.charts import pod, server_deployment, vllm_server
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import (
    api_object,
    metadata,
    object_labels,
    selector_labels,
    service_account,
)
from eks_inference.charts.model_server import (
    HTTP_PORT_NAME,
    MODEL_MOUNT_PATH,
    OPENAI_PORT,
    WEIGHTS_ROLE,
)
from eks_inference.charts.serving import (
    Backend,
    ChartObjects,
    ServerInputs,
    ServingEngine,
)
from eks_inference.names import INFERENCE_NAMESPACE, service_account_name
from eks_inference.observability.observed import DeploymentKind, EngineMetrics, ReplicaSeries
from eks_inference.serve.api_key_auth import HEALTH_PATH
from eks_inference.specification.capabilities import ServesExtraApiPaths
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engines import engine_options
from eks_inference.specification.validation import Problems, Rule
from eks_inference.versions import VLLM_GPU_IMAGE

if TYPE_CHECKING:
    pass

COMPONENT = "toy"
GRACE_SECONDS = server_deployment.TERMINATION_GRACE_S


class ToyOptions(BaseModel):
    """The toy engine's own options: extra paths its server answers, replicas kept warm."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    extra_paths: tuple[Annotated[str, Field(pattern=r"^/[a-z][a-z0-9_-]*$")], ...] = Field(
        default=(), max_length=3, description="Paths beside /v1 the load balancer forwards."
    )
    warm_replicas: int = Field(
        default=1, ge=0, le=100, description="Replicas that must stay up; at most min_replicas."
    )


def toy_options(spec: ModelDeploymentSpec) -> ToyOptions:
    return engine_options(spec, ToyOptions)


def _warm_within_the_replicas(spec: ModelDeploymentSpec, problems: Problems) -> None:
    warm = toy_options(spec).warm_replicas
    if warm > spec.scaling.min_replicas:
        problems.add(
            ("options", "warm_replicas"),
            f"warm_replicas ({warm}) exceeds scaling.min_replicas "
            f"({spec.scaling.min_replicas}); keep at most that many warm",
            warm,
        )


def _fixed_size(spec: ModelDeploymentSpec, problems: Problems) -> None:
    if spec.scaling.min_replicas != spec.scaling.max_replicas:
        problems.add(
            ("scaling", "max_replicas"),
            f"engine: toy runs a fixed number of replicas; set max_replicas = min_replicas "
            f"({spec.scaling.min_replicas})",
            spec.scaling.max_replicas,
        )


class ToyEngine(ServingEngine):
    """vLLM's OpenAI server on GPUs, a fixed-size Deployment behind ``<deployment>-toy``."""

    name = "toy"
    summary = "a toy vLLM Deployment"
    component = COMPONENT
    accelerators = frozenset({Accelerator.NVIDIA})
    options = ToyOptions
    capabilities = (ServesExtraApiPaths(lambda spec: toy_options(spec).extra_paths),)

    def rules(self) -> tuple[Rule[ModelDeploymentSpec], ...]:
        return (
            Rule(frozenset({"scaling.min_replicas", "scaling.max_replicas"}), _fixed_size),
            Rule(frozenset({"options", "scaling.min_replicas"}), _warm_within_the_replicas),
        )

    def services(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        return (f"{spec.name}-toy",)

    def server(self, given: ServerInputs) -> ChartObjects:
        spec, placement, context, weights, _, _ = given
        assert weights is not None, "the toy engine reads weights through Mountpoint only"
        labels = object_labels(spec, COMPONENT)
        account = service_account_name(spec.name)
        share = pod_resources(spec.instance, spec.replicas_per_node)
        scratch_volumes, scratch_mounts = vllm_server.scratch_volumes(share.memory_mib)
        container = server_deployment.container(
            spec,
            name=COMPONENT,
            image=VLLM_GPU_IMAGE,
            command=vllm_server.VLLM_SERVE_COMMAND,
            args=vllm_server.vllm_server_args(spec, bucket_name=context.bucket_name),
            env=pod.env(vllm_server.server_environment(spec, context)),
            resources=pod.resources(
                {"cpu": share.cpu, "memory": share.memory, **pod.accelerator_resource(spec)}
            ),
            health_path=HEALTH_PATH,
            mounts=[*scratch_mounts, pod.mount(WEIGHTS_ROLE, MODEL_MOUNT_PATH, read_only=True)],
        )
        volumes = [*scratch_volumes, pod.claim_volume(WEIGHTS_ROLE, weights.claim_name)]
        pod_spec = server_deployment.pod_spec(spec, placement.workers, account, container, volumes)
        selector = selector_labels(spec, COMPONENT)
        objects = (
            service_account(account, labels),
            server_deployment.deployment(
                spec,
                labels,
                selector,
                pod_spec,
                annotations={},
            ),
            api_object(
                "v1",
                "Service",
                metadata(f"{spec.name}-toy", labels),
                {
                    "spec": {
                        "selector": selector,
                        "ports": [
                            {
                                "name": HTTP_PORT_NAME,
                                "port": OPENAI_PORT,
                                "targetPort": OPENAI_PORT,
                            }
                        ],
                    }
                },
            ),
        )
        need = server_deployment.scheduling_need(spec, placement.workers, pod_spec)
        return ChartObjects(objects, PlatformNeeds(namespaces=(INFERENCE_NAMESPACE,), pods=(need,)))

    def backend(self, spec: ModelDeploymentSpec) -> Backend:
        return Backend(f"{spec.name}-toy", HEALTH_PATH, GRACE_SECONDS)

    def kind(self, spec: ModelDeploymentSpec) -> DeploymentKind:
        return DeploymentKind("toy-gpu", "Toy vLLM on GPU")

    def metrics(self, spec: ModelDeploymentSpec) -> EngineMetrics:
        return vllm_server.vllm_metrics()

    def replica_series(
        self, spec: ModelDeploymentSpec, selector: Mapping[str, str], pods: str
    ) -> ReplicaSeries:
        return server_deployment.replica_series(spec, pods)

    def autoscaler(self, spec: ModelDeploymentSpec) -> str:
        return "fixed size"
