"""NetworkPolicies: the inference namespace denies all traffic but the flows the platform needs.

The ``inference`` namespace denies every pod all ingress and egress
(:func:`namespace_default_deny`, part of the namespace's chart), and each deployment's
:func:`network_policy_chart` allows exactly its own flows back. Without them, any pod of any
namespace could reach a Ray head's dashboard (port 8265), whose job API runs code in a pod
that holds the API key and a service-account token. Ray token authentication
(``authOptions``, :mod:`eks_inference.engines.rayservice.engine`) guards that API too; the policies
keep it unreachable even so.

The VPC CNI's network policy agent enforces them (the cluster enables it on the managed
add-on). It always admits traffic from a pod's own node, which is where the kubelet's HTTP
probes come from (Kubernetes' NetworkPolicy semantics say the same); KubeRay's other probes
run inside the container, on localhost, which no policy sees.
"""

from __future__ import annotations

from eks_inference import names
from eks_inference.charts.context import RenderContext
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import PART_OF, object_labels
from eks_inference.charts.model_server import OPENAI_PORT
from eks_inference.charts.network_rules import components, peer, policy, ports, rule
from eks_inference.charts.pod import Json
from eks_inference.charts.record import ChartRecord, deployment_chart
from eks_inference.charts.routing import PROXY
from eks_inference.charts.routing import network_policies as routing_policies
from eks_inference.charts.serving import serving_engine
from eks_inference.names import COMPONENT_LABEL, INFERENCE_NAMESPACE, INSTANCE_LABEL
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.routing_rules import picks_endpoints

ROLE = "network-policy"
DEFAULT_DENY_POLICY = "default-deny"
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
# Pod labels the Prometheus Operator sets on the pods of the Prometheus kube-prometheus-stack
# creates (its name, `app.kubernetes.io/instance`, is the resource's).
PROMETHEUS_LABELS = {
    "app.kubernetes.io/name": "prometheus",
    "app.kubernetes.io/instance": names.PROMETHEUS_NAME,
}


def namespace_default_deny() -> Json:
    """The inference namespace's policy selecting every pod for ingress and egress, allowing none.

    Every flow a pod of the namespace has is then one some deployment's
    :func:`network_policy_chart` allows; a pod nobody wrote a policy for has none.
    """
    labels = {"app.kubernetes.io/part-of": PART_OF, "app.kubernetes.io/managed-by": PART_OF}
    return policy(DEFAULT_DENY_POLICY, labels, {}, ingress=[], egress=[])


def network_policy_chart(spec: ModelDeploymentSpec, context: RenderContext) -> ChartRecord:
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
    - the engine's own flows (:meth:`~eks_inference.charts.serving.ServingEngine.
      network_policies`): for Ray Serve, the KubeRay operator to the head and the Ray pods
      among themselves.
    - with an endpoint picker (``routing``), its proxy's and picker's flows
      (:func:`~eks_inference.charts.routing.network_policies`); the proxy is then left out of
      ``-egress`` below, so it reaches only DNS, the picker and the servers.
    - ``-egress``: every pod of the deployment (the compile job's included) reaches DNS
      (kube-dns over UDP and TCP 53), HTTPS (443) to any address (AWS endpoints and the
      API server), and the node's Pod Identity agent (``169.254.170.23:80``); the agent gives
      credentials only to service accounts with an IAM role, so opening it to pods without
      one grants them nothing.

    Its needs name the inference namespace. The policies are applied before the
    deployment's other charts, so its pods never start without their flows.
    """
    labels = object_labels(spec, ROLE)
    instance = {INSTANCE_LABEL: spec.name}
    engine = serving_engine(spec)
    servers = components(spec, engine.server_components(spec))
    scrape_ports = tuple(dict.fromkeys(target.port for target in engine.metrics_targets(spec)))
    policies = [
        policy(
            f"{spec.name}-serving",
            labels,
            servers,
            ingress=[
                rule(
                    "from",
                    [{"ipBlock": {"cidr": context.vpc_cidr}}, {"namespaceSelector": {}}],
                    ports(OPENAI_PORT),
                )
            ],
        ),
        policy(
            f"{spec.name}-metrics",
            labels,
            servers,
            ingress=[
                rule(
                    "from",
                    [peer(names.MONITORING_NAMESPACE, PROMETHEUS_LABELS)],
                    ports(*scrape_ports),
                )
            ],
        ),
        *engine.network_policies(spec, labels, servers),
    ]
    dns = rule(
        "to",
        [peer(DNS_NAMESPACE, DNS_POD_LABELS)],
        [*ports(DNS_PORT, protocol="UDP"), *ports(DNS_PORT)],
    )
    egress_pods: Json = {"matchLabels": instance}
    if picks_endpoints(spec):
        policies += routing_policies(
            spec,
            labels,
            vpc_cidr=context.vpc_cidr,
            dns=dns,
            prometheus=peer(names.MONITORING_NAMESPACE, PROMETHEUS_LABELS),
        )
        egress_pods["matchExpressions"] = [
            {"key": COMPONENT_LABEL, "operator": "NotIn", "values": [PROXY]}
        ]
    policies.append(
        policy(
            f"{spec.name}-egress",
            labels,
            egress_pods,
            egress=[
                dns,
                rule("to", [{"ipBlock": {"cidr": ANY_ADDRESS}}], ports(HTTPS_PORT)),
                rule(
                    "to",
                    [{"ipBlock": {"cidr": POD_IDENTITY_AGENT_CIDR}}],
                    ports(POD_IDENTITY_AGENT_PORT),
                ),
            ],
        )
    )
    return deployment_chart(spec, ROLE, policies, PlatformNeeds(namespaces=(INFERENCE_NAMESPACE,)))
