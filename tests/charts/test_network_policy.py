"""NetworkPolicies, read back from the rendered manifests and evaluated like Kubernetes does.

A small evaluator implements NetworkPolicy semantics: a pod selected by any policy of a type
is isolated for that direction; a flow is then allowed only if some rule of some selecting
policy matches its peer (pod and namespace selectors, ``ipBlock`` with ``except``) and its port
(a number or range, or a container port name resolved on the receiving pod, and protocol).
Traffic from a pod's own node (the kubelet's probes) is always allowed, as Kubernetes and the
VPC CNI's network policy agent both have it. ``ipBlock`` also matches pod addresses, as the
VPC CNI does (pods have VPC addresses), which only makes the denials harder to pass.

The cluster around the rendered pods is the one the platform installs: the KubeRay operator,
Prometheus, CoreDNS, a load balancer in the VPC, AWS endpoints, and neighbours that must be
kept out: pods of other namespaces, of other deployments, and of nobody's.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from eks_inference import names, versions
from eks_inference.charts.artifacts_gate import COMPILE_JOB_ROLE
from eks_inference.charts.model_server import OPENAI_PORT
from eks_inference.charts.render import render_platform
from eks_inference.engines.rayservice.pods import HEAD_COMPONENT, RAY_METRICS_PORT, WORKER_COMPONENT
from eks_inference.engines.vllm.engine import COMPONENT as VLLM_COMPONENT
from eks_inference.names import COMPONENT_LABEL, INFERENCE_NAMESPACE, INSTANCE_LABEL
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.checks import found
from tests.helpers.rendered import CONTEXT, Rendered

Json = dict[str, Any]

NODE_IP = "10.0.64.10"
LOAD_BALANCER_IP = "10.0.1.25"  # an ALB address in a public subnet of the VPC
INTERNET_IP = "203.0.113.9"
PEERED_NETWORK_IP = "192.168.7.7"  # routed to the VPC, but outside it
S3_IP = "52.216.8.1"
API_SERVER_IP = "172.20.0.1"  # the `kubernetes` Service
POD_IDENTITY_AGENT_IP = "169.254.170.23"
INSTANCE_METADATA_IP = "169.254.169.254"
DNS_PORT = 53
DASHBOARD_PORT = 8265
# Ports Ray listens on besides the declared ones: the dashboard agent, a worker process of the
# default range, and a raylet port chosen at start-up.
DASHBOARD_AGENT_PORT = 52365
GCS_PORT = 6379
RAY_CLIENT_PORT = 10001
WORKER_PROCESS_PORT = 10002
RAYLET_PORT = 41237
RAY_PORTS = (GCS_PORT, DASHBOARD_PORT, RAY_CLIENT_PORT, DASHBOARD_AGENT_PORT, WORKER_PROCESS_PORT)


@dataclass(frozen=True)
class Port:
    name: str | None
    number: int
    protocol: str = "TCP"


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    labels: Mapping[str, str]
    ip: str
    ports: tuple[Port, ...] = ()
    node_ip: str = NODE_IP

    def port_named(self, name: str, protocol: str) -> int | None:
        return next(
            (p.number for p in self.ports if p.name == name and p.protocol == protocol), None
        )


@dataclass(frozen=True)
class Address:
    """An endpoint that is not a pod of the cluster."""

    ip: str


Endpoint = Pod | Address


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Kubernetes label selector semantics; an empty selector selects everything."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


@dataclass
class Cluster:
    namespaces: dict[str, dict[str, str]]
    policies: list[Json]

    def add_namespace(self, name: str) -> None:
        self.namespaces.setdefault(name, {"kubernetes.io/metadata.name": name})

    def selecting(self, pod: Pod, policy_type: str) -> list[Json]:
        found = []
        for policy in self.policies:
            spec = policy["spec"]
            types = spec.get("policyTypes") or (
                ["Ingress", "Egress"] if "egress" in spec else ["Ingress"]
            )
            if (
                policy["metadata"]["namespace"] == pod.namespace
                and policy_type in types
                and selects(spec["podSelector"], pod.labels)
            ):
                found.append(policy)
        return found

    def _peer_matches(self, peer: Json, policy_namespace: str, other: Endpoint) -> bool:
        if "ipBlock" in peer:
            address = ipaddress.ip_address(other.ip)
            block = peer["ipBlock"]
            return address in ipaddress.ip_network(block["cidr"]) and not any(
                address in ipaddress.ip_network(e) for e in block.get("except", [])
            )
        if not isinstance(other, Pod):
            return False
        if "namespaceSelector" in peer:
            in_namespace = selects(peer["namespaceSelector"], self.namespaces[other.namespace])
        else:
            in_namespace = other.namespace == policy_namespace
        return in_namespace and selects(peer.get("podSelector", {}), other.labels)

    @staticmethod
    def _port_matches(port: Json, destination: Endpoint, number: int, protocol: str) -> bool:
        if port.get("protocol", "TCP") != protocol:
            return False
        value: int | str | None = port.get("port")
        if value is None:
            return True
        if isinstance(value, str):
            if not isinstance(destination, Pod):
                return False
            return destination.port_named(value, protocol) == number
        end: int = port.get("endPort", value)
        return bool(value <= number <= end)

    def _rule_matches(
        self,
        rule: Json,
        peers_key: str,
        policy_namespace: str,
        peer: Endpoint,
        destination: Endpoint,
        number: int,
        protocol: str,
    ) -> bool:
        peers = rule.get(peers_key) or [{"ipBlock": {"cidr": "0.0.0.0/0"}}]
        ports = rule.get("ports") or [{"protocol": protocol}]
        return any(self._peer_matches(p, policy_namespace, peer) for p in peers) and any(
            self._port_matches(p, destination, number, protocol) for p in ports
        )

    def _direction_allows(
        self,
        pod: Pod,
        policy_type: str,
        peer: Endpoint,
        destination: Endpoint,
        port: int,
        proto: str,
    ) -> bool:
        selecting = self.selecting(pod, policy_type)
        if not selecting:
            return True
        rules_key, peers_key = ("ingress", "from") if policy_type == "Ingress" else ("egress", "to")
        return any(
            self._rule_matches(rule, peers_key, pod.namespace, peer, destination, port, proto)
            for policy in selecting
            for rule in policy["spec"].get(rules_key, [])
        )

    def allowed(
        self, source: Endpoint, destination: Endpoint, port: int, protocol: str = "TCP"
    ) -> bool:
        """Whether ``source`` may open a connection to ``destination`` on ``port``."""
        if isinstance(source, Pod) and not self._direction_allows(
            source, "Egress", destination, destination, port, protocol
        ):
            return False
        if isinstance(destination, Pod):
            if source.ip == destination.node_ip:
                return True
            return self._direction_allows(
                destination, "Ingress", source, destination, port, protocol
            )
        return True


def _ports(template: Json, *extra: Port) -> tuple[Port, ...]:
    declared = [
        Port(p.get("name"), p["containerPort"], p.get("protocol", "TCP"))
        for container in template["spec"]["containers"]
        for p in container.get("ports", [])
    ]
    return (*declared, *extra)


def _deployment_pods(objects: list[Json]) -> Iterator[tuple[str, Json, tuple[Port, ...]]]:
    """(role, pod template, ports it listens on) of every pod a deployment's objects make."""
    ray_ports = (
        Port("agent", DASHBOARD_AGENT_PORT),
        Port(None, WORKER_PROCESS_PORT),
        Port(None, RAYLET_PORT),
    )
    for obj in objects:
        if obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
            yield VLLM_COMPONENT, template, _ports(template)
        elif obj["kind"] == "Job":
            template = obj["spec"]["template"]
            yield COMPILE_JOB_ROLE, template, _ports(template)
        elif obj["kind"] == "RayService":
            cluster = obj["spec"]["rayClusterConfig"]
            head = cluster["headGroupSpec"]["template"]
            yield HEAD_COMPONENT, head, _ports(head, *ray_ports)
            for group in cluster["workerGroupSpecs"]:
                worker = group["template"]
                # Every worker runs a Serve proxy on the serving port.
                yield WORKER_COMPONENT, worker, _ports(worker, Port(None, OPENAI_PORT), *ray_ports)


