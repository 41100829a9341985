"""Endpoints: how clients outside the cluster reach a deployment's OpenAI-compatible API.

Two typed pieces, validated where they are written:

* :class:`Endpoint`, on the platform (``PlatformSpec.endpoint``): the one Application Load
  Balancer every exposed deployment shares, with its scheme, TLS certificate, allowed source
  networks, routing style and authentication.
* :class:`DeploymentEndpoint`, on each deployment (``ModelDeploymentSpec.endpoint``): whether it
  is exposed and, optionally, its own path or host.

:mod:`eks_inference.specification.routes` resolves the two into one
:class:`~eks_inference.specification.routes.Route` per
exposed deployment and holds the rules that span deployments (collisions, the idle timeout).

Why an ALB IngressGroup rather than a Gateway API Gateway: the AWS Load Balancer Controller
turns Ingresses that share ``alb.ingress.kubernetes.io/group.name`` into one load balancer,
one listener rule and one target group per Ingress, with nothing to install beyond the
controller. A Gateway needs the Gateway API CRDs installed and a GatewayClass, a Gateway and
an HTTPRoute per deployment, for no feature this platform uses. One Ingress per deployment
keeps each deployment's rule, health check and target group in that deployment's manifests.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    model_validator,
)

from eks_inference.specification.aws_types import CertificateArn
from eks_inference.specification.validation import Problems, Rule, rule_error, validate_with_rules

Scheme = Literal["internal", "internet-facing"]
Routing = Literal["path", "host"]
Authentication = Literal["api_key", "none"]

# A path prefix of lowercase DNS-label segments (`/llama`, `/team-a/llama`): nothing an ALB
# path condition or the rewrite's regular expression would read as a pattern.
_PATH_PATTERN = r"^(/[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$"
_MAX_PATH_LENGTH = 128
# A fully qualified host name in lowercase: ALB host conditions compare case-insensitively,
# so a mixed-case name could only be a second spelling of the same host.
_HOST_PATTERN = r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_MAX_HOST_LENGTH = 253


def _network(value: str) -> str:
    try:
        network = ipaddress.IPv4Network(value, strict=True)
    except ValueError as error:
        raise rule_error(
            f"{value!r} is not an IPv4 network in CIDR notation ({error}); write it as "
            "address/prefix-length with the host bits zero, e.g. 10.0.0.0/8 (the load "
            "balancer has IPv4 addresses only)"
        ) from None
    return str(network)


RoutePath = Annotated[
    str, Field(pattern=_PATH_PATTERN, max_length=_MAX_PATH_LENGTH, examples=["/llama3-8b"])
]
"""A path prefix: ``/`` and lowercase letters, digits and ``-`` in each segment."""
HostName = Annotated[
    str,
    Field(pattern=_HOST_PATTERN, max_length=_MAX_HOST_LENGTH, examples=["models.example.com"]),
]
"""A fully qualified DNS name in lowercase, such as ``models.example.com``."""
Cidr = Annotated[str, AfterValidator(_network)]
"""An IPv4 network in CIDR notation."""


class DeploymentEndpoint(BaseModel):
    """How one deployment is reached on the platform's load balancer.

    Exposed by default, at ``/<name>`` with path routing or ``<name>.<endpoint.host>`` with
    host routing. ``path`` or ``host`` replace those; ``expose: false`` keeps the deployment
    on its in-cluster Service only. Nothing is exposed unless the platform has an
    :class:`Endpoint`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    expose: bool = True
    path: RoutePath | None = Field(
        default=None, description="Path prefix with routing: path; default /<name>."
    )
    host: HostName | None = Field(
        default=None,
        description="Host name of this deployment; default <name>.<endpoint.host> with routing: "
        "host, and the endpoint's host (if any) with routing: path.",
    )


