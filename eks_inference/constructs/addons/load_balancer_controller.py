"""The AWS Load Balancer Controller: turns the deployments' Ingresses into one ALB.

The controller runs with a Pod Identity role whose policy is the controller's own published
IAM policy for the pinned release (``data/aws_load_balancer_controller_iam_policy.json``, kept
verbatim with its source, version and commit), scoped by :func:`scoped_policy` as far as IAM
allows, and attached to that role only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, ClassVar

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam

from eks_inference import versions
from eks_inference.constructs._nag import acknowledge, wildcard_resource_findings
from eks_inference.constructs.addons.addon import AddonConstruct
from eks_inference.constructs.addons.helm import SYSTEM_NAMESPACE, PinnedHelmChart, on_pool
from eks_inference.constructs.addons.registry import PlatformAddons, Provides
from eks_inference.names import ALB_INGRESS_CLASS

SERVICE_ACCOUNT = "aws-load-balancer-controller"
POLICY_FILE = "aws_load_balancer_controller_iam_policy.json"
# The tag the controller puts on everything it creates, valued with the cluster's name
# (--cluster-name); the published policy only asks that it be present.
CLUSTER_TAG = "elbv2.k8s.aws/cluster"
# Actions of features the Helm values turn off (WAF Classic, WAFv2, Shield Advanced) or that
# no Ingress of this platform uses (Cognito authentication): the controller never calls them.
_UNUSED_ACTION_PREFIXES = ("waf-regional:", "wafv2:", "shield:")
_UNUSED_ACTIONS = frozenset(
    {"cognito-idp:DescribeUserPoolClient", "elasticloadbalancing:SetWebAcl"}
)
# Read-only calls, which IAM does not scope to resources.
_READ_VERBS = ("Describe", "Get", "List")


@dataclass(frozen=True)
class LoadBalancerControllerOptions:
    """How :class:`LoadBalancerController` is installed."""

    chart: versions.HelmChartVersion = versions.AWS_LOAD_BALANCER_CONTROLLER_CHART
    """Default ``versions.AWS_LOAD_BALANCER_CONTROLLER_CHART``: the release whose published
    IAM policy is kept in ``data/`` and scoped here; a new release needs its policy too."""
    ready_timeout: Duration = field(default_factory=lambda: Duration.minutes(10))
    """Default 10 minutes: Helm waits for the controller to be ready (its webhook validates
    Ingresses); the image is small, so a few minutes suffice once the system nodes run."""


@cache
def published_policy() -> dict[str, Any]:
    """The controller's published IAM policy with its provenance (``source``, ``version``)."""
    text = resources.files("eks_inference.constructs").joinpath("data", POLICY_FILE).read_text()
    document: dict[str, Any] = json.loads(text)
    return document