@dataclass
class World:
    cluster: Cluster
    pods: dict[str, dict[str, Pod]]  # deployment -> role -> pod
    operator: Pod
    prometheus: Pod
    dns: Pod
    neighbour: Pod  # a pod of another namespace
    stray: Pod  # a pod in the inference namespace that belongs to no deployment

    def servers(self, deployment: str) -> list[Pod]:
        roles = self.pods[deployment]
        return [roles[r] for r in (VLLM_COMPONENT, HEAD_COMPONENT, WORKER_COMPONENT) if r in roles]

    def ray_deployments(self) -> list[str]:
        return [name for name, roles in self.pods.items() if HEAD_COMPONENT in roles]


def _world(rendered: Rendered) -> World:
    namespace_documents = list(yaml.safe_load_all(rendered.files["namespace.yaml"]))
    (namespace,) = [d for d in namespace_documents if d["kind"] == "Namespace"]
    policies = [
        o for o in [*namespace_documents, *rendered.all_objects()] if o["kind"] == "NetworkPolicy"
    ]
    cluster = Cluster(namespaces={}, policies=policies)
    cluster.namespaces[INFERENCE_NAMESPACE] = {
        **namespace["metadata"].get("labels", {}),
        "kubernetes.io/metadata.name": INFERENCE_NAMESPACE,
    }
    addresses = (f"10.0.{96 + i // 200}.{i % 200 + 20}" for i in range(10_000))
    pods: dict[str, dict[str, Pod]] = {}
    for deployment, objects in rendered.objects.items():
        for role, template, ports in _deployment_pods(objects):
            labels = template["metadata"]["labels"]
            assert labels[INSTANCE_LABEL] == deployment
            pod = Pod(f"{deployment}-{role}", INFERENCE_NAMESPACE, labels, next(addresses), ports)
            pods.setdefault(deployment, {})[role] = pod
    for name in (
        names.KUBERAY_NAMESPACE,
        names.MONITORING_NAMESPACE,
        "kube-system",
        "default",
    ):
        cluster.add_namespace(name)
    operator_name = versions.KUBERAY_OPERATOR_CHART.chart
    return World(
        cluster=cluster,
        pods=pods,
        # Pod labels as the KubeRay operator chart's Deployment template sets them.
        operator=Pod(
            "kuberay-operator",
            names.KUBERAY_NAMESPACE,
            {
                "app.kubernetes.io/name": operator_name,
                "app.kubernetes.io/instance": "kuberay-operator",
                "app.kubernetes.io/component": operator_name,
            },
            next(addresses),
        ),
        # Pod labels the Prometheus Operator sets on the pods of kube-prometheus-stack's
        # Prometheus (makeSelectorLabels, plus the shard label).
        prometheus=Pod(
            "prometheus-0",
            names.MONITORING_NAMESPACE,
            {
                "app.kubernetes.io/managed-by": "prometheus-operator",
                "app.kubernetes.io/name": "prometheus",
                "app.kubernetes.io/instance": names.PROMETHEUS_NAME,
                "operator.prometheus.io/name": names.PROMETHEUS_NAME,
                "operator.prometheus.io/shard": "0",
                "prometheus": names.PROMETHEUS_NAME,
            },
            next(addresses),
        ),
        dns=Pod(
            "coredns",
            "kube-system",
            {"k8s-app": "kube-dns", "eks.amazonaws.com/component": "coredns"},
            next(addresses),
            (Port("dns", DNS_PORT, "UDP"), Port("dns-tcp", DNS_PORT, "TCP")),
        ),
        neighbour=Pod("shell", "default", {"run": "shell"}, next(addresses)),
        stray=Pod("debug", INFERENCE_NAMESPACE, {"run": "debug"}, next(addresses)),
    )