# The most target groups one forward action of an ALB may weigh (an ELB quota).
MAX_SPLIT_TARGETS = 5
# A weight is a share in percent; the weights of a split sum to this.
SPLIT_TOTAL_WEIGHT = 100
_DEPLOYMENT_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


class TrafficTarget(BaseModel):
    """One deployment behind a split, and the percentage of its requests it gets."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment: str = Field(pattern=_DEPLOYMENT_NAME, max_length=40)
    weight: int = Field(ge=0, le=SPLIT_TOTAL_WEIGHT, description="Percent of the requests.")


class TrafficSplit(BaseModel):
    """One more route on the load balancer that shares its requests among deployments.

    A canary: ``{name: chat, traffic: [{deployment: chat-v1, weight: 90}, {deployment:
    chat-v2, weight: 10}]}`` answers ``/chat/v1`` (path routing; ``chat.<host>`` with host
    routing), sending nine requests in ten to ``chat-v1``. Each target stays reachable at its
    own route, keeps its own target group and health checks, and must be exposed (so its
    servers require the API key and admit the load balancer). The load balancer's weighted
    forward action picks a target per request; weights sum to 100.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        pattern=_DEPLOYMENT_NAME,
        max_length=40,
        description="Names the split's Ingress; default route /<name> (or <name>.<host>).",
    )
    path: RoutePath | None = Field(default=None, description="Path prefix; default /<name>.")
    host: HostName | None = Field(default=None, description="Host name; default <name>.<host>.")
    traffic: tuple[TrafficTarget, ...] = Field(min_length=2, max_length=MAX_SPLIT_TARGETS)

    @model_validator(mode="wrap")
    @classmethod
    def _check_rules(
        cls, data: Any, handler: ModelWrapValidatorHandler[TrafficSplit]
    ) -> TrafficSplit:
        return validate_with_rules(cls, data, handler, _SPLIT_RULES)


def _check_weights(split: TrafficSplit, problems: Problems) -> None:
    weights = [t.weight for t in split.traffic]
    total = sum(weights)
    if total != SPLIT_TOTAL_WEIGHT:
        last = weights[-1] + SPLIT_TOTAL_WEIGHT - total
        fix = (
            f"e.g. set the last weight to {last}"
            if 0 <= last <= SPLIT_TOTAL_WEIGHT
            else "lower some of them"
        )
        problems.add(
            ("traffic",),
            f"the weights {' + '.join(map(str, weights))} sum to {total}; a split's weights are "
            f"percentages and must sum to {SPLIT_TOTAL_WEIGHT}: {fix}",
            weights,
        )
    seen: set[str] = set()
    for j, target in enumerate(split.traffic):
        if target.deployment in seen:
            problems.add(
                ("traffic", j, "deployment"),
                f"deployment {target.deployment!r} is listed twice; list each target once with "
                "its whole weight",
                target.deployment,
            )
        seen.add(target.deployment)


_SPLIT_RULES = (Rule(frozenset({"traffic"}), _check_weights),)


