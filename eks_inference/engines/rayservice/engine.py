"""Ray Serve on KubeRay (``engine: rayservice``): a RayService that autoscales model replicas
on queue depth, and everything else about a deployment that depends on the engine.

A CPU head (GCS, Serve controller, HTTP proxy, autoscaler) and one worker group on the
accelerator pool, one Serve replica per worker pod. Serve adds replicas when ongoing requests
per replica exceed the target; the in-tree Ray autoscaler adds a worker pod for each replica
that does not fit; the Cluster Autoscaler adds a node for each pod that does not fit.

Head and worker pods come from :mod:`eks_inference.engines.rayservice.pods`, the Serve
config from :mod:`eks_inference.engines.rayservice.serve_config`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from eks_inference import metrics, names, versions
from eks_inference.catalog.sizing import pod_resources
from eks_inference.charts import pod, shipped, vllm_server
from eks_inference.charts.api_key import API_KEY_SECRET_NEED, requires_api_key
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import api_object, metadata, object_labels, service_account
from eks_inference.charts.model_server import keep_alive_seconds
from eks_inference.charts.network_rules import components, peer, policy, ports, rule
from eks_inference.charts.pod import RAY_GID, RAY_UID, Json
from eks_inference.charts.serving import (
    Backend,
    ChartObjects,
    MetricsTarget,
    ServerInputs,
    ServingEngine,
)
from eks_inference.engines.rayservice import pods as ray_pods
from eks_inference.engines.rayservice.pods import (
    DASHBOARD_PORT_NAME,
    HEAD_COMPONENT,
    RAY_METRICS_PORT_NAME,
    SERVE_PORT_NAME,
    TERMINATION_GRACE_S,
    WORKER_COMPONENT,
    ServeAppFiles,
)
from eks_inference.engines.rayservice.serve_config import DOWNSCALE_DELAY_S, serve_config
from eks_inference.names import COMPONENT_LABEL, INFERENCE_NAMESPACE, INSTANCE_LABEL
from eks_inference.observability.observed import DeploymentKind, EngineMetrics, ReplicaSeries
from eks_inference.observability.signals import matchers
from eks_inference.output.yaml_dump import dump_yaml
from eks_inference.serve.api_key_auth import API_KEY_ENV
from eks_inference.serve.image import NEURON_RAY_IMAGE
from eks_inference.specification.capabilities import ReadsVolumesAs, ScalesToZero
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.startup_budget import rollout_seconds
from eks_inference.versions import RAY_VERSION

if TYPE_CHECKING:
    pass

COMPONENT = "rayservice"
RAY_API_VERSION = "ray.io/v1"
INITIALIZING_TIMEOUT_ANNOTATION = "ray.io/initializing-timeout"
# The Serve proxies' keep-alive on the pod templates: Serve reads its HTTP options only when it
# starts, so a changed value changes the cluster spec and KubeRay rolls a new cluster with it.
KEEP_ALIVE_ANNOTATION = "eks-inference.io/http-keep-alive-seconds"
# Ray Serve's HTTP proxy health route (Ray 2.60): 200 once the proxy can route to a replica.
SERVE_PROXY_HEALTH_PATH = "/-/healthz"
# Ray Serve LLM names the Serve deployment of an LLMConfig `LLMServer:<model id>` with `/`
# written `--` and `.` written `_` (ray 2.60.0,
# ray/llm/_internal/serve/core/server/builder.py: build_llm_deployment, _get_deployment_name).
_RAY_LLM_DEPLOYMENT_PREFIX = "LLMServer:"
# The project's modules the Serve application imports (the Neuron package and the API-key check
# it imports), on PYTHONPATH in head and workers as the package shipped.SHIPPED_PACKAGE, so Serve
# imports them wherever it builds or runs the application (eks_inference.charts.shipped).
SERVE_APP_MODULES = (shipped.API_KEY_AUTH_MODULE, *shipped.package_modules(shipped.NEURON_PACKAGE))

_AUTOSCALER_CPU = "500m"
_AUTOSCALER_MEMORY = "1Gi"
# Ray autoscaler: remove a worker pod 5 minutes after its replica is gone (Serve waits 10
# minutes of low load before removing one, so a pod that idles is not wanted back soon),
# freeing its accelerators and, once empty, its node. Upscaling is not rate-limited: Serve
# has already smoothed demand, and each new pod waits minutes for a node and a model load.
_IDLE_TIMEOUT_S = 300
_UPSCALING_MODE = "Aggressive"
# Pod labels the KubeRay operator's chart sets: `app.kubernetes.io/name` is the chart's name.
_KUBERAY_OPERATOR_LABELS = {"app.kubernetes.io/name": versions.KUBERAY_OPERATOR_CHART.chart}
# Ray token authentication: KubeRay generates a random token into a Secret named after each
# RayCluster, gives it to every Ray container (head, workers, autoscaler, the wait-for-GCS init
# container) as RAY_AUTH_TOKEN with RAY_AUTH_MODE=token, and sends it on its own dashboard
# calls. Ray then refuses its dashboard, dashboard agent and gRPC (GCS, raylet) calls without
# it, health checks aside (the probes need none). Requires rayVersion 2.52.0 or later.
_AUTH_OPTIONS = {"mode": "token"}


def serve_replica_deployment(spec: ModelDeploymentSpec) -> str:
    """The Serve deployment whose replicas hold the model, in a RayService of ``spec``."""
    if spec.on_neuron:
        return names.NEURON_SERVER_DEPLOYMENT
    return _RAY_LLM_DEPLOYMENT_PREFIX + spec.model.id.replace("/", "--").replace(".", "_")


def serve_service_name(spec: ModelDeploymentSpec) -> str:
    """The Service KubeRay creates for a RayService's Serve proxies: ``<name>-serve-svc``."""
    return names.ray_serve_service_name(spec.name)