@pytest.fixture(scope="module", params=["reference", "variants"])
def world(request: pytest.FixtureRequest) -> World:
    return _world(request.getfixturevalue(request.param))


# -- what the platform needs stays allowed ----------------------------------------------------


def test_load_balancer_and_in_cluster_clients_reach_the_serving_port(world: World) -> None:
    allowed = world.cluster.allowed
    for deployment in world.pods:
        for server in world.servers(deployment):
            assert allowed(Address(LOAD_BALANCER_IP), server, OPENAI_PORT), server.name
            assert allowed(world.neighbour, server, OPENAI_PORT), server.name


def test_prometheus_reaches_the_ports_the_pod_monitors_scrape(world: World) -> None:
    metrics_ports = {
        HEAD_COMPONENT: RAY_METRICS_PORT,
        WORKER_COMPONENT: RAY_METRICS_PORT,
        VLLM_COMPONENT: OPENAI_PORT,
    }
    scraped = [
        (roles[role], port)
        for roles in world.pods.values()
        for role, port in metrics_ports.items()
        if role in roles
    ]
    for pod, port in found(scraped):
        assert world.cluster.allowed(world.prometheus, pod, port), pod.name


def test_kuberay_operator_reaches_the_heads_dashboard_and_serve_proxy(world: World) -> None:
    assert world.ray_deployments()
    for deployment in world.ray_deployments():
        head = world.pods[deployment][HEAD_COMPONENT]
        assert world.cluster.allowed(world.operator, head, DASHBOARD_PORT)
        assert world.cluster.allowed(world.operator, head, OPENAI_PORT)


