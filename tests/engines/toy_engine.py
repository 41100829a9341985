"""A toy engine written outside the package, as a contributor would write a new one.

``engine: toy`` serves vLLM's OpenAI server on GPUs as a fixed-size Deployment behind a Service
named ``<deployment>-toy``: different enough from the built-in engines (its own Service name,
component, rule and dashboard title) that the tests see every place that asks the engine, and
small enough to read in one sitting. ``docs/adding-an-engine.md`` walks through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from eks_inference import metrics
from eks_inference.catalog import Accelerator
from eks_inference.catalog.sizing import pod_resources
from eks_inference.charts import pod, vllm_server
from eks_inference.charts.common import (
    HEALTH_PATH,
    MODEL_MOUNT_PATH,
    OPENAI_PORT,
    WEIGHTS_ROLE,
    RenderContext,
    api_object,
    metadata,
    object_labels,
    selector_labels,
)
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.serving import (
    Backend,
    ChartObjects,
    DeploymentKind,
    EngineMetrics,
    MetricsTarget,
    ReplicaSeries,
    ServingEngine,
    WeightsVolume,
)
from eks_inference.names import INFERENCE_NAMESPACE, service_account_name
from eks_inference.observability.signals import matchers
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import Placement
from eks_inference.specification.routes import Route
from eks_inference.specification.startup_budget import model_load_seconds
from eks_inference.specification.validation import Problems, Rule
from eks_inference.versions import VLLM_GPU_IMAGE

if TYPE_CHECKING:
    from eks_inference.charts.mountpoint import MountpointVolume

COMPONENT = "toy"
PORT_NAME = "http"
GRACE_SECONDS = 60


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

    def rules(self) -> tuple[Rule[ModelDeploymentSpec], ...]:
        return (Rule(frozenset({"scaling.min_replicas", "scaling.max_replicas"}), _fixed_size),)

    def services(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        return (f"{spec.name}-toy",)

    def server(
        self,
        spec: ModelDeploymentSpec,
        placement: Placement,
        context: RenderContext,
        *,
        weights: WeightsVolume | None,
        artifacts: MountpointVolume | None,
        route: Route | None,
    ) -> ChartObjects:
        assert weights is not None, "the toy engine reads weights through Mountpoint only"
        labels = object_labels(spec, COMPONENT)
        account = service_account_name(spec.name)
        share = pod_resources(spec.instance, spec.replicas_per_node)
        probe = pod.http_probe(
            HEALTH_PATH, port=OPENAI_PORT, period_seconds=10, timeout_seconds=5, failure_threshold=3
        )
        pod_spec = {
            "serviceAccountName": account,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": GRACE_SECONDS,
            "securityContext": pod.ROOT_IMAGE_POD_SECURITY,
            **pod.placement(placement.workers, spec),
            "containers": [
                {
                    "name": COMPONENT,
                    "image": VLLM_GPU_IMAGE,
                    "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
                    "command": list(vllm_server.VLLM_SERVE_COMMAND),
                    "args": vllm_server.vllm_server_args(spec, bucket_name=context.bucket_name),
                    "ports": [{"name": PORT_NAME, "containerPort": OPENAI_PORT, "protocol": "TCP"}],
                    "env": pod.env(vllm_server.server_environment(spec, context)),
                    "resources": pod.resources(
                        {"cpu": share.cpu, "memory": share.memory, **pod.accelerator_resource(spec)}
                    ),
                    "securityContext": pod.ROOT_IMAGE_SECURITY,
                    "readinessProbe": probe,
                    "volumeMounts": [
                        pod.mount("home", vllm_server.HOME_PATH),
                        pod.mount("tmp", vllm_server.TMP_PATH),
                        pod.mount(WEIGHTS_ROLE, MODEL_MOUNT_PATH, read_only=True),
                    ],
                }
            ],
            "volumes": [
                pod.empty_dir("home", f"{vllm_server.HOME_MIB}Mi"),
                pod.empty_dir("tmp", f"{vllm_server.TMP_MIB}Mi"),
                pod.claim_volume(WEIGHTS_ROLE, weights.claim_name),
            ],
        }
        selector = selector_labels(spec, COMPONENT)
        objects = (
            api_object(
                "v1",
                "ServiceAccount",
                metadata(account, labels),
                {"automountServiceAccountToken": False},
            ),
            api_object(
                "apps/v1",
                "Deployment",
                metadata(spec.name, labels),
                {
                    "spec": {
                        "replicas": spec.scaling.min_replicas,
                        "selector": {"matchLabels": selector},
                        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
                    }
                },
            ),
            api_object(
                "v1",
                "Service",
                metadata(f"{spec.name}-toy", labels),
                {
                    "spec": {
                        "selector": selector,
                        "ports": [
                            {"name": PORT_NAME, "port": OPENAI_PORT, "targetPort": OPENAI_PORT}
                        ],
                    }
                },
            ),
        )
        need = pod.scheduling_need(
            (f"Deployment/{spec.name}", "spec", "template"),
            placement.workers,
            pod_spec,
            per_node=spec.replicas_per_node,
        )
        return ChartObjects(objects, PlatformNeeds(namespaces=(INFERENCE_NAMESPACE,), pods=(need,)))

    def backend(self, spec: ModelDeploymentSpec) -> Backend:
        return Backend(f"{spec.name}-toy", HEALTH_PATH, GRACE_SECONDS)

    def server_components(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        return (COMPONENT,)

    def metrics_targets(self, spec: ModelDeploymentSpec) -> tuple[MetricsTarget, ...]:
        return (
            MetricsTarget(COMPONENT, {"matchLabels": selector_labels(spec, COMPONENT)}, PORT_NAME),
        )

    def kind(self, spec: ModelDeploymentSpec) -> DeploymentKind:
        return DeploymentKind("toy-gpu", "Toy vLLM on GPU")

    def metrics(self, spec: ModelDeploymentSpec) -> EngineMetrics:
        return EngineMetrics(
            running=metrics.VLLM_REQUESTS_RUNNING,
            waiting=(metrics.VLLM_REQUESTS_WAITING,),
            kv_cache=metrics.VLLM_KV_CACHE_USAGE,
            ttft=metrics.VLLM_TIME_TO_FIRST_TOKEN,
            itl=metrics.VLLM_INTER_TOKEN_LATENCY,
            e2e=metrics.VLLM_E2E_LATENCY,
            prompt_tokens=metrics.VLLM_PROMPT_TOKENS,
            generation_tokens=metrics.VLLM_GENERATION_TOKENS,
        )

    def replica_series(
        self, spec: ModelDeploymentSpec, selector: Mapping[str, str], pods: str
    ) -> ReplicaSeries:
        deployment = matchers(namespace=INFERENCE_NAMESPACE, deployment=spec.name)
        ready = f"sum({metrics.KSM_DEPLOYMENT_AVAILABLE.one()}{deployment})"
        wanted = f"sum({metrics.KSM_DEPLOYMENT_SPEC_REPLICAS.one()}{deployment})"
        return ReplicaSeries(ready, wanted, f"({wanted}) - ({ready})", model_load_seconds(spec))

    def autoscaler(self, spec: ModelDeploymentSpec) -> str:
        return "fixed size"