class RayServiceEngine(ServingEngine):
    """Ray Serve on KubeRay: a RayService serving one model, with its ServiceAccount.

    Objects: the ServiceAccount ``names.service_account_name(spec.name)`` (head and workers;
    KubeRay binds the autoscaler's role to it; its pods get no AWS credentials, since the
    weights come through Mountpoint), on Inferentia2 (and whenever the API key is required) a
    ConfigMap holding the project's Serve modules (:mod:`eks_inference.charts.shipped`), and
    the RayService ``<deployment>``, served by KubeRay's ``<deployment>-serve-svc``
    (:func:`serve_service_name`) on port 8000.
    The chart's needs name the RayService CRD and, with an API key, the platform's Secret.

    Decisions:

    - Head on the CPU pool (``placement.head``) with ``num-cpus``/``num-gpus`` 0 and no
      accelerator resources; the only pod with a service-account token, for the autoscaler.
    - One worker group on ``placement.workers`` with ``minReplicas``/``maxReplicas`` from the
      spec's scaling; a worker requests exactly TP NeuronCores or GPUs, so one Serve replica
      fills it, and CPU/memory are the node's share per replica.
    - In-tree autoscaling (v2) with a 5-minute idle timeout and unthrottled upscaling.
    - Ray token authentication (``authOptions.mode: token``): the dashboard's job and Serve
      APIs and Ray's internal gRPC calls need the cluster's token, which KubeRay generates
      per cluster, keeps in a Secret and gives only to its own Ray containers. The
      deployment's NetworkPolicies (:mod:`eks_inference.charts.network_policy`) also keep
      every other pod off those ports.
    - ``upgradeStrategy: NewCluster``: a changed cluster spec starts a new cluster and moves
      traffic when it serves, so upgrades have no downtime but need capacity for a second
      set of replicas while both run.
    - ``ray.io/initializing-timeout`` is the rollout budget (node launch, image pull, model
      load): past it KubeRay marks the service failed rather than waiting forever.
    - ``karpenter.sh/do-not-disrupt``: Karpenter never moves the head (every replica of the
      cluster would restart) and leaves a worker alone for the rollout budget, while its
      replica may still be loading; a loaded worker may be moved, one node at a time.
    - With ``min_replicas`` >= 1 the head is left out of the serve Service, so requests go
      straight to worker proxies; with 0 it stays in, since its proxy is what receives the
      first request and triggers a scale-up from zero.
    - Exposed on a load balancer (``route``): the proxies keep idle connections past its idle
      timeout, and when the route requires the platform's API key, head and workers read it
      from the platform's Secret into ``VLLM_API_KEY``, whose name the Serve application is
      given; the application answers every request but ``/health`` without ``Authorization:
      Bearer <key>`` with 401 (``api_key_auth.APIKeyMiddleware``, on Ray Serve LLM's
      application too). Serve's proxy answers its own ``/-/healthz`` and ``/-/routes``
      unchecked; the load balancer forwards neither (:mod:`eks_inference.charts.ingress`).

    The RayService's fields are written in reading order (what it serves, then the cluster
    that serves it), not sorted.
    """

    name = "rayservice"
    summary = "Ray Serve on a KubeRay RayService"
    component = COMPONENT
    capabilities = (
        # The head's Serve proxy holds the first request while a worker and its node start.
        # Serve removes the last replica after its downscale delay; the Ray autoscaler then
        # removes the idle worker pod after its idle timeout.
        ScalesToZero(lambda spec: DOWNSCALE_DELAY_S + _IDLE_TIMEOUT_S),
        ReadsVolumesAs(RAY_UID, RAY_GID),
    )

    def services(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        """KubeRay creates ``<name>-head-svc`` and ``<name>-serve-svc`` itself."""
        return (names.ray_head_service_name(spec.name), names.ray_serve_service_name(spec.name))

    def rollout_headroom_replicas(self, spec: ModelDeploymentSpec) -> int:
        """An upgrade starts a new Ray cluster at ``min_replicas`` workers beside the old one."""
        return max(spec.scaling.min_replicas, 1)

    def scales_at_run_time(self, spec: ModelDeploymentSpec) -> bool:
        return True

    def server(self, given: ServerInputs) -> ChartObjects:
        spec, placement, context, weights, artifacts, route = given
        if weights is None:
            raise ValueError(
                f"deployment {spec.name!r}: Ray Serve workers read weights from a Mountpoint "
                "volume; pass one"
            )
        labels = object_labels(spec, COMPONENT)
        account = names.service_account_name(spec.name)
        objects = [service_account(account, labels)]
        app = ServeAppFiles()
        api_key = requires_api_key(route)
        if spec.on_neuron or api_key:
            code = shipped.shipped_code(
                spec, labels, SERVE_APP_MODULES, package=shipped.SHIPPED_PACKAGE
            )
            objects.append(code.config_map)
            app = ServeAppFiles(
                volumes=(code.volume,),
                mounts=(code.mount,),
                env=code.env,
                secret_env=(
                    (
                        pod.secret_env(
                            API_KEY_ENV,
                            secret=API_KEY_SECRET_NEED.name,
                            key=API_KEY_SECRET_NEED.key,
                        ),
                    )
                    if api_key
                    else ()
                ),
                annotations=(
                    *code.annotations,
                    *(
                        ((KEEP_ALIVE_ANNOTATION, str(keep_alive_seconds(route))),)
                        if route is not None
                        else ()
                    ),
                ),
            )
        elif route is not None:
            app = ServeAppFiles(
                annotations=((KEEP_ALIVE_ANNOTATION, str(keep_alive_seconds(route))),)
            )
        worker = pod_resources(spec.instance, spec.replicas_per_node)
        head_pod = ray_pods.head_pod(spec, placement, context, app, account)
        worker_pod = ray_pods.worker_pod(spec, placement, context, app, account, weights, artifacts)
        autoscaler_resources = pod.resources({"cpu": _AUTOSCALER_CPU, "memory": _AUTOSCALER_MEMORY})
        cluster_path = (f"RayService/{spec.name}", "spec", "rayClusterConfig")
        ray_service_spec = {
            "upgradeStrategy": {"type": "NewCluster"},
            "excludeHeadPodFromServeSvc": spec.scaling.min_replicas > 0,
            "serveConfigV2": dump_yaml([serve_config(spec, route)]),
            "rayClusterConfig": {
                "rayVersion": RAY_VERSION,
                "authOptions": dict(_AUTH_OPTIONS),
                "enableInTreeAutoscaling": True,
                "autoscalerOptions": {
                    "version": "v2",
                    "idleTimeoutSeconds": _IDLE_TIMEOUT_S,
                    "upscalingMode": _UPSCALING_MODE,
                    "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
                    "resources": autoscaler_resources,
                    "securityContext": pod.RAY_SECURITY,
                },
                "headGroupSpec": {
                    "rayStartParams": {
                        # Replicas and their routers never run on the head.
                        "num-cpus": "0",
                        "num-gpus": "0",
                        "dashboard-host": "0.0.0.0",
                        "object-store-memory": ray_pods.object_store_bytes(
                            ray_pods.HEAD_MEMORY_MIB
                        ),
                    },
                    # Evicting the head restarts every replica of the cluster.
                    "template": ray_pods.template(
                        spec, HEAD_COMPONENT, head_pod, app, pod.do_not_disrupt(None)
                    ),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": placement.workers.name,
                        "replicas": spec.scaling.min_replicas,
                        "minReplicas": spec.scaling.min_replicas,
                        "maxReplicas": spec.scaling.max_replicas,
                        # CPUs, GPUs and neuron_cores come from the container limits.
                        "rayStartParams": {
                            "object-store-memory": ray_pods.object_store_bytes(worker.memory_mib),
                        },
                        # A worker is left alone while its replica may still be loading.
                        "template": ray_pods.template(
                            spec,
                            WORKER_COMPONENT,
                            worker_pod,
                            app,
                            pod.do_not_disrupt(rollout_seconds(spec)),
                        ),
                    }
                ],
            },
        }
        objects.append(
            api_object(
                RAY_API_VERSION,
                "RayService",
                metadata(
                    spec.name,
                    labels,
                    annotations={
                        INITIALIZING_TIMEOUT_ANNOTATION: f"{math.ceil(rollout_seconds(spec) / 60)}m"
                    },
                ),
                {"spec": ray_service_spec},
                canonical_order=False,
            )
        )
        return ChartObjects(
            tuple(objects),
            PlatformNeeds(
                namespaces=(INFERENCE_NAMESPACE,),
                custom_resources=(names.RAYSERVICE_CRD,),
                secrets=(API_KEY_SECRET_NEED,) if api_key else (),
                pods=(
                    pod.scheduling_need(
                        (*cluster_path, "headGroupSpec", "template"),
                        placement.head,
                        head_pod,
                        # KubeRay adds the autoscaler to the head pod.
                        sidecars=({"resources": autoscaler_resources},),
                    ),
                    pod.scheduling_need(
                        (*cluster_path, "workerGroupSpecs", 0, "template"),
                        placement.workers,
                        worker_pod,
                        per_node=spec.replicas_per_node,
                    ),
                ),
            ),
        )

    def backend(self, spec: ModelDeploymentSpec) -> Backend:
        return Backend(serve_service_name(spec), SERVE_PROXY_HEALTH_PATH, TERMINATION_GRACE_S)

    def server_components(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        return (HEAD_COMPONENT, WORKER_COMPONENT)

    def metrics_targets(self, spec: ModelDeploymentSpec) -> tuple[MetricsTarget, ...]:
        selector = components(spec, (HEAD_COMPONENT, WORKER_COMPONENT))
        return (MetricsTarget("ray", selector, RAY_METRICS_PORT_NAME),)

    def network_policies(
        self, spec: ModelDeploymentSpec, labels: Mapping[str, str], servers: Json
    ) -> list[Json]:
        """The Ray flows beyond serving and metrics.

        - ``<deployment>-ray-operator``: the KubeRay operator reaches the head's dashboard
          (serve config submission, application status) and Serve proxy (its health check).
          KubeRay 1.7 calls no other port; the dashboard agent (52365) is only probed, by the
          kubelet.
        - ``<deployment>-ray-cluster``: the deployment's Ray pods reach each other on every
          port and protocol. GCS (6379), the dashboard and its agents, the raylets, object
          managers and the worker processes' port range all carry Ray's own traffic, several
          on ports Ray picks at start-up; listing them would break on the next Ray release
          for no gain, since only the deployment's own pods are admitted (and Ray's token
          authentication guards them). During a ``NewCluster`` upgrade both clusters' pods
          are the deployment's, so they are admitted too; each cluster's token still differs.
        """
        head = {"matchLabels": {INSTANCE_LABEL: spec.name, COMPONENT_LABEL: HEAD_COMPONENT}}
        ray_pods = {"podSelector": servers}
        return [
            policy(
                f"{spec.name}-ray-operator",
                labels,
                head,
                ingress=[
                    rule(
                        "from",
                        [peer(names.KUBERAY_NAMESPACE, _KUBERAY_OPERATOR_LABELS)],
                        ports(DASHBOARD_PORT_NAME, SERVE_PORT_NAME),
                    )
                ],
            ),
            policy(
                f"{spec.name}-ray-cluster",
                labels,
                servers,
                ingress=[{"from": [ray_pods]}],
                egress=[{"to": [ray_pods]}],
            ),
        ]

    def kind(self, spec: ModelDeploymentSpec) -> DeploymentKind:
        if spec.on_neuron:
            return DeploymentKind("rayservice-neuron", "Ray Serve on Inferentia2")
        return DeploymentKind("rayservice-gpu", "Ray Serve LLM on GPU")

    def metrics(self, spec: ModelDeploymentSpec) -> EngineMetrics:
        """vLLM's metrics as Ray exports them; requests also queue in Serve's routers."""
        return vllm_server.vllm_metrics(
            exported=metrics.ray_exported, also_waiting=(metrics.SERVE_QUEUED,)
        )

    def replica_series(
        self, spec: ModelDeploymentSpec, selector: Mapping[str, str], pods: str
    ) -> ReplicaSeries:
        """Serve's healthy and target replicas of the model's Serve deployment.

        A Serve replica is wanted before its worker pod has a node, so the loading alert
        allows the whole rollout budget (node, image, load).
        """
        serve = matchers(**selector, deployment=serve_replica_deployment(spec))
        ready = f"sum({metrics.SERVE_REPLICAS_HEALTHY.one()}{serve})"
        wanted = f"sum({metrics.SERVE_TARGET_REPLICAS.one()}{serve})"
        return ReplicaSeries(
            ready=ready,
            wanted=wanted,
            loading=f"({wanted}) - ({ready} or vector(0))",
            loading_alert_seconds=rollout_seconds(spec),
        )

    def autoscaler(self, spec: ModelDeploymentSpec) -> str:
        return (
            f"Ray Serve scales on {spec.target_ongoing_requests} ongoing requests per replica; "
            "Ray's autoscaler adds the worker pod"
        )

    def queue_threshold(self, per_replica: int, alert: int) -> str:
        return f"alert above {alert} and rising"

    def platform_needs(self, spec: ModelDeploymentSpec) -> PlatformNeeds:
        """On Inferentia2, the Ray + Neuron image the CDK app builds."""
        return PlatformNeeds(images=(NEURON_RAY_IMAGE,) if spec.on_neuron else ())