def test_ray_head_and_workers_reach_each_other_on_every_ray_port(world: World) -> None:
    for deployment in world.ray_deployments():
        head = world.pods[deployment][HEAD_COMPONENT]
        worker = world.pods[deployment][WORKER_COMPONENT]
        for port in (*RAY_PORTS, RAYLET_PORT, RAY_METRICS_PORT, OPENAI_PORT):
            assert world.cluster.allowed(worker, head, port), port
            assert world.cluster.allowed(head, worker, port), port
            assert world.cluster.allowed(worker, worker, port), port


def test_kubelet_probes_from_the_node_are_allowed(world: World) -> None:
    node = Address(NODE_IP)
    for deployment in world.pods:
        for server in world.servers(deployment):
            port = OPENAI_PORT if server.labels[COMPONENT_LABEL] == VLLM_COMPONENT else 52365
            assert world.cluster.allowed(node, server, port), server.name


def test_every_pod_reaches_dns_aws_endpoints_and_its_credentials(world: World) -> None:
    cluster = world.cluster
    roles_seen = set()
    for roles in world.pods.values():
        roles_seen |= set(roles)
        for pod in roles.values():
            assert cluster.allowed(pod, world.dns, DNS_PORT, "UDP"), pod.name
            assert cluster.allowed(pod, world.dns, DNS_PORT, "TCP"), pod.name
            # S3 (weights streaming, compiled artifacts), the API server (the Ray autoscaler).
            for endpoint in (S3_IP, API_SERVER_IP):
                assert cluster.allowed(pod, Address(endpoint), 443), (pod.name, endpoint)
            assert cluster.allowed(pod, Address(POD_IDENTITY_AGENT_IP), 80), pod.name
    # The compile job (it writes the artifacts to S3 with its own identity) among them.
    assert COMPILE_JOB_ROLE in roles_seen


# -- and nothing else -------------------------------------------------------------------------


def test_no_pod_of_another_namespace_reaches_a_ray_head_but_on_the_serving_port(
    world: World,
) -> None:
    for deployment in world.ray_deployments():
        head = world.pods[deployment][HEAD_COMPONENT]
        for port in (*RAY_PORTS, RAYLET_PORT):
            assert not world.cluster.allowed(world.neighbour, head, port), port
        # The operator and Prometheus only on their own ports.
        for port in (GCS_PORT, DASHBOARD_AGENT_PORT, RAY_CLIENT_PORT):
            assert not world.cluster.allowed(world.operator, head, port), port
        assert not world.cluster.allowed(world.prometheus, head, DASHBOARD_PORT)


