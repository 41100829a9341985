"""A replica across nodes as rendered (``examples/multi-node.yaml``): the LeaderWorkerSet
against the pinned LWS v0.10.0 CRD, its pods and every other object against Kubernetes 1.35,
and the failure semantics, traffic and flows read from the objects themselves."""

from __future__ import annotations

from functools import cache
from typing import Any

import kubernetes_validate
import pytest

from eks_inference import names
from eks_inference.charts.render import render_platform
from eks_inference.charts.serving import engine_needs
from eks_inference.charts.vllm_server import GROUP_MASTER_PORT
from eks_inference.engines.vllm import groups
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import KUBERNETES_VERSION
from tests.helpers.objects import (
    LEADERWORKERSET_CRD,
    crd_validator,
    is_custom_resource,
    of_kind,
    one,
    schema_errors,
)
from tests.helpers.platforms import REPO
from tests.helpers.rendered import CONTEXT

EXAMPLE = REPO / "examples" / "multi-node.yaml"
# deployment -> (nodes per replica, instance type)
GROUPS = {"llama-405b-fp8": (2, "p5.48xlarge"), "qwen3-coder-480b": (4, "g6e.48xlarge")}


@cache
def _rendered() -> tuple[PlatformSpec, dict[str, list[dict[str, Any]]]]:
    platform = PlatformSpec.from_yaml(EXAMPLE)
    return platform, render_platform(platform, CONTEXT)


def _objects(name: str) -> list[dict[str, Any]]:
    return _rendered()[1][name]


