"""KServe on Knative Serving (``engine: kserve``): vLLM's OpenAI server as an InferenceService
predictor that scales to zero, and everything else about a deployment that depends on it.

The predictor is a KServe custom predictor: one container, ``kserve-container``, running the
pod standalone vLLM runs (:func:`eks_inference.engines.vllm.engine.server_pod`: the same
``vllm serve`` arguments, environment, resources, security, probes, weights and API-key
middleware), adapted to what Knative accepts in a revision (Knative Serving 1.21,
``pkg/apis/serving/fieldmask.go`` and ``k8s_validation.go``): one serving port named
``http1``, no container ``lifecycle`` and no pod ``terminationGracePeriodSeconds`` (Knative
sets both from the revision's timeout). KServe turns the predictor into the Knative Service
``<name>-predictor``; Knative's autoscaler scales its revisions between the spec's bounds on
concurrent requests, down to zero, and its activator holds requests while no replica runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from eks_inference import metrics, names
from eks_inference.catalog import Accelerator
from eks_inference.charts import adapters, pod, server_deployment, vllm_server
from eks_inference.charts.api_key import API_KEY_SECRET_NEED, requires_api_key
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import (
    api_object,
    metadata,
    object_labels,
    selector_labels,
    service_account,
)
from eks_inference.charts.model_server import OPENAI_PORT
from eks_inference.charts.network_rules import peer, policy, ports, rule
from eks_inference.charts.pod import Json
from eks_inference.charts.serving import (
    Backend,
    ChartObjects,
    MetricsTarget,
    ServerInputs,
    ServingEngine,
)
from eks_inference.charts.weights_loaders import loader_of
from eks_inference.engines.kserve import observed as kserve_observed
from eks_inference.engines.kserve.options import MAX_REQUEST_TIMEOUT_S, Serverless, serverless_of
from eks_inference.engines.vllm import engine as vllm
from eks_inference.engines.vllm import observed as vllm_observed
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.observability.observed import (
    DeploymentKind,
    EngineAlert,
    EngineMetrics,
    EnginePanel,
    ReplicaSeries,
)
from eks_inference.observability.signals import matchers
from eks_inference.specification.capabilities import DerivesServiceNames, ScalesToZero
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.routes import idle_timeout_seconds
from eks_inference.specification.startup_budget import (
    NODE_AND_IMAGE_SECONDS,
    model_load_seconds,
    rollout_seconds,
)
from eks_inference.specification.validation import Problems, Rule

if TYPE_CHECKING:
    pass

COMPONENT = "kserve"
KSERVE_API_VERSION = "serving.kserve.io/v1beta1"
# The container KServe looks for in a custom predictor (constants.InferenceServiceContainerName).
CONTAINER_NAME = "kserve-container"
# Knative accepts one serving port per revision, named '', 'http1' or 'h2c'; it renames it
# `user-port` on the pods it creates (v1.UserPortName), which is what Prometheus scrapes.
SERVING_PORT_NAME = "http1"
USER_PORT_NAME = "user-port"
# Knative's queue-proxy sidecar in every revision pod (pkg/networking/constants.go): requests
# from the gateway and the activator arrive on 8012; the autoscaler scrapes 9090.
QUEUE_PROXY_PORT = 8012
AUTOSCALER_METRICS_PORT = 9090
# KServe 0.20 serves Standard (raw Deployment) mode by default; Knative mode is asked for.
DEPLOYMENT_MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
DEPLOYMENT_MODE = "Knative"
# Knative's revision annotations (pkg/apis/autoscaling/register.go, pkg/apis/serving/register.go).
RETENTION_ANNOTATION = "autoscaling.knative.dev/scale-to-zero-pod-retention-period"
INITIAL_SCALE_ANNOTATION = "autoscaling.knative.dev/initial-scale"
PROGRESS_DEADLINE_ANNOTATION = "serving.knative.dev/progress-deadline"
# A route on the gateway's cluster-local listener only: nothing outside the cluster resolves it,
# and the load balancer reaches it through the listener's Service with the host set.
VISIBILITY_LABEL = "networking.knative.dev/visibility"
CLUSTER_LOCAL = "cluster-local"
SCALE_METRIC = "concurrency"
# Kourier's gateway answers GET /ready on its stats listener (port 9000) on any host
# (config/200-bootstrap.yaml at knative-v1.21.1 of net-kourier); its cluster-local listener
# needs the host `internalkourier`, which a load-balancer health check cannot send. The
# gateway drains for 15 s within a 30 s grace period (config/300-gateway.yaml).
KOURIER_HEALTH_PORT = 9000
KOURIER_HEALTH_PATH = "/ready"
KOURIER_GRACE_S = 30


def predictor_host(spec: ModelDeploymentSpec) -> str:
    """The host Kourier's cluster-local listener serves ``spec``'s predictor on."""
    predictor = names.kserve_predictor_name(spec.name)
    return f"{predictor}.{INFERENCE_NAMESPACE}.svc.cluster.local"


def progress_deadline_seconds(spec: ModelDeploymentSpec) -> int:
    """Seconds a new revision has to bring a replica up: the spec's, or the rollout budget."""
    given = serverless_of(spec).progress_deadline_seconds
    return rollout_seconds(spec) if given is None else given


