"""A replica across nodes (``multi_node``): the LeaderWorkerSet of standalone vLLM.

One group per replica, ``nodes_per_replica`` pods, one per node, all built by the one server
pod builder (:func:`eks_inference.engines.vllm.engine.server_pod`) and differing only where a
rank differs:

- the **leader** (worker index 0, component ``vllm``) runs ``vllm serve`` as node rank 0: the
  API server, the rendezvous (``--master-addr``/``--master-port``) and the first pipeline
  stage. It alone carries the component label the Service, the load balancer's target group,
  the serving and metrics NetworkPolicies and the PodMonitor select, so clients only ever
  reach a leader; its ``/health`` answers 200 only once every rank has joined and the model is
  loaded, so a group is behind the Service only when it is whole;
- each **worker** (component ``vllm-worker``) runs the same command as node rank
  ``<worker index>`` with ``--headless``: no API server, hence no HTTP probes; it lives as long
  as its vLLM process does.

Failure and updates, as LeaderWorkerSet v0.10.0 does them:

- ``restartPolicy: RecreateGroupOnPodRestart``: a pod of a group that fails or is evicted
  recreates every pod of the group; a pipeline with a stage missing cannot serve, and vLLM
  cannot re-admit a rank into a running group;
- ``startupPolicy: LeaderCreated``: workers are created with the leader, not after it is
  ready (``LeaderReady`` would never start them: the leader is ready only once they join);
- ``rolloutStrategy`` ``maxSurge`` 1, ``maxUnavailable`` 0: an update brings up one whole new
  group beside the old ones and removes an old group once it is ready, so the pool needs one
  group's nodes of headroom, which the platform's placement rule counts
  (``nodes_during_rollout``);
- a PodDisruptionBudget of one unavailable pod over the set's pods: a drain takes one
  group down at a time.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from eks_inference import names
from eks_inference.charts import pod
from eks_inference.charts.contract import PodNeed
from eks_inference.charts.metadata import api_object, metadata
from eks_inference.charts.pod import Json
from eks_inference.charts.server_deployment import ROLLOUT_SURGE
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.startup_budget import rollout_seconds

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
WORKER_COMPONENT = "vllm-worker"
# The variable the workers read their node rank from: the worker-index label, by the
# downward API.
NODE_RANK_ENV = "NODE_RANK"
_PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def group_name(spec: ModelDeploymentSpec) -> str:
    """The LeaderWorkerSet ``<deployment>-group``, and the headless Service its controller
    makes under the same name (the ClusterIP Service ``<deployment>`` is the leaders')."""
    return f"{spec.name}-group"


def worker_pod(leader: Json) -> Json:
    """The worker's pod: the leader's, its server a headless rank of the group.

    ``--node-rank`` becomes ``$(NODE_RANK)``, the pod's worker index, and ``--headless``
    follows; without an API server there is nothing for HTTP probes to reach.
    """
    worker = copy.deepcopy(leader)
    (container,) = worker["containers"]
    args = list(container["args"])
    args[args.index("--node-rank") + 1] = f"$({NODE_RANK_ENV})"
    container["args"] = [*args, "--headless"]
    container["env"] = [
        {
            "name": NODE_RANK_ENV,
            "valueFrom": {
                "fieldRef": {"fieldPath": f"metadata.labels['{names.LWS_WORKER_INDEX_LABEL}']"}
            },
        },
        *container["env"],
    ]
    for probe in _PROBES:
        container.pop(probe, None)
    return worker


def leader_worker_set(
    spec: ModelDeploymentSpec,
    leader_labels: Mapping[str, str],
    worker_labels: Mapping[str, str],
    leader: Json,
    *,
    annotations: Mapping[str, str],
) -> Json:
    """The LeaderWorkerSet of ``spec``: ``scaling.min_replicas`` groups of the leader pod
    ``leader`` and its workers (see the module)."""

    def template(labels: Mapping[str, str], pod_spec: Json) -> Json:
        return {
            "metadata": {
                "labels": dict(labels),
                "annotations": {**pod.do_not_disrupt(rollout_seconds(spec)), **annotations},
            },
            "spec": pod_spec,
        }

    return api_object(
        LWS_API_VERSION,
        "LeaderWorkerSet",
        metadata(group_name(spec), leader_labels),
        {
            "spec": {
                "replicas": spec.scaling.min_replicas,
                "startupPolicy": "LeaderCreated",
                "rolloutStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdateConfiguration": {
                        "maxSurge": ROLLOUT_SURGE,
                        "maxUnavailable": 0,
                    },
                },
                "leaderWorkerTemplate": {
                    "size": spec.nodes_per_replica,
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": template(leader_labels, leader),
                    "workerTemplate": template(worker_labels, worker_pod(leader)),
                },
            }
        },
    )


def group_selector(spec: ModelDeploymentSpec) -> dict[str, str]:
    """Every pod of the deployment's groups, leaders and workers."""
    return {names.INSTANCE_LABEL: spec.name, names.LWS_NAME_LABEL: group_name(spec)}


def group_disruption_budget(spec: ModelDeploymentSpec, labels: Mapping[str, str]) -> Json:
    """One pod of the set at a time may be evicted (each eviction restarts its group)."""
    return api_object(
        "policy/v1",
        "PodDisruptionBudget",
        metadata(group_name(spec), labels),
        {
            "spec": {
                "maxUnavailable": 1,
                "selector": {"matchLabels": group_selector(spec)},
                "unhealthyPodEvictionPolicy": "AlwaysAllow",
            }
        },
    )


def group_scheduling_needs(
    spec: ModelDeploymentSpec, pool: NodePool, lws: Json
) -> tuple[PodNeed, ...]:
    """What a node of ``pool`` must offer each of the set's pod templates: one pod a node."""
    path = (f"LeaderWorkerSet/{group_name(spec)}", "spec", "leaderWorkerTemplate")
    templates = lws["spec"]["leaderWorkerTemplate"]
    return tuple(
        pod.scheduling_need((*path, key, "spec"), pool, templates[key]["spec"])
        for key in ("leaderTemplate", "workerTemplate")
    )