def _templates(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    lws = one(_objects(name), "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    return template["leaderTemplate"], template["workerTemplate"]


def _server(template: dict[str, Any]) -> dict[str, Any]:
    (container,) = template["spec"]["containers"]
    return dict(container)


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions, as Kubernetes reads them)."""
    operators = {"In": lambda v, values: v in values, "NotIn": lambda v, values: v not in values}
    return _matches(selector.get("matchLabels", {}), labels) and all(
        operators[e["operator"]](labels.get(e["key"]), e["values"])
        for e in selector.get("matchExpressions", [])
    )


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_the_leader_worker_set_validates_against_the_pinned_crd(name: str) -> None:
    lws = one(_objects(name), "LeaderWorkerSet")
    assert lws["apiVersion"] == groups.LWS_API_VERSION
    assert schema_errors(crd_validator(LEADERWORKERSET_CRD, "v1"), lws) == []


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_every_other_object_and_both_pods_validate_against_kubernetes(name: str) -> None:
    core = [o for o in _objects(name) if not is_custom_resource(o)]
    assert {"Service", "PodDisruptionBudget", "NetworkPolicy", "Ingress"} <= {
        o["kind"] for o in core
    }
    assert of_kind(core, "Deployment") == []
    for template in _templates(name):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": names.INFERENCE_NAMESPACE},
            "spec": template["spec"],
        }
        core.append(pod)
    for obj in core:
        assert kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True) == (
            KUBERNETES_VERSION
        )


@pytest.mark.parametrize(("name", "group"), sorted(GROUPS.items()))
def test_a_group_is_whole_nodes_that_fail_and_roll_as_one(
    name: str, group: tuple[int, str]
) -> None:
    nodes, instance_type = group
    spec = one(_objects(name), "LeaderWorkerSet")["spec"]
    template = spec["leaderWorkerTemplate"]
    assert template["size"] == nodes
    # One pod of a group lost recreates the whole group.
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    # Workers start with the leader: the leader is ready only once they have joined.
    assert spec["startupPolicy"] == "LeaderCreated"
    # Updates bring up one whole new group before an old one goes: the pool's headroom.
    assert spec["rolloutStrategy"]["rollingUpdateConfiguration"] == {
        "maxSurge": 1,
        "maxUnavailable": 0,
    }
    platform = _rendered()[0]
    deployment = platform.deployment(name)
    pool = platform.pool_for(deployment)
    assert deployment.nodes_during_rollout == (deployment.scaling.max_replicas + 1) * nodes
    assert pool.max_size >= deployment.nodes_during_rollout
    assert pool.zones == (0,)
    for pod in _templates(name):
        gpus = _server(pod)["resources"]["limits"][names.NVIDIA_GPU_RESOURCE]
        assert gpus == str(deployment.instance.cores)
        assert pod["spec"]["nodeSelector"] == pool.node_selector()
        assert pool.instance_types == (instance_type,)


@pytest.mark.parametrize(("name", "group"), sorted(GROUPS.items()))
def test_the_leader_serves_and_the_workers_are_headless_ranks(
    name: str, group: tuple[int, str]
) -> None:
    nodes = group[0]
    leader, worker = (_server(t) for t in _templates(name))
    for server, rank in ((leader, "0"), (worker, f"$({groups.NODE_RANK_ENV})")):
        args = server["args"]
        assert args[args.index("--pipeline-parallel-size") + 1] == str(nodes)
        assert args[args.index("--nnodes") + 1] == str(nodes)
        assert args[args.index("--node-rank") + 1] == rank
        assert args[args.index("--master-addr") + 1] == f"$({names.LWS_LEADER_ADDRESS_ENV})"
        assert args[args.index("--master-port") + 1] == str(GROUP_MASTER_PORT)
        assert args[args.index("--distributed-executor-backend") + 1] == "mp"
    assert "--headless" not in leader["args"]
    assert worker["args"][-1] == "--headless"
    # The leader is probed on /health, ready once the whole group serves; workers have no
    # API server to probe.
    assert leader["readinessProbe"]["httpGet"]["path"] == "/health"
    assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(worker)
    (rank,) = (e for e in worker["env"] if e["name"] == groups.NODE_RANK_ENV)
    assert rank["valueFrom"]["fieldRef"]["fieldPath"] == (
        f"metadata.labels['{names.LWS_WORKER_INDEX_LABEL}']"
    )
    # The same pod otherwise: image, resources, volumes, API key from the Secret.
    assert worker["image"] == leader["image"]
    assert worker["resources"] == leader["resources"]
    assert worker["volumeMounts"] == leader["volumeMounts"]
    assert "VLLM_API_KEY" in {e["name"] for e in worker["env"]}
    assert not any("api-key" in a for a in leader["args"] + worker["args"])


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_only_leaders_are_behind_the_service_the_load_balancer_and_the_monitor(
    name: str,
) -> None:
    objects = _objects(name)
    leader, worker = (t["metadata"]["labels"] for t in _templates(name))
    service = one(objects, "Service")
    selector = service["spec"]["selector"]
    assert _matches(selector, leader)
    assert not _matches(selector, worker)
    (path,) = one(objects, "Ingress")["spec"]["rules"][0]["http"]["paths"]
    assert path["path"] == f"/{name}/v1"
    assert path["backend"]["service"]["name"] == service["metadata"]["name"]
    monitor = one(objects, "PodMonitor")["spec"]["selector"]["matchLabels"]
    assert _matches(monitor, leader)
    assert not _matches(monitor, worker)


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_policies_admit_the_group_to_itself_and_the_load_balancer_to_leaders_only(
    name: str,
) -> None:
    # What the LWS controller adds to every pod of the set, beside the template's labels.
    set_label = {names.LWS_NAME_LABEL: groups.group_name(_rendered()[0].deployment(name))}
    leader, worker = ({**t["metadata"]["labels"], **set_label} for t in _templates(name))
    policies = {p["metadata"]["name"]: p["spec"] for p in of_kind(_objects(name), "NetworkPolicy")}
    ingress_to_worker = [
        (policy_name, rule)
        for policy_name, spec in policies.items()
        if _selects(spec["podSelector"], worker)
        for rule in spec.get("ingress", [])
    ]
    # Workers admit exactly one thing: the pods of their own set, on any port.
    assert ingress_to_worker == [
        (
            f"{name}-group",
            {
                "from": [
                    {
                        "podSelector": {
                            "matchLabels": groups.group_selector(_rendered()[0].deployment(name))
                        }
                    }
                ]
            },
        )
    ]
    (group_peer,) = ingress_to_worker[0][1]["from"]
    assert _matches(group_peer["podSelector"]["matchLabels"], leader)
    assert _matches(group_peer["podSelector"]["matchLabels"], worker)
    # The serving port is open on leaders only.
    serving = policies[f"{name}-serving"]
    assert _selects(serving["podSelector"], leader)
    assert not _selects(serving["podSelector"], worker)
    assert policies[f"{name}-group"]["egress"] == [{"to": [group_peer]}]


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_the_set_needs_the_lws_crd_and_one_eviction_at_a_time(name: str) -> None:
    spec = _rendered()[0].deployment(name)
    assert names.LEADERWORKERSET_CRD in engine_needs(spec).custom_resources
    budget = [
        b
        for b in of_kind(_objects(name), "PodDisruptionBudget")
        if b["metadata"]["name"] == groups.group_name(spec)
    ]
    (pdb,) = budget
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == groups.group_selector(spec)


def test_a_single_node_deployment_renders_no_group() -> None:
    platform = PlatformSpec.from_yaml(REPO / "deployments.yaml")
    for spec in platform.deployments:
        assert names.LEADERWORKERSET_CRD not in engine_needs(spec).custom_resources
