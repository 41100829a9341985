"""Standalone vLLM (``engine: vllm``): a Deployment of OpenAI-compatible servers, its Service,
budget and identity, and everything else about a deployment that depends on the engine.

The pod comes from :mod:`eks_inference.charts.pod`, like every other pod of the project, and
runs the server as :mod:`eks_inference.charts.vllm_server` says; the Service and the
PodDisruptionBudget select it by the deployment's instance and component labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from eks_inference import metrics, names
from eks_inference.catalog import Accelerator
from eks_inference.catalog.sizing import pod_resources
from eks_inference.charts import (
    adapters,
    kv_offload,
    pod,
    server_deployment,
    shipped,
    vllm_server,
)
from eks_inference.charts.api_key import API_KEY_SECRET_NEED, requires_api_key
from eks_inference.charts.artifacts_gate import gates_on_compiled_artifacts
from eks_inference.charts.context import RenderContext
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.fabric import Fabric, fabric
from eks_inference.charts.metadata import (
    object_labels,
    selector_labels,
    service_account,
)
from eks_inference.charts.model_server import (
    ARTIFACTS_MOUNT_PATH,
    ARTIFACTS_ROLE,
    keep_alive_seconds,
)
from eks_inference.charts.network_rules import policy
from eks_inference.charts.serving import ChartObjects, ServerInputs, WeightsVolume
from eks_inference.charts.weights_loaders import loader_of
from eks_inference.engines.vllm import groups, lmcache_observed
from eks_inference.engines.vllm import observed as vllm_observed
from eks_inference.names import COMPONENT_LABEL, INFERENCE_NAMESPACE
from eks_inference.observability import routing as routing_observed
from eks_inference.observability.observed import (
    DeploymentKind,
    EngineAlert,
    EngineMetrics,
    EnginePanel,
    ReplicaSeries,
)
from eks_inference.observability.signals import ksm_label, matchers
from eks_inference.serve.api_key_auth import API_KEY_ENV, HEALTH_PATH
from eks_inference.specification.capabilities import (
    AutoscalesOnQueue,
    OffloadsKvCache,
    PicksEndpoints,
    ServesAcrossNodes,
    ServesAdapters,
)
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engine_rules import fixed_unless_autoscaled
from eks_inference.specification.kv_serving_rules import replica_memory_mib
from eks_inference.specification.platform import Placement
from eks_inference.specification.routes import Route
from eks_inference.specification.validation import Rule
from eks_inference.versions import NEURON_VLLM_IMAGE, VLLM_EFA_IMAGE

if TYPE_CHECKING:
    from eks_inference.charts.mountpoint import MountpointVolume

COMPONENT = "vllm"
CONTAINER_NAME = "vllm"
#: The modules vLLM 0.34.0 applies LoRA to in the catalog's decoder families (llama,
#: mistral, qwen2, gemma2), as PEFT names them in ``adapter_config.json``: every linear layer
#: (``get_supported_lora_modules``), q/k/v and gate/up unpacked from the merged layers
#: (``packed_modules_mapping`` of ``vllm/model_executor/models/llama.py``), and the embedding
#: modules (``embedding_modules``).
LORA_TARGET_MODULES = frozenset(
    {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "embed_tokens",
        "lm_head",
    }
)


def lora_target_modules(spec: ModelDeploymentSpec) -> frozenset[str]:
    """The modules an adapter of ``spec``'s model may target on vLLM."""
    return LORA_TARGET_MODULES


#: vLLM's multi-LoRA, on GPUs: the pinned Neuron plugin compiles adapters into the graph
#: (NxD Inference's LoRA config), which the compile job does not do.
SERVES_ADAPTERS = ServesAdapters(
    frozenset({Accelerator.NVIDIA}),
    lora_target_modules,
    adapters.runtime_paths,
    adapters.on_demand_base_model,
)


def api_key_code(
    spec: ModelDeploymentSpec, labels: Mapping[str, str], route: Route | None
) -> shipped.ShippedCode | None:
    """The project's API-key check a vLLM server of ``spec`` loads as its middleware, shipped
    in a ConfigMap labelled ``labels``, when ``route`` requires the platform's key."""
    if not requires_api_key(route):
        return None
    return shipped.shipped_code(spec, labels, (shipped.API_KEY_AUTH_MODULE,))