def test_no_pod_of_another_deployment_reaches_a_ray_head(world: World) -> None:
    checked = 0
    for deployment in world.ray_deployments():
        head = world.pods[deployment][HEAD_COMPONENT]
        for other, roles in world.pods.items():
            if other == deployment:
                continue
            for pod in roles.values():
                for port in (*RAY_PORTS, RAYLET_PORT):
                    assert not world.cluster.allowed(pod, head, port), (pod.name, head.name, port)
                    checked += 1
    assert checked


def test_a_pod_of_no_deployment_in_the_namespace_is_isolated(world: World) -> None:
    cluster, stray = world.cluster, world.stray
    for deployment in world.ray_deployments():
        head = world.pods[deployment][HEAD_COMPONENT]
        assert not cluster.allowed(stray, head, DASHBOARD_PORT)
    assert not cluster.allowed(stray, world.dns, DNS_PORT, "UDP")
    assert not cluster.allowed(stray, Address(S3_IP), 443)
    assert not cluster.allowed(world.neighbour, stray, 8080)


def test_nothing_outside_the_vpc_reaches_a_model_server(world: World) -> None:
    for deployment in world.pods:
        for server in world.servers(deployment):
            for source in (INTERNET_IP, PEERED_NETWORK_IP):
                assert not world.cluster.allowed(Address(source), server, OPENAI_PORT)
            assert not world.cluster.allowed(Address(LOAD_BALANCER_IP), server, DASHBOARD_PORT)


def test_pods_reach_neither_instance_metadata_nor_plain_http_nor_other_pods(world: World) -> None:
    cluster = world.cluster
    for roles in world.pods.values():
        for pod in roles.values():
            assert not cluster.allowed(pod, Address(INSTANCE_METADATA_IP), 80), pod.name
            assert not cluster.allowed(pod, Address(INTERNET_IP), 80), pod.name
            assert not cluster.allowed(pod, world.neighbour, 8080), pod.name
            assert not cluster.allowed(pod, world.operator, 8080), pod.name


# -- the policies themselves ------------------------------------------------------------------


def test_every_named_port_a_policy_opens_is_declared_by_every_pod_it_selects(
    world: World,
) -> None:
    """A named port no selected pod declares would silently allow nothing."""
    pods = [pod for roles in world.pods.values() for pod in roles.values()]
    named = 0
    for policy in world.cluster.policies:
        selected = [p for p in pods if selects(policy["spec"]["podSelector"], p.labels)]
        for rule in policy["spec"].get("ingress", []):
            for port in rule.get("ports", []):
                if isinstance(port.get("port"), str):
                    named += 1
                    for pod in found(selected):
                        assert pod.port_named(port["port"], port["protocol"]), (
                            policy["metadata"]["name"],
                            pod.name,
                        )
    assert named


def test_the_namespace_isolates_every_pod_in_it_both_ways(world: World) -> None:
    """Isolation does not hang on a deployment's own policies selecting its pods."""
    pods = [world.stray, *(pod for roles in world.pods.values() for pod in roles.values())]
    for pod in pods:
        for direction in ("Ingress", "Egress"):
            selecting = world.cluster.selecting(pod, direction)
            assert any(selects(p["spec"]["podSelector"], {}) for p in selecting), pod.name


def test_the_serving_port_opens_to_the_clusters_own_vpc(reference_platform: PlatformSpec) -> None:
    """A cluster in a VPC of its own addresses (``vpc=``) passes them in the render context."""
    context = dataclasses.replace(CONTEXT, vpc_cidr="10.42.0.0/16")
    objects = render_platform(reference_platform, context)
    for deployment, rendered in objects.items():
        (serving,) = [o for o in rendered if o["metadata"]["name"] == f"{deployment}-serving"]
        blocks = [
            p["ipBlock"]["cidr"] for p in serving["spec"]["ingress"][0]["from"] if "ipBlock" in p
        ]
        assert blocks == ["10.42.0.0/16"]
