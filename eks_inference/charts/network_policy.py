"""NetworkPolicies: the inference namespace denies all traffic but the flows the platform needs.

The ``inference`` namespace denies every pod all ingress and egress
(:func:`namespace_default_deny`, part of the namespace's chart), and each deployment's
:class:`NetworkPolicyChart` allows exactly its own flows back. Without them, any pod of any
namespace could reach a Ray head's dashboard (port 8265), whose job API runs code in a pod
that holds the API key and a service-account token. Ray token authentication
(``authOptions``, :mod:`eks_inference.charts.rayservice`) guards that API too; the policies
keep it unreachable even so.

The VPC CNI's network policy agent enforces them (the cluster enables it on the managed
add-on). It always admits traffic from a pod's own node, which is where the kubelet's HTTP
probes come from (Kubernetes' NetworkPolicy semantics say the same); KubeRay's other probes
run inside the container, on localhost, which no policy sees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from constructs import Construct

from eks_inference import names, versions
from eks_inference.charts.common import (
    OPENAI_PORT,
    PART_OF,
    DeploymentChart,
    RenderContext,
    api_object,
    metadata,
    object_labels,
)
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.pod import Json
from eks_inference.charts.rayservice import (
    DASHBOARD_PORT_NAME,
    HEAD_COMPONENT,
    RAY_METRICS_PORT_NAME,
    SERVE_PORT_NAME,
    WORKER_COMPONENT,
)
from eks_inference.charts.vllm import COMPONENT as VLLM_COMPONENT
from eks_inference.charts.vllm import HTTP_PORT_NAME
from eks_inference.names import COMPONENT_LABEL, INFERENCE_NAMESPACE, INSTANCE_LABEL
from eks_inference.spec.deployment import ModelDeploymentSpec

ROLE = "network-policy"
NETWORK_POLICY_API_VERSION = "networking.k8s.io/v1"
DEFAULT_DENY_POLICY = "default-deny"
# The label Kubernetes gives every namespace, valued with its name (immutable).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# CoreDNS of EKS' managed add-on: its pods behind the kube-dns Service, on port 53 over UDP and
# (for answers too large for a datagram) TCP.
DNS_NAMESPACE = "kube-system"
DNS_POD_LABELS = {"k8s-app": "kube-dns"}
DNS_PORT = 53
# HTTPS to AWS APIs (S3 for the Run:ai streamer and the compile job, STS) and to the cluster's
# API server (the Ray autoscaler). AWS endpoints have no fixed addresses a policy could name,
# so this is any address on that port.
HTTPS_PORT = 443
ANY_ADDRESS = "0.0.0.0/0"
# The EKS Pod Identity agent on every node, where pods with an IAM role fetch credentials.
POD_IDENTITY_AGENT_CIDR = "169.254.170.23/32"
POD_IDENTITY_AGENT_PORT = 80
# Pod labels the KubeRay operator's chart sets: `app.kubernetes.io/name` is the chart's name.
_KUBERAY_OPERATOR_LABELS = {"app.kubernetes.io/name": versions.KUBERAY_OPERATOR_CHART.chart}
# Pod labels the Prometheus Operator sets on the pods of the Prometheus kube-prometheus-stack
# creates (its name, `app.kubernetes.io/instance`, is the resource's).
_PROMETHEUS_LABELS = {
    "app.kubernetes.io/name": "prometheus",
    "app.kubernetes.io/instance": names.PROMETHEUS_NAME,
}
_RAY_COMPONENTS = (HEAD_COMPONENT, WORKER_COMPONENT)


def namespace_default_deny() -> Json:
    """The inference namespace's policy selecting every pod for ingress and egress, allowing none.

    Every flow a pod of the namespace has is then one some deployment's
    :class:`NetworkPolicyChart` allows; a pod nobody wrote a policy for has none.
    """
    labels = {"app.kubernetes.io/part-of": PART_OF, "app.kubernetes.io/managed-by": PART_OF}
    return _policy(DEFAULT_DENY_POLICY, labels, {}, ingress=[], egress=[])


class NetworkPolicyChart(DeploymentChart):
    """The NetworkPolicies allowing one deployment's flows: ``<deployment>-network-policy``.

    Every policy is named ``<deployment>-<flow>`` and selects only the deployment's pods (by
    its instance label), so a deployment's policies never open another's pods:

    - ``-serving``: the model server's pods (vLLM, or the Ray head and workers, whose Serve
      proxies all listen) accept the serving port 8000 over TCP from any address of the VPC
      (``context.vpc_cidr``: the load balancer registers pods by IP and connects from its own
      addresses there; the VPC, not its subnets, because the charts cannot know the subnets
      the load balancer controller picks) and from any pod of the cluster (in-cluster
      clients of the deployment's Service). Nothing outside the VPC reaches it.
    - ``-metrics``: Prometheus (kube-prometheus-stack's pods in ``monitoring``) reaches the
      ports the PodMonitors scrape, by name: vLLM's ``http``, every Ray node's ``metrics``.
    - ``-ray-operator`` (Ray Serve): the KubeRay operator reaches the head's dashboard (serve
      config submission, application status) and Serve proxy (its health check). KubeRay
      1.7 calls no other port; the dashboard agent (52365) is only probed, by the kubelet.
    - ``-ray-cluster`` (Ray Serve): the deployment's Ray pods reach each other on every port
      and protocol. GCS (6379), the dashboard and its agents, the raylets, object managers
      and the worker processes' port range all carry Ray's own traffic, several on ports Ray
      picks at start-up; listing them would break on the next Ray release for no gain,
      since only the deployment's own pods are admitted (and Ray's token authentication
      guards them). During a ``NewCluster`` upgrade both clusters' pods are the
      deployment's, so they are admitted too; each cluster's token still differs.
    - ``-egress``: every pod of the deployment (the compile job's included) reaches DNS
      (kube-dns over UDP and TCP 53), HTTPS (443) to any address (AWS endpoints and the
      API server), and the node's Pod Identity agent (``169.254.170.23:80``); the agent gives
      credentials only to service accounts with an IAM role, so opening it to pods without
      one grants them nothing.

    :attr:`needs` names the inference namespace. The policies are applied before the
    deployment's other charts, so its pods never start without their flows.
    """

    def __init__(self, scope: Construct, spec: ModelDeploymentSpec, context: RenderContext) -> None:
        labels = object_labels(spec, ROLE)
        instance = {INSTANCE_LABEL: spec.name}
        ray = spec.engine == "rayservice"
        servers = _components(spec, _RAY_COMPONENTS if ray else (VLLM_COMPONENT,))
        scrape_port = RAY_METRICS_PORT_NAME if ray else HTTP_PORT_NAME
        policies = [
            _policy(
                f"{spec.name}-serving",
                labels,
                servers,
                ingress=[
                    _rule(
                        "from",
                        [{"ipBlock": {"cidr": context.vpc_cidr}}, {"namespaceSelector": {}}],
                        _ports(OPENAI_PORT),
                    )
                ],
            ),
            _policy(
                f"{spec.name}-metrics",
                labels,
                servers,
                ingress=[
                    _rule(
                        "from",
                        [_peer(names.MONITORING_NAMESPACE, _PROMETHEUS_LABELS)],
                        _ports(scrape_port),
                    )
                ],
            ),
        ]
        if ray:
            ray_pods = {"podSelector": servers}
            policies += [
                _policy(
                    f"{spec.name}-ray-operator",
                    labels,
                    {"matchLabels": {**instance, COMPONENT_LABEL: HEAD_COMPONENT}},
                    ingress=[
                        _rule(
                            "from",
                            [_peer(names.KUBERAY_NAMESPACE, _KUBERAY_OPERATOR_LABELS)],
                            _ports(DASHBOARD_PORT_NAME, SERVE_PORT_NAME),
                        )
                    ],
                ),
                _policy(
                    f"{spec.name}-ray-cluster",
                    labels,
                    servers,
                    ingress=[{"from": [ray_pods]}],
                    egress=[{"to": [ray_pods]}],
                ),
            ]
        policies.append(
            _policy(
                f"{spec.name}-egress",
                labels,
                {"matchLabels": instance},
                egress=[
                    _rule(
                        "to",
                        [_peer(DNS_NAMESPACE, DNS_POD_LABELS)],
                        [*_ports(DNS_PORT, protocol="UDP"), *_ports(DNS_PORT)],
                    ),
                    _rule("to", [{"ipBlock": {"cidr": ANY_ADDRESS}}], _ports(HTTPS_PORT)),
                    _rule(
                        "to",
                        [{"ipBlock": {"cidr": POD_IDENTITY_AGENT_CIDR}}],
                        _ports(POD_IDENTITY_AGENT_PORT),
                    ),
                ],
            )
        )
        super().__init__(
            scope, spec, ROLE, policies, PlatformNeeds(namespaces=(INFERENCE_NAMESPACE,))
        )
        # The deployment's Ingress accepts clients from the same VPC range by default.
        self.context = context


def _components(spec: ModelDeploymentSpec, components: Sequence[str]) -> Json:
    """Selector of ``spec``'s pods of any of ``components``."""
    return {
        "matchLabels": {INSTANCE_LABEL: spec.name},
        "matchExpressions": [
            {"key": COMPONENT_LABEL, "operator": "In", "values": list(components)}
        ],
    }


def _peer(namespace: str, pod_labels: Mapping[str, str]) -> Json:
    """The pods labelled ``pod_labels`` in ``namespace``."""
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
        "podSelector": {"matchLabels": dict(pod_labels)},
    }


