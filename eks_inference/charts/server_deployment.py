"""A Deployment of model servers: its pod, its rollout, the Service and budget in front of it.

Every engine whose servers are one ``apps/v1`` Deployment with the OpenAI API on
:data:`~eks_inference.charts.model_server.OPENAI_PORT` (standalone vLLM, Triton) runs them the
same way: one server container probed on its health route and drained before it stops; a
rollout one extra pod at a time, never below the current count, that Karpenter leaves alone
while a new replica loads; a ClusterIP Service named after the deployment, whose one port is
the one the load balancer's target group, the other pods' clients and Prometheus reach; a
budget that lets node drains evict one replica at a time; and replicas counted from the
Deployment's status. What differs (the image, command, arguments, environment, resources and
volumes) is the engine's; :class:`DeploymentEngine` is what such an engine answers alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

from eks_inference import metrics
from eks_inference.charts import pod
from eks_inference.charts.contract import PodNeed
from eks_inference.charts.metadata import api_object, cluster_ip_service, metadata
from eks_inference.charts.model_server import HTTP_PORT_NAME, OPENAI_PORT
from eks_inference.charts.pod import Json
from eks_inference.charts.serving import Backend, ServingEngine
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.observability.observed import ReplicaSeries
from eks_inference.observability.signals import matchers
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.startup_budget import model_load_seconds, rollout_seconds

# A rollout starts one extra pod before removing an old one (maxSurge), so an update never
# lowers capacity; the node pool must have room for it.
ROLLOUT_SURGE = 1
# Probes on the server's health route (200 once it serves). The startup probe allows the whole
# model load budget; after that a replica leaves the Service after 30 seconds of failures and
# is restarted after 90.
_PROBE_PERIOD_S = 10
_PROBE_TIMEOUT_S = 5
_READINESS_FAILURES = 3
_LIVENESS_PERIOD_S = 30
_LIVENESS_TIMEOUT_S = 10
_LIVENESS_FAILURES = 3
# On termination: keep serving for 10 s while endpoints drop the pod, then let in-flight
# generations finish within two minutes. The load balancer drains a target for as long
# (eks_inference.charts.ingress), so a generation in flight is never cut off by either.
_PRE_STOP_SLEEP_S = 10
TERMINATION_GRACE_S = 120


def container(
    spec: ModelDeploymentSpec,
    *,
    name: str,
    image: str,
    command: Sequence[str],
    args: list[str],
    env: list[Json],
    resources: Json,
    health_path: str,
    mounts: list[Json],
) -> Json:
    """The server container: the OpenAI port named :data:`HTTP_PORT_NAME` (the PodMonitor
    scraping ``/metrics`` refers to it by name), a root image's security, HTTP probes on
    ``health_path`` (the startup probe sized for ``spec``'s model load) and the drain before
    it stops."""

    def probe(failures: int, period_seconds: int, timeout_seconds: int) -> Json:
        return pod.http_probe(
            health_path,
            port=OPENAI_PORT,
            period_seconds=period_seconds,
            timeout_seconds=timeout_seconds,
            failure_threshold=failures,
        )

    load_failures = math.ceil(model_load_seconds(spec) / _PROBE_PERIOD_S)
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
        "command": list(command),
        "args": args,
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": OPENAI_PORT, "protocol": "TCP"}],
        "env": env,
        "resources": resources,
        "securityContext": pod.ROOT_IMAGE_SECURITY,
        "startupProbe": probe(load_failures, _PROBE_PERIOD_S, _PROBE_TIMEOUT_S),
        "readinessProbe": probe(_READINESS_FAILURES, _PROBE_PERIOD_S, _PROBE_TIMEOUT_S),
        "livenessProbe": probe(_LIVENESS_FAILURES, _LIVENESS_PERIOD_S, _LIVENESS_TIMEOUT_S),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(_PRE_STOP_SLEEP_S)]}}},
        "volumeMounts": mounts,
    }


def pod_spec(
    spec: ModelDeploymentSpec,
    pool: NodePool,
    service_account: str,
    container: Json,
    volumes: list[Json],
) -> Json:
    """The pod of ``container`` on ``pool``, run as ``service_account`` with the termination
    grace the drain needs."""
    return {
        "serviceAccountName": service_account,
        # Pod Identity mounts its own token; the Kubernetes API is never called.
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        "securityContext": pod.ROOT_IMAGE_POD_SECURITY,
        **pod.placement(pool, spec),
        "containers": [container],
        "volumes": volumes,
    }


def deployment(
    spec: ModelDeploymentSpec,
    labels: Mapping[str, str],
    selector: Mapping[str, str],
    pod_spec: Json,
    *,
    annotations: Mapping[str, str],
) -> Json:
    """The Deployment ``<deployment>`` of ``pod_spec``, rolled :data:`ROLLOUT_SURGE` extra pod
    at a time; the pods carry ``annotations``.

    It runs ``scaling.min_replicas`` pods unless autoscaled: then KEDA owns the count, and a
    count in the manifest would reset it to min_replicas on every apply, in the middle of a
    burst.
    """
    counted = {} if spec.scaling.autoscale else {"replicas": spec.scaling.min_replicas}
    return api_object(
        "apps/v1",
        "Deployment",
        metadata(spec.name, labels),
        {
            "spec": {
                **counted,
                "selector": {"matchLabels": dict(selector)},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": ROLLOUT_SURGE, "maxUnavailable": 0},
                },
                # A rollout is stuck only once a new replica has had time for a node, an
                # image pull and a model load.
                "progressDeadlineSeconds": rollout_seconds(spec),
                "template": {
                    # Karpenter leaves a replica alone while it may still be loading.
                    "metadata": {
                        "labels": dict(labels),
                        "annotations": {
                            **pod.do_not_disrupt(rollout_seconds(spec)),
                            **annotations,
                        },
                    },
                    "spec": pod_spec,
                },
            }
        },
    )


def scheduling_need(spec: ModelDeploymentSpec, pool: NodePool, pod_spec: Json) -> PodNeed:
    """What a node of ``pool`` must offer the Deployment ``<deployment>``'s pods."""
    return pod.scheduling_need(
        (f"Deployment/{spec.name}", "spec", "template"),
        pool,
        pod_spec,
        per_node=spec.replicas_per_node,
    )


def service_and_disruption_budget(
    spec: ModelDeploymentSpec, labels: Mapping[str, str], selector: Mapping[str, str]
) -> tuple[Json, Json]:
    """The Service ``<deployment>`` on port 8000 and its PodDisruptionBudget, both selecting
    the server pods by ``selector``.

    The budget allows one unavailable replica, so a drain proceeds one replica at a time,
    and lets unhealthy pods be evicted (``AlwaysAllow``): a replica that never became ready
    (a model that does not load) must not block a node's drain forever.
    """
    service = cluster_ip_service(
        spec.name,
        labels,
        selector,
        [{"name": HTTP_PORT_NAME, "port": OPENAI_PORT, "targetPort": OPENAI_PORT}],
    )
    disruption_budget = api_object(
        "policy/v1",
        "PodDisruptionBudget",
        metadata(spec.name, labels),
        {
            "spec": {
                "maxUnavailable": 1,
                "selector": {"matchLabels": selector},
                "unhealthyPodEvictionPolicy": "AlwaysAllow",
            }
        },
    )
    return service, disruption_budget


def loading_pods(pods: str) -> str:
    """PromQL counting the pods of ``pods`` whose server runs but is not ready: loading."""
    namespace = matchers(namespace=INFERENCE_NAMESPACE)
    not_ready = matchers(namespace=INFERENCE_NAMESPACE, condition="false")
    return (
        f"count(({metrics.KSM_CONTAINER_RUNNING.one()}{namespace} == 1)"
        f" and on(namespace, pod) ({metrics.KSM_POD_READY.one()}{not_ready} == 1)"
        f" and on(namespace, pod) {pods})"
    )


def replica_series(spec: ModelDeploymentSpec, pods: str) -> ReplicaSeries:
    """Ready and wanted replicas from the Deployment's status; loading: running but unready
    pods, which may load for the model load budget (a pod is loading once its container runs).
    """
    deployment = matchers(namespace=INFERENCE_NAMESPACE, deployment=spec.name)
    return ReplicaSeries(
        ready=f"sum({metrics.KSM_DEPLOYMENT_AVAILABLE.one()}{deployment})",
        wanted=f"sum({metrics.KSM_DEPLOYMENT_SPEC_REPLICAS.one()}{deployment})",
        loading=loading_pods(pods),
        loading_alert_seconds=model_load_seconds(spec),
    )


class DeploymentEngine(ServingEngine):
    """An engine whose servers are the Deployment ``<deployment>`` of this module, behind the
    Service of the same name: what it renders and reports beyond that is its own.

    A subclass sets :attr:`health_path` besides what every engine sets. Its rollouts need
    room for :data:`ROLLOUT_SURGE` replica; it scales at run time only when autoscaled (by
    KEDA); the load balancer drains a target for the servers' termination grace.
    """

    #: The route its servers answer 200 on once they serve: probes and the load balancer's
    #: health check.
    health_path: ClassVar[str]

    def services(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        return (spec.name,)

    def rollout_headroom_replicas(self, spec: ModelDeploymentSpec) -> int:
        return ROLLOUT_SURGE

    def scales_at_run_time(self, spec: ModelDeploymentSpec) -> bool:
        return spec.scaling.autoscale

    def backend(self, spec: ModelDeploymentSpec) -> Backend:
        return Backend(spec.name, self.health_path, TERMINATION_GRACE_S)

    def replica_series(
        self, spec: ModelDeploymentSpec, selector: Mapping[str, str], pods: str
    ) -> ReplicaSeries:
        return replica_series(spec, pods)