def adapters_objects(spec: ModelDeploymentSpec, volume: MountpointVolume | None) -> list[pod.Json]:
    """The PersistentVolume and claim of ``spec``'s adapters prefix, applied with the server
    that mounts them (none without adapters)."""
    if volume is None:
        return []
    return volume.objects(object_labels(spec, adapters.ADAPTERS_ROLE))


def server_image(spec: ModelDeploymentSpec, group_fabric: Fabric | None) -> str:
    """The image of ``spec``'s vLLM server: the Neuron DLC on Inferentia2; on GPUs the EFA
    image for a group on nodes with EFA (its NCCL needs aws-ofi-nccl), else LMCache's build
    with ``kv_cache``, else vLLM's own."""
    if spec.on_neuron:
        return NEURON_VLLM_IMAGE
    if group_fabric is not None:
        return VLLM_EFA_IMAGE
    return kv_offload.image(spec)


def server_pod(
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    service_account: str,
    weights: WeightsVolume | None,
    artifacts: MountpointVolume | None,
    route: Route | None,
    code: shipped.ShippedCode | None,
) -> pod.Json:
    """The pod of one vLLM OpenAI server of ``spec`` (see :class:`VllmEngine`).

    Every engine that runs vLLM's own server builds its pod here: resources, security,
    probes, weights, the API key and its middleware (with ``code``, the shipped check),
    placement and the artifacts gate.
    """
    share = pod_resources(spec.instance, spec.replicas_per_node)
    memory_mib = replica_memory_mib(spec)
    group_fabric = fabric(spec, placement.workers)
    image = server_image(spec, group_fabric)
    # HOME, /tmp, /dev/shm, then the read-only model volumes and the shipped code.
    volumes, mounts = vllm_server.scratch_volumes(memory_mib)
    loaded = loader_of(spec).pod(spec, weights.claim_name if weights is not None else None)
    volumes += loaded.volumes
    mounts += loaded.mounts
    adapters_volume = adapters.adapters_volume(spec, context)
    if adapters_volume is not None:
        adapters_claim, adapters_mount = adapters.pod_volume(adapters_volume)
        volumes.append(adapters_claim)
        mounts.append(adapters_mount)
    if artifacts is not None:
        volumes.append(pod.claim_volume(ARTIFACTS_ROLE, artifacts.claim_name))
        mounts.append(pod.mount(ARTIFACTS_ROLE, ARTIFACTS_MOUNT_PATH, read_only=True))
    for extra in (kv_offload.metrics_volume(spec), kv_offload.disk_volume(spec)):
        if extra is not None:
            volumes.append(extra[0])
            mounts.append(extra[1])
    args = vllm_server.vllm_server_args(spec, bucket_name=context.bucket_name)
    environment = pod.env(vllm_server.server_environment(spec, context))
    if group_fabric is not None:
        environment += pod.env(group_fabric.environment())
    if route is not None:
        environment += pod.env({"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(keep_alive_seconds(route))})
    if code is not None:
        volumes.append(code.volume)
        mounts.append(code.mount)
        environment += pod.env(dict(code.env))
        environment.append(
            pod.secret_env(
                API_KEY_ENV, secret=API_KEY_SECRET_NEED.name, key=API_KEY_SECRET_NEED.key
            )
        )
        args += ["--middleware", shipped.VLLM_API_KEY_MIDDLEWARE]
    container = server_deployment.container(
        spec,
        name=CONTAINER_NAME,
        image=image,
        command=vllm_server.VLLM_SERVE_COMMAND,
        args=args,
        env=environment,
        resources=pod.resources(
            {
                "cpu": share.cpu,
                "memory": f"{memory_mib}Mi",
                **pod.accelerator_resource(spec),
                **(group_fabric.resources() if group_fabric is not None else {}),
            },
            requested_only=kv_offload.disk_request(spec),
        ),
        # vLLM's /health: 200 when the engine is alive, 503 when it is dead.
        health_path=HEALTH_PATH,
        mounts=mounts,
    )
    spec_json = server_deployment.pod_spec(
        spec, placement.workers, service_account, container, volumes
    )
    init_containers = list(loaded.init_containers)
    if artifacts is not None and gates_on_compiled_artifacts(spec):
        init_containers.append(
            pod.artifacts_gate(
                spec,
                image=image,
                bucket_name=context.bucket_name,
                security=pod.ROOT_IMAGE_SECURITY,
            )
        )
    if init_containers:
        spec_json["initContainers"] = init_containers
    return spec_json


class VllmEngine(server_deployment.DeploymentEngine):
    """Standalone vLLM: a Deployment, a ClusterIP Service, a PDB and a ServiceAccount.

    - **ServiceAccount** ``names.service_account_name(spec.name)``: with the Run:ai streamer
      its pods read the weights prefix with their own identity, recorded in the chart's needs for
      the CDK side to give it a Pod Identity role; otherwise it has no AWS access at all.
    - **Deployment** of ``spec.scaling.min_replicas`` pods (a fixed count unless
      ``scaling.autoscale``, when the count is left to the KEDA autoscaler of
      :mod:`eks_inference.charts.autoscaling`), each one model replica on
      ``tensor_parallel_size`` NeuronCores or GPUs. Rolls
      :data:`~eks_inference.charts.server_deployment.ROLLOUT_SURGE` extra replica at a time and
      never below the current count (``maxUnavailable`` 0), so a rollout needs room for one
      more replica in the node pool. Pods are selected by the deployment's instance and
      component labels.
    - **Service** ``<deployment>``: ClusterIP, OpenAI API on port 8000.
    - **PodDisruptionBudget**: one replica at a time may be evicted, so node drains proceed
      without taking the whole model down; unhealthy pods may always be evicted. A replica
      that is still loading is unready, so the budget cannot protect it: its pods carry
      ``karpenter.sh/do-not-disrupt`` for the rollout budget (image pull and model load), so
      Karpenter never moves a replica mid-load; once loaded, the budget governs.

    The pod (:mod:`eks_inference.charts.pod`): root images with a read-only root filesystem and
    bounded emptyDirs for HOME and /tmp, a memory-backed /dev/shm; CPU and memory from the
    instance size with requests equal to limits (Guaranteed QoS, so the kubelet never evicts
    a loaded model first); images pulled only if not present (pinned tags, tens of GiB); HTTP
    probes on ``/health``, the startup probe sized for the model load; the pool's selector and
    tolerations, and the Neuron scheduler for part of a node's cores.

    Exposed on a load balancer (``route``), the server keeps idle connections open past the
    load balancer's idle timeout. When the route requires the platform's API key, the pod
    reads it from the platform's Secret into ``VLLM_API_KEY`` only, never into its arguments:
    vLLM reads the variable itself, while ``--api-key`` would put the key in every process
    listing and, on vLLM 0.16, in the startup log's "non-default args" line. The project's
    API-key check (``api_key_auth``, shipped in the ConfigMap ``<deployment>-serve-app`` on
    ``PYTHONPATH``) is loaded with ``--middleware`` and answers every request without
    ``Authorization: Bearer <key>`` with OpenAI's 401, on every path but ``/health`` (the
    probes and the load balancer's health checks) and ``/metrics`` (Prometheus, in-cluster;
    the load balancer never forwards it). vLLM's own check, which guards only some prefixes,
    stays on behind it. the chart's needs records the Secret.
    """

    name = "vllm"
    summary = "a standalone vLLM Deployment"
    component = COMPONENT
    health_path = HEALTH_PATH

    capabilities = (
        # LMCache is built for CUDA; the Neuron image has no KV connector for it.
        OffloadsKvCache(frozenset({Accelerator.NVIDIA})),
        AutoscalesOnQueue(),
        SERVES_ADAPTERS,
        # One replica per pod, serving the OpenAI API on its own port, with the vllm: metrics
        # the picker's scorers read. On GPUs only: the Neuron image's vLLM 0.16 publishes no
        # prefix-cache state worth routing on, and the picker's routing is untested there.
        PicksEndpoints(frozenset({Accelerator.NVIDIA})),
        # vLLM's own multi-node mode, on the CUDA image; the Neuron stack serves one node.
        ServesAcrossNodes(frozenset({Accelerator.NVIDIA})),
    )

    def loaders(self, accelerator: Accelerator) -> frozenset[str]:
        # The Run:ai streamer ships with the GPU image only; the Neuron image reads a directory
        # from Mountpoint, which is also what its compile job mounts. On GPUs vLLM reads any
        # local directory: a copied image (image) or an FSx for Lustre mount (fsx).
        if accelerator is Accelerator.NVIDIA:
            return frozenset({"mountpoint", "runai_streamer", "image", "fsx"})
        return frozenset({"mountpoint"})

    def rules(self) -> tuple[Rule[ModelDeploymentSpec], ...]:
        reads = frozenset({"scaling.min_replicas", "scaling.max_replicas", "scaling.autoscale"})
        return (Rule(reads, fixed_unless_autoscaled),)

    def server(self, given: ServerInputs) -> ChartObjects:
        spec, placement, context, weights, artifacts, route = given
        loader = loader_of(spec)
        loader.check_volume(spec, given=weights is not None)
        labels = object_labels(spec, COMPONENT)
        account = names.service_account_name(spec.name)
        selector = selector_labels(spec, COMPONENT)
        code = api_key_code(spec, labels, route)
        pod_spec = server_pod(spec, placement, context, account, weights, artifacts, route, code)
        if spec.multi_node is not None:
            return self._groups(spec, placement, labels, account, pod_spec, route, code)
        deployment = server_deployment.deployment(
            spec,
            labels,
            selector,
            pod_spec,
            annotations=dict(code.annotations if code is not None else ()),
        )
        service, disruption_budget = server_deployment.service_and_disruption_budget(
            spec, labels, selector
        )
        adapters_volume = adapters.adapters_volume(spec, context)
        return ChartObjects(
            (
                service_account(account, labels),
                *adapters_objects(spec, adapters_volume),
                *((code.config_map,) if code is not None else ()),
                deployment,
                service,
                disruption_budget,
            ),
            PlatformNeeds(
                namespaces=(INFERENCE_NAMESPACE,),
                mounted_prefixes=(adapters_volume.mounted,) if adapters_volume else (),
                service_accounts=loader.server_identities(spec, account),
                secrets=(API_KEY_SECRET_NEED,) if requires_api_key(route) else (),
                pods=(server_deployment.scheduling_need(spec, placement.workers, pod_spec),),
            ),
        )

    def _groups(
        self,
        spec: ModelDeploymentSpec,
        placement: Placement,
        labels: dict[str, str],
        account: str,
        leader: pod.Json,
        route: Route | None,
        code: shipped.ShippedCode | None,
    ) -> ChartObjects:
        """A replica across nodes: the LeaderWorkerSet of :mod:`.groups`, the leaders' Service
        and the set's disruption budget."""
        lws = groups.leader_worker_set(
            spec,
            labels,
            object_labels(spec, groups.WORKER_COMPONENT),
            leader,
            annotations=dict(code.annotations if code is not None else ()),
        )
        service, _ = server_deployment.service_and_disruption_budget(
            spec, labels, selector_labels(spec, COMPONENT)
        )
        return ChartObjects(
            (
                service_account(account, labels),
                *((code.config_map,) if code is not None else ()),
                lws,
                service,
                groups.group_disruption_budget(spec, labels),
            ),
            PlatformNeeds(
                namespaces=(INFERENCE_NAMESPACE,),
                custom_resources=(names.LEADERWORKERSET_CRD,),
                service_accounts=loader_of(spec).server_identities(spec, account),
                secrets=(API_KEY_SECRET_NEED,) if requires_api_key(route) else (),
                pods=groups.group_scheduling_needs(spec, placement.workers, lws),
            ),
        )

    def services(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        # The LeaderWorkerSet controller makes a headless Service named after the set.
        if spec.multi_node is not None:
            return (spec.name, groups.group_name(spec))
        return (spec.name,)

    def platform_needs(self, spec: ModelDeploymentSpec) -> PlatformNeeds:
        if spec.multi_node is not None:
            return PlatformNeeds(custom_resources=(names.LEADERWORKERSET_CRD,))
        return PlatformNeeds()

    def network_policies(
        self, spec: ModelDeploymentSpec, labels: Mapping[str, str], servers: pod.Json
    ) -> list[pod.Json]:
        """``<deployment>-group``, for a replica across nodes: the pods of the deployment's
        groups reach each other on every port and protocol, and nothing else does. The
        rendezvous (:data:`~eks_inference.charts.vllm_server.GROUP_MASTER_PORT`) is fixed,
        but NCCL's bootstrap and its socket transport, and vLLM's message queues between
        ranks, listen on ports they pick at start-up; only the deployment's own group pods are
        admitted. (EFA's SRD traffic bypasses the kernel and is not IP, so no policy sees it.)
        """
        if spec.multi_node is None:
            return []
        members = {"podSelector": {"matchLabels": groups.group_selector(spec)}}
        return [
            policy(
                f"{spec.name}-group",
                labels,
                {"matchLabels": groups.group_selector(spec)},
                ingress=[{"from": [members]}],
                egress=[{"to": [members]}],
            )
        ]

    def replica_series(
        self, spec: ModelDeploymentSpec, selector: Mapping[str, str], pods: str
    ) -> ReplicaSeries:
        """A Deployment's replicas from its status; a multi-node deployment's, which
        kube-state-metrics has no LeaderWorkerSet series for, as its ready leader pods (a
        leader is ready only once its whole group serves) against ``min_replicas``."""
        series = server_deployment.replica_series(spec, pods)
        if spec.multi_node is None:
            return series
        leaders = matchers(
            namespace=INFERENCE_NAMESPACE,
            **{ksm_label(names.INSTANCE_LABEL): spec.name, ksm_label(COMPONENT_LABEL): COMPONENT},
        )
        ready = matchers(namespace=INFERENCE_NAMESPACE, condition="true")
        return ReplicaSeries(
            ready=(
                f"count(({metrics.KSM_POD_READY.one()}{ready} == 1) and on(namespace, pod) "
                f"{metrics.KSM_POD_LABELS.one()}{leaders}) or vector(0)"
            ),
            wanted=f"vector({spec.scaling.min_replicas})",
            loading=series.loading,
            loading_alert_seconds=series.loading_alert_seconds,
        )

    def kind(self, spec: ModelDeploymentSpec) -> DeploymentKind:
        if spec.on_neuron:
            return DeploymentKind("vllm-neuron", "vLLM on Inferentia2")
        return DeploymentKind("vllm-gpu", "vLLM on GPU")

    def metrics(self, spec: ModelDeploymentSpec) -> EngineMetrics:
        return vllm_server.vllm_metrics()

    def autoscaler(self, spec: ModelDeploymentSpec) -> str:
        if spec.scaling.autoscale:
            return "KEDA adds a replica per quarter batch waiting (and above 80 % KV cache)"
        return "fixed size: set scaling.autoscale to let KEDA add replicas"

    def own_alerts(self, spec: ModelDeploymentSpec) -> tuple[EngineAlert, ...]:
        """With adapters, requests waiting for an adapter slot
        (:mod:`~eks_inference.engines.vllm.observed`); with ``kv_cache``, LMCache's hit ratio
        collapsing (:mod:`~eks_inference.engines.vllm.lmcache_observed`); with an endpoint
        picker (``routing``), the picker failing open."""
        return (
            vllm_observed.alerts(spec)
            + lmcache_observed.alerts(spec)
            + routing_observed.alerts(spec)
        )

    def own_panels(self, spec: ModelDeploymentSpec) -> tuple[EnginePanel, ...]:
        """With adapters, the adapters running and waiting per replica; with ``kv_cache``,
        LMCache's hit ratio and tiers; with an endpoint picker, its decisions, prefix-cache
        hits and fall-back."""
        return (
            vllm_observed.panels(spec)
            + lmcache_observed.panels(spec)
            + routing_observed.panels(spec)
        )