def _ports(*ports: int | str, protocol: str = "TCP") -> list[Json]:
    """``ports`` (numbers, or container port names resolved on the receiving pod) over one
    protocol."""
    return [{"port": port, "protocol": protocol} for port in ports]


def _rule(direction: str, peers: list[Json], ports: list[Json]) -> Json:
    """A rule admitting ``peers`` (``direction`` ``from`` for ingress, ``to`` for egress)."""
    return {direction: peers, "ports": ports}


def _policy(
    name: str,
    labels: Mapping[str, str],
    pods: Json,
    *,
    ingress: list[Json] | None = None,
    egress: list[Json] | None = None,
) -> Json:
    """A NetworkPolicy selecting ``pods``, for the directions it is given rules for.

    ``policyTypes`` is written out: a policy with no egress rules would otherwise not be
    taken for an egress policy, and an empty list of rules allows nothing.
    """
    body: Json = {"podSelector": pods, "policyTypes": []}
    if ingress is not None:
        body["policyTypes"].append("Ingress")
        body["ingress"] = ingress
    if egress is not None:
        body["policyTypes"].append("Egress")
        body["egress"] = egress
    return api_object(
        NETWORK_POLICY_API_VERSION, "NetworkPolicy", metadata(name, labels), {"spec": body}
    )