def request_timeout_seconds(spec: ModelDeploymentSpec) -> int:
    """Seconds a request may take: the spec's, or the load balancer's need for the deployment
    (the longest generation and, when it scales to zero, a cold start before it)."""
    given = serverless_of(spec).request_timeout_seconds
    return idle_timeout_seconds(spec) if given is None else given


def initial_replicas(spec: ModelDeploymentSpec) -> int:
    """Replicas a new revision starts with: the spec's, or ``max(min_replicas, 1)``."""
    given = serverless_of(spec).initial_replicas
    return max(spec.scaling.min_replicas, 1) if given is None else given


def _check_initial_replicas(spec: ModelDeploymentSpec, problems: Problems) -> None:
    scaling = spec.scaling
    given = serverless_of(spec).initial_replicas
    if given is not None and not scaling.min_replicas <= given <= scaling.max_replicas:
        problems.add(
            ("options", "initial_replicas"),
            f"initial_replicas ({given}) must lie within min_replicas ({scaling.min_replicas}) "
            f"and max_replicas ({scaling.max_replicas}); set it in that range, or remove it",
            given,
        )


def _check_cold_start(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """The progress deadline and request timeout cover a cold start of this deployment."""
    serverless = serverless_of(spec)
    rollout = rollout_seconds(spec)
    budget = (
        f"{NODE_AND_IMAGE_SECONDS} s node launch and image pull + "
        f"{model_load_seconds(spec)} s model load budget = {rollout} s"
    )
    deadline = serverless.progress_deadline_seconds
    if deadline is not None and deadline < rollout:
        problems.add(
            ("options", "progress_deadline_seconds"),
            f"{deadline} s is shorter than a cold start of this deployment ({budget}), so "
            f"Knative would mark every new revision failed while its model loads; set at "
            f"least {rollout}, or remove it to use {rollout}",
            deadline,
        )
    needed = idle_timeout_seconds(spec)
    what = (
        f"a cold start ({budget}) and the longest generation"
        if spec.scaling.min_replicas == 0
        else "the longest generation"
    )
    timeout = serverless.request_timeout_seconds
    if timeout is not None and timeout < needed:
        problems.add(
            ("options", "request_timeout_seconds"),
            f"{timeout} s does not cover {what}: {needed} s; set at least {needed}, or remove "
            f"it to use {needed}",
            timeout,
        )
    elif timeout is None and needed > MAX_REQUEST_TIMEOUT_S:
        field = "min_replicas" if spec.scaling.min_replicas == 0 else "max_replicas"
        problems.add(
            ("scaling", field),
            f"a request of this deployment may take {needed} s ({what}), beyond the "
            f"{MAX_REQUEST_TIMEOUT_S} s a request may last on the load balancer and Knative; "
            "set min_replicas >= 1 so no request waits for a cold start, or lower "
            "limits.max_model_len",
            getattr(spec.scaling, field),
        )


class KServeEngine(ServingEngine):
    """KServe in Knative mode: an InferenceService whose predictor is vLLM's OpenAI server.

    Objects: the ServiceAccount ``names.service_account_name(spec.name)`` (with the Run:ai
    streamer, the identity that reads the weights prefix; otherwise no AWS access), with an
    API key the ConfigMap of the shipped key check (:mod:`eks_inference.charts.shipped`), and
    the InferenceService ``<deployment>``:

    - annotated for Knative mode, the deployment's retention period, initial scale and
      progress deadline (:mod:`eks_inference.engines.kserve.options` says why each default), and
      ``karpenter.sh/do-not-disrupt`` for the rollout budget, which Knative copies to the pods;
    - labelled with the deployment's labels (KServe gives them to the pods) and
      ``networking.knative.dev/visibility: cluster-local``: the predictor is served only on
      Kourier's cluster-local listener, which the load balancer reaches
      (:meth:`backend`);
    - a predictor scaled by Knative's autoscaler between ``min_replicas`` and
      ``max_replicas`` on concurrent requests per replica, targeting
      ``spec.target_ongoing_requests`` (three quarters of ``limits.max_num_seqs`` by
      default, the target Ray Serve scales on), with the request timeout of
      :func:`request_timeout_seconds`.

    Exposed on the load balancer, the deployment's Ingress sends ``/<name>/v1/...`` to
    Kourier's ``kourier-internal`` Service in ``kourier-system`` with the path stripped and
    the Host set to the predictor's cluster-local name; Kourier routes it to a replica's
    queue-proxy or, with none ready, to Knative's activator, which holds it and asks for a
    replica. The target group checks the gateway's own readiness, so a model scaled to zero
    is never an unhealthy target. The vLLM server requires the API key as the standalone
    engine's does, with the same shipped middleware.
    """

    name = "kserve"
    summary = "vLLM as a KServe InferenceService on Knative, scaling to zero"
    component = COMPONENT
    accelerators = frozenset({Accelerator.NVIDIA})
    not_served_on = {
        Accelerator.NEURON: (
            "a Neuron server waits in its artifacts gate until the compile job has "
            "published the compiled model, often longer than any Knative progress "
            "deadline, after which Knative marks the revision failed for good; and a "
            "cold start on Inferentia2 (Neuron model load on top of node launch) "
            "outlasts what clients wait. Serve inf2 with engine: rayservice, which also "
            "scales to zero"
        )
    }
    # Knative keeps the last replica for the retention period after traffic stops.
    capabilities = (
        ScalesToZero(lambda spec: serverless_of(spec).retention_seconds),
        # Knative names each revision <service>-<5-digit generation> and gives it a Service of
        # that name and one with -private.
        DerivesServiceNames(
            lambda spec: re.escape(names.kserve_predictor_name(spec.name)) + r"-\d{5}(-private)?"
        ),
        # The predictor runs vLLM's own server with its flags and pod.
        vllm.SERVES_ADAPTERS,
    )
    options = Serverless

    def loaders(self, accelerator: Accelerator) -> frozenset[str]:
        return vllm.VllmEngine().loaders(accelerator)

    def rules(self) -> tuple[Rule[ModelDeploymentSpec], ...]:
        sized = frozenset(
            {
                "model",
                "instance_type",
                "tensor_parallel_size",
                "limits.max_model_len",
                "limits.max_num_seqs",
                "neuron",
                "scaling.min_replicas",
                "options",
            }
        )
        bounds = frozenset({"scaling.min_replicas", "scaling.max_replicas", "options"})
        return (Rule(sized, _check_cold_start), Rule(bounds, _check_initial_replicas))

    def services(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        """KServe and Knative make ``<name>-predictor`` (and a Service per revision of it:
        the :class:`DerivesServiceNames` capability)."""
        return (names.kserve_predictor_name(spec.name),)

    def rollout_headroom_replicas(self, spec: ModelDeploymentSpec) -> int:
        """A new revision starts its initial replicas before traffic leaves the old one."""
        return initial_replicas(spec)

    def scales_at_run_time(self, spec: ModelDeploymentSpec) -> bool:
        return True

    def server(self, given: ServerInputs) -> ChartObjects:
        spec, placement, context, weights, artifacts, route = given
        loader = loader_of(spec)
        loader.check_volume(spec, given=weights is not None)
        labels = object_labels(spec, COMPONENT)
        account = names.service_account_name(spec.name)
        code = vllm.api_key_code(spec, labels, route)
        predictor = _knative_pod(
            vllm.server_pod(spec, placement, context, account, weights, artifacts, route, code)
        )
        annotations = {
            DEPLOYMENT_MODE_ANNOTATION: DEPLOYMENT_MODE,
            RETENTION_ANNOTATION: f"{serverless_of(spec).retention_seconds}s",
            INITIAL_SCALE_ANNOTATION: str(initial_replicas(spec)),
            PROGRESS_DEADLINE_ANNOTATION: f"{progress_deadline_seconds(spec)}s",
            **pod.do_not_disrupt(rollout_seconds(spec)),
            **dict(code.annotations if code is not None else ()),
        }
        service = api_object(
            KSERVE_API_VERSION,
            "InferenceService",
            metadata(
                spec.name,
                {**labels, VISIBILITY_LABEL: CLUSTER_LOCAL},
                annotations=annotations,
            ),
            {
                "spec": {
                    "predictor": {
                        **predictor,
                        "minReplicas": spec.scaling.min_replicas,
                        "maxReplicas": spec.scaling.max_replicas,
                        "scaleMetric": SCALE_METRIC,
                        "scaleTarget": spec.target_ongoing_requests,
                        "timeout": request_timeout_seconds(spec),
                    }
                }
            },
        )
        adapters_volume = adapters.adapters_volume(spec, context)
        objects = (
            service_account(account, labels),
            *vllm.adapters_objects(spec, adapters_volume),
            *((code.config_map,) if code is not None else ()),
            service,
        )
        return ChartObjects(
            objects,
            PlatformNeeds(
                namespaces=(INFERENCE_NAMESPACE,),
                mounted_prefixes=(adapters_volume.mounted,) if adapters_volume else (),
                service_accounts=loader.server_identities(spec, account),
                secrets=(API_KEY_SECRET_NEED,) if requires_api_key(route) else (),
                pods=(
                    pod.scheduling_need(
                        (f"InferenceService/{spec.name}", "spec", "predictor"),
                        placement.workers,
                        predictor,
                        sidecars=(_QUEUE_PROXY_REQUESTS,),
                        per_node=spec.replicas_per_node,
                    ),
                ),
            ),
        )

    def backend(self, spec: ModelDeploymentSpec) -> Backend:
        return Backend(
            names.KOURIER_INTERNAL_SERVICE,
            KOURIER_HEALTH_PATH,
            KOURIER_GRACE_S,
            namespace=names.KOURIER_NAMESPACE,
            port=names.KOURIER_INTERNAL_PORT,
            health_port=KOURIER_HEALTH_PORT,
            host_header=predictor_host(spec),
        )

    def metrics_targets(self, spec: ModelDeploymentSpec) -> tuple[MetricsTarget, ...]:
        selector = {"matchLabels": selector_labels(spec, COMPONENT)}
        return (MetricsTarget(COMPONENT, selector, USER_PORT_NAME),)

    def network_policies(
        self, spec: ModelDeploymentSpec, labels: Mapping[str, str], servers: Json
    ) -> list[Json]:
        """Knative's flows to the replicas' queue-proxy.

        ``<deployment>-knative``: the Kourier gateway (requests, when replicas are ready)
        and the activator (requests while it buffers, and its probes) reach the queue-proxy
        on 8012; the autoscaler scrapes its concurrency on 9090. Nothing else reaches the
        queue-proxy; vLLM's own port is the serving policy's.
        """
        return [
            policy(
                f"{spec.name}-knative",
                labels,
                servers,
                ingress=[
                    rule(
                        "from",
                        [
                            peer(names.KOURIER_NAMESPACE, names.KOURIER_GATEWAY_LABELS),
                            peer(names.KNATIVE_SERVING_NAMESPACE, names.KNATIVE_ACTIVATOR_LABELS),
                        ],
                        ports(QUEUE_PROXY_PORT),
                    ),
                    rule(
                        "from",
                        [peer(names.KNATIVE_SERVING_NAMESPACE, names.KNATIVE_AUTOSCALER_LABELS)],
                        ports(AUTOSCALER_METRICS_PORT),
                    ),
                ],
            )
        ]

    def kind(self, spec: ModelDeploymentSpec) -> DeploymentKind:
        return DeploymentKind("kserve-gpu", "vLLM on KServe (Knative) on GPU")

    def metrics(self, spec: ModelDeploymentSpec) -> EngineMetrics:
        """vLLM's metrics; requests also wait in Knative's activator (all of them while no
        replica is ready, the only queue there is then)."""
        return vllm_server.vllm_metrics(also_waiting=(metrics.KNATIVE_ACTIVATOR_CONCURRENCY,))

    def replica_series(
        self, spec: ModelDeploymentSpec, selector: Mapping[str, str], pods: str
    ) -> ReplicaSeries:
        """Ready and loading replicas from kube-state-metrics (the predictor's pods carry the
        deployment's labels); wanted: the pods Knative's autoscaler asks for, 0 when idle."""
        ready = matchers(namespace=INFERENCE_NAMESPACE, condition="true")
        requested = metrics.KNATIVE_PODS_REQUESTED.one()
        return ReplicaSeries(
            ready=(
                f"count(({metrics.KSM_POD_READY.one()}{ready} == 1) and on(namespace, pod) {pods})"
            ),
            wanted=f"sum({requested}{matchers(**selector)})",
            loading=server_deployment.loading_pods(pods),
            loading_alert_seconds=model_load_seconds(spec),
        )

    def own_alerts(self, spec: ModelDeploymentSpec) -> tuple[EngineAlert, ...]:
        """Cold starts far slower than planned, or more often than hourly
        (:mod:`~eks_inference.engines.kserve.observed`); with adapters, requests waiting for
        an adapter slot (:mod:`~eks_inference.engines.vllm.observed`)."""
        return (*kserve_observed.alerts(spec), *vllm_observed.alerts(spec))

    def own_panels(self, spec: ModelDeploymentSpec) -> tuple[EnginePanel, ...]:
        """Cold starts: how many, and how long against the plan's estimate; with adapters,
        the adapters running and waiting."""
        return (*kserve_observed.panels(spec), *vllm_observed.panels(spec))

    def platform_needs(self, spec: ModelDeploymentSpec) -> PlatformNeeds:
        """The InferenceService CRD, of the KServe add-on the stack adds only when needed."""
        return PlatformNeeds(custom_resources=(names.INFERENCESERVICE_CRD,))

    def autoscaler(self, spec: ModelDeploymentSpec) -> str:
        return (
            f"Knative adds a replica per {spec.target_ongoing_requests} concurrent requests, "
            f"scales to {spec.scaling.min_replicas} after "
            f"{serverless_of(spec).retention_seconds} s idle"
        )

    def queue_threshold(self, per_replica: int, alert: int) -> str:
        return f"Knative scales on concurrency; alert above {alert} waiting and rising"


# Knative's queue-proxy, added to every revision pod: the requests KServe's and Knative's
# defaults give it (config-deployment's queue-sidecar-cpu-request, 25m; no memory request).
_QUEUE_PROXY_REQUESTS: Json = {"resources": {"requests": {"cpu": "25m"}}}


def _knative_pod(server: Json) -> Json:
    """``server`` (a vLLM pod) as a Knative revision accepts it.

    Knative refuses a container ``lifecycle`` and a pod ``terminationGracePeriodSeconds`` (it
    drains through the queue-proxy and sets the grace from the revision's timeout), and a
    serving port named other than ``http1``; the container is the one KServe reads.
    """
    predictor = {k: v for k, v in server.items() if k != "terminationGracePeriodSeconds"}
    (container,) = server["containers"]
    adapted = {k: v for k, v in container.items() if k != "lifecycle"}
    adapted["name"] = CONTAINER_NAME
    adapted["ports"] = [
        {"name": SERVING_PORT_NAME, "containerPort": OPENAI_PORT, "protocol": "TCP"}
    ]
    predictor["containers"] = [adapted]
    return predictor