def _as_list(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _unused(action: str) -> bool:
    return action in _UNUSED_ACTIONS or action.startswith(_UNUSED_ACTION_PREFIXES)


def _read_only(actions: Sequence[str]) -> bool:
    return all(action.split(":", 1)[1].startswith(_READ_VERBS) for action in actions)


def scoped_policy(
    policy: Mapping[str, Any],
    *,
    partition: str,
    region: str,
    account: str,
    cluster_name: str,
    vpc_id: str,
) -> dict[str, Any]:
    """``policy`` (the published document) narrowed to one cluster, account, region and VPC.

    * actions the controller never calls here (WAF, WAFv2, Shield, Cognito) are removed;
    * ARNs name this partition, region and account instead of ``*``;
    * statements that change resources on ``"*"`` name what they change instead: this region's
      and account's load-balancing resources; its security groups (and, to create one, this
      VPC); the Elastic Load Balancing service-linked role. Read-only calls stay on ``"*"``,
      since IAM cannot scope them;
    * conditions that only require the controller's cluster tag to be present require it to
      name this cluster, so the role cannot change another cluster's load balancers.

    A statement that changes resources on ``"*"`` in a service not listed above raises
    ``ValueError``: a new controller release's policy must be reviewed before it is scoped.
    """
    statements = []
    for statement in policy["Statement"]:
        actions = [a for a in _as_list(statement["Action"]) if not _unused(a)]
        if not actions:
            continue
        resources = [
            _scoped_arn(r, partition, region, account) for r in _as_list(statement["Resource"])
        ]
        if resources == ["*"] and not _read_only(actions):
            resources = _changed_resources(actions, partition, region, account, vpc_id)
        scoped: dict[str, Any] = {
            "Effect": statement["Effect"],
            "Action": actions,
            "Resource": resources,
        }
        if "Condition" in statement:
            scoped["Condition"] = _scoped_condition(statement["Condition"], cluster_name)
        statements.append(scoped)
    return {"Version": policy["Version"], "Statement": statements}


def _scoped_arn(arn: str, partition: str, region: str, account: str) -> str:
    if arn == "*":
        return arn
    parts = arn.split(":", 5)
    parts[1] = partition
    if parts[3] == "*":
        parts[3] = region
    if parts[4] == "*":
        parts[4] = account
    return ":".join(parts)


def _changed_resources(
    actions: Sequence[str], partition: str, region: str, account: str, vpc_id: str
) -> list[str]:
    services = {action.split(":", 1)[0] for action in actions}
    if services == {"elasticloadbalancing"}:
        return [f"arn:{partition}:elasticloadbalancing:{region}:{account}:*"]
    if services == {"ec2"}:
        groups = [f"arn:{partition}:ec2:{region}:{account}:security-group/*"]
        if "ec2:CreateSecurityGroup" in actions:
            groups.append(f"arn:{partition}:ec2:{region}:{account}:vpc/{vpc_id}")
        return groups
    if actions == ["iam:CreateServiceLinkedRole"]:
        return [
            f"arn:{partition}:iam::{account}:role/aws-service-role/"
            "elasticloadbalancing.amazonaws.com/AWSServiceRoleForElasticLoadBalancing"
        ]
    raise ValueError(f"no resource scope is known for {sorted(actions)}; review the policy")


def _scoped_condition(condition: Mapping[str, Any], cluster_name: str) -> dict[str, Any]:
    tag_keys = {f"aws:RequestTag/{CLUSTER_TAG}", f"aws:ResourceTag/{CLUSTER_TAG}"}
    scoped: dict[str, dict[str, Any]] = {}
    for operator, entries in condition.items():
        for key, value in entries.items():
            if operator == "Null" and key in tag_keys and value == "false":
                scoped.setdefault("StringEquals", {})[key] = cluster_name
            else:
                scoped.setdefault(operator, {})[key] = value
    return scoped


class LoadBalancerController(AddonConstruct[LoadBalancerControllerOptions]):
    """The AWS Load Balancer Controller (``versions.AWS_LOAD_BALANCER_CONTROLLER_CHART``).

    Creates a Pod Identity role for the controller's service account in ``kube-system`` with
    :func:`scoped_policy` of the published policy as its only policy, then the Helm release,
    after the role's association (the controller's pods must get credentials when they start)
    and after the system node group (its webhook validates every Ingress, so Ingresses are
    applied only once it is ready: the release waits for the pods). The controller:

    * runs two replicas on the system pool;
    * is told the cluster name, region and VPC (nodes keep instance metadata out of pods'
      reach, so it must not look them up there);
    * owns the ``alb`` IngressClass (:data:`~eks_inference.names.ALB_INGRESS_CLASS`), which
      the deployments' Ingresses name;
    * has WAF, WAFv2 and Shield integration and the Service mutating webhook turned off:
      nothing here uses them, and a failing webhook would block every new Service.

    It registers :attr:`chart` with the platform as the controller of the ``alb`` class, so
    Ingresses depend on it: CloudFormation deletes them, and the controller deletes the load
    balancer, before the controller goes.
    Subnets must carry ``kubernetes.io/role/elb`` (public) and
    ``kubernetes.io/role/internal-elb`` (private) tags; an ``InferenceCluster`` adds them to the
    VPC it creates.
    """

    PROVIDES: ClassVar[Provides] = Provides(ingress_classes=(ALB_INGRESS_CLASS,))

    OPTIONS = LoadBalancerControllerOptions

    def _install(self, platform: PlatformAddons, options: LoadBalancerControllerOptions) -> None:
        cluster = platform.cluster
        stack = Stack.of(self)
        system = cluster.system_pool
        identity = cluster.add_pod_identity(
            "Controller",
            namespace=SYSTEM_NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            description=f"AWS Load Balancer Controller of EKS cluster {cluster.cluster_name}",
            scope=self,
        )
        self.role = identity.role
        document = scoped_policy(
            published_policy()["policy"],
            partition=stack.partition,
            region=stack.region,
            account=stack.account,
            cluster_name=cluster.cluster_name,
            vpc_id=cluster.vpc.vpc_id,
        )
        self.policy = iam.Policy(
            self,
            "Policy",
            document=iam.PolicyDocument.from_json(document),
            roles=[self.role],
        )
        wildcards = [
            resource
            for statement in document["Statement"]
            for resource in statement["Resource"]
            if "*" in resource
        ]
        acknowledge(
            self.policy,
            sorted(set(wildcard_resource_findings(self.policy, wildcards))),
            "The AWS Load Balancer Controller's published policy for its pinned release, "
            "scoped to this account, region, VPC and cluster tag: describe calls support no "
            "resource scoping, and the load balancers, target groups, listeners, rules and "
            "security groups it creates have names chosen at run time.",
        )
        self.chart = PinnedHelmChart(
            self,
            "Chart",
            cluster=cluster,
            pinned=options.chart,
            release="aws-load-balancer-controller",
            namespace=SYSTEM_NAMESPACE,
            wait=True,
            timeout=options.ready_timeout,
            values={
                "clusterName": cluster.cluster_name,
                "region": stack.region,
                "vpcId": cluster.vpc.vpc_id,
                "image": {
                    "repository": versions.AWS_LOAD_BALANCER_CONTROLLER_IMAGE,
                    "tag": versions.AWS_LOAD_BALANCER_CONTROLLER_IMAGE_TAG,
                },
                "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
                "ingressClass": ALB_INGRESS_CLASS,
                "createIngressClassResource": True,
                "enableShield": False,
                "enableWaf": False,
                "enableWafv2": False,
                "enableServiceMutatorWebhook": False,
                **on_pool(system),
            },
        )
        self.chart.node.add_dependency(
            identity.association, self.policy, cluster.nodegroup(system.name)
        )
        for ingress_class in self.PROVIDES.ingress_classes:
            platform.add_ingress_controller(ingress_class, self.chart)