class Endpoint(BaseModel):
    """The platform's load balancer: one Application Load Balancer for every exposed deployment.

    Defaults, and why:

    * ``scheme: internal``: nothing is reachable from the internet unless asked for. An internal
      ALB gets addresses in the private subnets and answers only inside the VPC (and networks
      routed to it).
    * ``authentication: api_key``: model servers require ``Authorization: Bearer <key>`` on
      every route but their health check; the key is generated in AWS Secrets Manager by the
      stack. The load balancer forwards only the OpenAI API (``/v1``) to them at all.
    * ``routing: path``: deployments share one host name and are told apart by a path prefix,
      which the load balancer strips before the request reaches the server; this works
      without DNS (the ALB's own name). ``routing: host`` gives each deployment its own name
      under ``host`` (a wildcard DNS record and certificate).
    * ``certificate_arn``: with it the ALB listens on HTTPS 443 only (TLS 1.2 and 1.3);
      without it on HTTP 80, which only an internal load balancer may do, and the API key
      then crosses the VPC in clear text (``eks-inference plan`` warns).
    * ``source_cidrs``: the networks allowed to connect; empty means the cluster VPC's own
      network (the VPC the stack creates, :data:`~eks_inference.names.VPC_CIDR`, or the one
      you bring), which only an internal load balancer may use. Clients in peered or
      on-premises networks must be listed.

    An internet-facing endpoint must have a certificate, API keys and explicit source
    networks: each missing one fails validation under its own field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    scheme: Scheme = "internal"
    routing: Routing = "path"
    host: HostName | None = Field(
        default=None,
        description="Host name clients use (routing: path), or the domain deployments are "
        "named under (routing: host). DNS records are yours to create.",
    )
    certificate_arn: CertificateArn | None = Field(
        default=None, description="ACM certificate for HTTPS; required when internet-facing."
    )
    source_cidrs: tuple[Cidr, ...] = Field(
        default=(),
        max_length=50,
        description="Client networks allowed to connect; required when internet-facing "
        "(0.0.0.0/0 accepts any); default for an internal endpoint: the VPC's network.",
    )
    authentication: Authentication = Field(
        default="api_key",
        description="api_key: servers require Authorization: Bearer <key> on every route but "
        "their health check; none: internal only.",
    )
    splits: tuple[TrafficSplit, ...] = Field(
        default=(),
        max_length=20,
        description="Routes that share their requests among exposed deployments by weight "
        "(canaries, A/B tests).",
    )

    @property
    def internet_facing(self) -> bool:
        return self.scheme == "internet-facing"

    @model_validator(mode="wrap")
    @classmethod
    def _check_rules(cls, data: Any, handler: ModelWrapValidatorHandler[Endpoint]) -> Endpoint:
        return validate_with_rules(cls, data, handler, _ENDPOINT_RULES)


def _check_internet_facing(endpoint: Endpoint, problems: Problems) -> None:
    """An internet-facing load balancer needs TLS, authentication and known client networks."""
    if not endpoint.internet_facing:
        return
    if endpoint.certificate_arn is None:
        problems.add(
            ("certificate_arn",),
            "an internet-facing endpoint must use HTTPS: set certificate_arn to an ACM "
            "certificate for its host name, or use scheme: internal",
        )
    if endpoint.authentication == "none":
        problems.add(
            ("authentication",),
            "an internet-facing endpoint must authenticate its clients: set authentication: "
            "api_key, or use scheme: internal",
            endpoint.authentication,
        )
    if not endpoint.source_cidrs:
        problems.add(
            ("source_cidrs",),
            "an internet-facing endpoint must list the client networks allowed to connect "
            "(0.0.0.0/0 to accept any), or use scheme: internal",
        )


def _check_split_routes(endpoint: Endpoint, problems: Problems) -> None:
    names: set[str] = set()
    for i, split in enumerate(endpoint.splits):
        if split.name in names:
            problems.add(
                ("splits", i, "name"), f"split name {split.name!r} is used twice; names are unique"
            )
        names.add(split.name)
        if endpoint.routing == "host" and split.path is not None:
            problems.add(
                ("splits", i, "path"),
                "the endpoint routes by host, so a split is reached at the root of its own host "
                "name: remove path, or use routing: path",
                split.path,
            )


def _check_host_routing(endpoint: Endpoint, problems: Problems) -> None:
    if endpoint.routing == "host" and endpoint.host is None:
        problems.add(
            ("host",),
            "routing: host names each deployment <name>.<host>: set host to the domain "
            "(e.g. models.example.com), or use routing: path",
        )


_ENDPOINT_RULES = (
    Rule(
        frozenset({"scheme", "certificate_arn", "authentication", "source_cidrs"}),
        _check_internet_facing,
    ),
    Rule(frozenset({"routing", "host"}), _check_host_routing),
    Rule(frozenset({"routing", "splits"}), _check_split_routes),
)
