"""Routes: where each exposed deployment is reached, resolved from the platform's endpoint.

A :class:`Route` is to the endpoint chart and the CDK constructs what a
:class:`~eks_inference.specification.platform.Placement` is to the pod charts: the platform's
decision,
resolved once, typed and validated, so the Ingress, the server's API-key check and the stack's
outputs all read the same values. :func:`check_routes` holds the rules that span
deployments; :class:`~eks_inference.specification.platform.PlatformSpec` runs it.

The idle timeout. An Application Load Balancer closes a connection on which nothing has been
sent for its idle timeout, 60 s by default: a non-streaming completion, whose response is
sent only once the last token is generated, is cut off when generating takes longer, the most
common failure reported with LLM servers behind load balancers. The timeout here is long
enough for ``max_model_len`` tokens of one sequence at the decode throughput bound of
``eks-inference plan`` (:func:`eks_inference.catalog.sizing.decode_tokens_per_second_bound`, a full
batch at full context, divided among the batch's sequences), doubled because the bound is a
ceiling that real engines do not reach, and never below 300 s. A deployment that scales to
zero adds a cold start before that (:func:`cold_start_seconds`): the first request after idle
gets nothing back until a replica has come up. It is a load-balancer attribute, so every
Ingress of the group renders the longest of its deployments' timeouts.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from eks_inference.catalog import sizing
from eks_inference.names import VPC_CIDR
from eks_inference.specification import startup_budget as load_budget
from eks_inference.specification.capabilities import (
    ServesAdapters,
    ServesExtraApiPaths,
    ServesModelRepository,
)
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.endpoints import Endpoint, Scheme, TrafficSplit
from eks_inference.specification.engines import OPENAI_API_PATH, engine_of
from eks_inference.specification.service_names import check_names
from eks_inference.specification.validation import Problems

# The idle timeout's bounds: at least 300 s for any deployment; at most the largest value an
# ALB accepts for `idle_timeout.timeout_seconds`.
MIN_IDLE_TIMEOUT_S = 300
MAX_IDLE_TIMEOUT_S = 4000
# The decode bound is a ceiling (weights and KV cache streamed at full memory bandwidth): a
# sequence is given twice the time the bound implies.
IDLE_TIMEOUT_MARGIN = 2
# An ALB has at most 100 listener rules (beside the default rule) and 100 target groups by
# default ("Quotas for your Application Load Balancers" in the ELB User Guide; quotas that
# can be raised). The AWS Load Balancer Controller makes a listener rule of every path of
# every Ingress of the group and a target group of every Service and port an Ingress
# forwards to (pkg/ingress/model_build_listener_rules.go and model_build_target_group.go at
# v3.5.0): what each route takes is its :attr:`Route.listener_rules` and
# :attr:`Route.target_groups` (a split's likewise). Every other path falls through to the
# listener's default fixed 404 and takes no rule.
MAX_LISTENER_RULES = 100
MAX_TARGET_GROUPS = 100
# IngressGroup names: lowercase alphanumerics, '-' or '.', at most 63 characters.
_MAX_GROUP_LENGTH = 63


@dataclass(frozen=True)
class Route:
    """One exposed deployment's place on the platform's load balancer.

    ``load_balancer`` is the IngressGroup every exposed deployment's Ingress joins; ``host``
    (or ``None``: any host) and ``path`` (or ``None``: the root, with host routing) select
    the deployment's requests; only its ``api_paths`` below them reach the server (the
    OpenAI API ``/v1``, and what else its engine serves clients, :func:`api_paths`), each by a
    listener rule of its own. The clients' networks are ``source_cidrs``, the endpoint's; when it
    lists none (an internal endpoint) the Ingress accepts the cluster's VPC only, whose range
    the charts' render context carries
    (:attr:`~eks_inference.charts.context.RenderContext.vpc_cidr`), so that an internal load
    balancer is never open to every address that can route to it. ``idle_timeout_seconds``
    is the load balancer's, the same on every route. ``api_key`` says whether the model
    servers require the platform's key.
    """

    deployment: str
    load_balancer: str
    scheme: Scheme
    host: str | None
    path: str | None
    certificate_arn: str | None
    source_cidrs: tuple[str, ...]
    idle_timeout_seconds: int
    api_key: bool
    api_paths: tuple[str, ...]
    #: Server paths below ``api_paths`` the load balancer answers with a fixed 404 itself
    #: (:func:`blocked_paths`), each a listener rule of its own.
    blocked_paths: tuple[str, ...] = ()

    @property
    def protocol(self) -> str:
        """``https`` when the load balancer has a certificate, else ``http``."""
        return "https" if self.certificate_arn else "http"

    @property
    def listener_rules(self) -> int:
        """The load balancer's listener rules the route takes: one per API path, and one per
        blocked path."""
        return len(self.api_paths) + len(self.blocked_paths)

    @property
    def target_groups(self) -> int:
        """The target groups it takes: one, every path going to the deployment's Service."""
        return 1

    def base_url(self, load_balancer_host: str | None = None) -> str:
        """The OpenAI base URL (``.../v1``), at ``host`` or, without one, the load balancer's
        DNS name ``load_balancer_host``."""
        host = self.host or load_balancer_host
        if host is None:
            raise ValueError(
                f"deployment {self.deployment!r} has no host name: pass the load balancer's"
            )
        return f"{self.protocol}://{host}{self.path or ''}/v1"


@dataclass(frozen=True)
class SplitRoute:
    """A traffic split's place on the load balancer: its ``host`` and ``path`` (as a
    :class:`Route`'s), and the ``targets``, each a deployment's route with its weight.

    A split forwards the OpenAI API only (``api_paths``), whatever else its targets serve
    on their own routes.
    """

    name: str
    host: str | None
    path: str | None
    targets: tuple[tuple[Route, int], ...]

    @property
    def api_paths(self) -> tuple[str, ...]:
        """The path prefixes the split forwards: the OpenAI API."""
        return (OPENAI_API_PATH,)

    @property
    def listener_rules(self) -> int:
        """The listener rules the split takes: one per API path, to its forward action."""
        return len(self.api_paths)

    @property
    def target_groups(self) -> int:
        """The target groups it takes: one per target, since the controller makes a target
        group of each Service an Ingress forwards to, beside the targets' own routes'."""
        return len(self.targets)

    @property
    def load_balancer(self) -> Route:
        """A route of the load balancer the split is on (its settings are every route's)."""
        return self.targets[0][0]

    def base_url(self, load_balancer_host: str | None = None) -> str:
        """The OpenAI base URL of the split, as :meth:`Route.base_url`."""
        host = self.host or load_balancer_host
        if host is None:
            raise ValueError(f"split {self.name!r} has no host name: pass the load balancer's")
        return f"{self.load_balancer.protocol}://{host}{self.path or ''}/v1"


@dataclass(frozen=True)
class BaseUrlOutput:
    """A stack output telling clients a base URL: ``output_id`` names it (unique in the
    stack), ``route`` is the deployment's or split's route whose URL it holds."""

    output_id: str
    description: str
    route: Route | SplitRoute


def base_url_outputs(
    routes: Mapping[str, Route], splits: Sequence[SplitRoute]
) -> tuple[BaseUrlOutput, ...]:
    """The base-URL outputs of the stack: ``BaseUrl-<deployment>`` for every exposed
    deployment and ``BaseUrl-split-<split>`` for every split. The stack creates these and no
    others, and the CloudFormation quota check counts these
    (:func:`~eks_inference.specification.cloudformation_limits.parent_stack_use`)."""
    return (
        *(
            BaseUrlOutput(
                f"BaseUrl-{name}", f"OpenAI-compatible base URL of deployment {name}", route
            )
            for name, route in routes.items()
        ),
        *(
            BaseUrlOutput(
                f"BaseUrl-split-{split.name}",
                f"OpenAI-compatible base URL of traffic split {split.name}",
                split,
            )
            for split in splits
        ),
    )


def load_balancer_group(cluster_name: str) -> str:
    """The IngressGroup name of the platform's load balancer: the cluster name in lowercase.

    A cluster name longer than an IngressGroup name may be is shortened and given a hash of
    the whole name, so two clusters never share a group.
    """
    name = cluster_name.lower()
    if len(name) <= _MAX_GROUP_LENGTH:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: _MAX_GROUP_LENGTH - 9].rstrip('-')}-{digest}"


def api_key_secret_name(cluster_name: str) -> str:
    """The AWS Secrets Manager name of the platform's API key: ``<cluster>/api-key``."""
    return f"{cluster_name}/api-key"


def decode_seconds(spec: ModelDeploymentSpec) -> float:
    """Seconds to generate ``max_model_len`` tokens of one sequence at the decode bound."""
    limits = spec.limits
    node_bound = sizing.decode_tokens_per_second_bound(
        spec.model.architecture,
        spec.instance,
        spec.tensor_parallel_size,
        limits.max_model_len,
        limits.max_num_seqs,
    )
    per_sequence = node_bound / (spec.replicas_per_node * limits.max_num_seqs)
    return limits.max_model_len / per_sequence


def cold_start_seconds(spec: ModelDeploymentSpec) -> int:
    """How long a request may wait for a replica before it is served: the rollout budget
    (node launch, image pull, model load) when ``spec`` scales to zero, else nothing."""
    return load_budget.rollout_seconds(spec) if spec.scaling.min_replicas == 0 else 0


def idle_timeout_seconds(spec: ModelDeploymentSpec) -> int:
    """The idle timeout ``spec`` needs: twice :func:`decode_seconds`, at least 300 s, after
    a cold start (:func:`cold_start_seconds`) when it scales to zero: the first request after
    idle sends nothing back until a replica has loaded the model.

    May exceed :data:`MAX_IDLE_TIMEOUT_S`; :func:`check_routes` rejects such a deployment.
    """
    generation = max(MIN_IDLE_TIMEOUT_S, math.ceil(IDLE_TIMEOUT_MARGIN * decode_seconds(spec)))
    return cold_start_seconds(spec) + generation


def exposed(endpoint: Endpoint | None, spec: ModelDeploymentSpec) -> bool:
    """Whether ``spec`` is reached through ``endpoint``'s load balancer."""
    return endpoint is not None and spec.endpoint.expose


def _host(endpoint: Endpoint, spec: ModelDeploymentSpec) -> str | None:
    if spec.endpoint.host is not None:
        return spec.endpoint.host
    if endpoint.routing == "host":
        return f"{spec.name}.{endpoint.host}"
    return endpoint.host


def _path(endpoint: Endpoint, spec: ModelDeploymentSpec) -> str | None:
    if endpoint.routing == "host":
        return None
    return spec.endpoint.path or f"/{spec.name}"


def resolve_routes(
    cluster_name: str, endpoint: Endpoint | None, deployments: Sequence[ModelDeploymentSpec]
) -> dict[str, Route]:
    """The route of every exposed deployment, by deployment name."""
    if endpoint is None:
        return {}
    chosen = [spec for spec in deployments if exposed(endpoint, spec)]
    idle_timeout = max((idle_timeout_seconds(spec) for spec in chosen), default=0)
    return {
        spec.name: Route(
            deployment=spec.name,
            load_balancer=load_balancer_group(cluster_name),
            scheme=endpoint.scheme,
            host=_host(endpoint, spec),
            path=_path(endpoint, spec),
            certificate_arn=endpoint.certificate_arn,
            source_cidrs=endpoint.source_cidrs,
            idle_timeout_seconds=idle_timeout,
            api_key=endpoint.authentication == "api_key",
            api_paths=api_paths(spec),
            blocked_paths=blocked_paths(spec),
        )
        for spec in chosen
    }


def _split_host(endpoint: Endpoint, split: TrafficSplit) -> str | None:
    if split.host is not None:
        return split.host
    if endpoint.routing == "host":
        return f"{split.name}.{endpoint.host}"
    return endpoint.host


def _split_path(endpoint: Endpoint, split: TrafficSplit) -> str | None:
    if endpoint.routing == "host":
        return None
    return split.path or f"/{split.name}"


def resolve_splits(endpoint: Endpoint | None, routes: Mapping[str, Route]) -> list[SplitRoute]:
    """The route of every split whose targets are all exposed (a split naming another fails
    validation, :func:`check_splits`)."""
    if endpoint is None:
        return []
    return [
        SplitRoute(
            name=split.name,
            host=_split_host(endpoint, split),
            path=_split_path(endpoint, split),
            targets=tuple((routes[t.deployment], t.weight) for t in split.traffic),
        )
        for split in endpoint.splits
        if all(t.deployment in routes for t in split.traffic)
    ]


def check_splits(
    endpoint: Endpoint,
    deployments: Sequence[ModelDeploymentSpec],
    routes: Mapping[str, Route],
    problems: Problems,
) -> None:
    """Every target of a split is an exposed deployment without an endpoint picker (the split
    forwards to the servers' Services), and the targets can stand in for each other: one
    engine (the split's target groups share its Ingress's health check and draining) and the
    same model names (a client names one model, any target may answer)."""
    specs = {spec.name: (i, spec) for i, spec in enumerate(deployments)}
    for i, split in enumerate(endpoint.splits):
        where = ("endpoint", "splits", i)
        targets = []
        for j, target in enumerate(split.traffic):
            found = specs.get(target.deployment)
            field = (*where, "traffic", j, "deployment")
            if found is None:
                problems.add(
                    field,
                    f"no deployment is named {target.deployment!r}; name one of {sorted(specs)}",
                    target.deployment,
                )
            elif target.deployment not in routes:
                problems.add(
                    field,
                    f"deployment {target.deployment!r} is not exposed (deployments.{found[0]}"
                    ".endpoint.expose: false), so its servers neither require the API key nor "
                    "admit the load balancer; expose it, or take it out of the split",
                    target.deployment,
                )
            elif found[1].routing is not None and found[1].routing.picks:
                # The split's action forwards to the servers' Service, not to the proxy.
                problems.add(
                    field,
                    f"deployment {target.deployment!r} routes through its endpoint picker "
                    f"(deployments.{found[0]}.routing.picker: {found[1].routing.picker}), "
                    "which a split's share would bypass; take it out of the split, or set "
                    "its picker: round_robin",
                    target.deployment,
                )
            else:
                targets.append(found[1])
        engines = sorted({engine_of(spec).name for spec in targets})
        if len(engines) > 1:
            problems.add(
                (*where, "traffic"),
                f"the targets run engines {', '.join(engines)}; a split's target groups share "
                "its health check and draining, so its targets must run one engine: split "
                "between deployments of the same engine",
            )
        served = {spec.name: served_model_names(spec) for spec in targets}
        if len(set(served.values())) > 1:
            listed = ", ".join(f"{name}: {list(names)}" for name, names in served.items())
            problems.add(
                (*where, "traffic"),
                f"the targets serve different model names ({listed}); a client names one "
                "model and any target may answer, so each must serve it: give the canary the "
                "same model id",
            )


def key_in_clear_warnings(routes: Mapping[str, Route]) -> tuple[str, ...]:
    """Warnings for ``eks-inference plan``: the API key would cross the VPC in clear text.

    An internal endpoint without a certificate listens on HTTP only, so every client sends
    ``Authorization: Bearer <key>`` unencrypted across the networks the load balancer
    accepts. Validation allows it (an internal load balancer is not on the internet), the
    plan says it. Without ``source_cidrs`` those are the VPC's network: the plan names the
    range of the VPC the stack creates (:data:`~eks_inference.names.VPC_CIDR`), the one a
    platform file's stack is built in.
    """
    clear = [route for route in routes.values() if route.api_key and route.protocol == "http"]
    if not clear:
        return ()
    networks = ", ".join(clear[0].source_cidrs or (VPC_CIDR,))
    return (
        f"the load balancer listens on HTTP, so the API key of {len(clear)} deployment(s) "
        f"travels in clear text across the networks it accepts ({networks}); set "
        "endpoint.certificate_arn to an ACM certificate to listen on HTTPS only",
    )


def _hosts_overlap(a: str | None, b: str | None) -> bool:
    # A rule without a host condition matches every host.
    return a is None or b is None or a == b


def _paths_overlap(a: str | None, b: str | None) -> bool:
    # A rule without a path condition matches every path; a prefix matches the paths below it.
    if a is None or b is None:
        return True
    return a == b or a.startswith(f"{b}/") or b.startswith(f"{a}/")


def api_paths(spec: ModelDeploymentSpec) -> tuple[str, ...]:
    """The path prefixes the load balancer forwards to ``spec``'s servers: the OpenAI API, and
    those an engine serves beyond it."""
    extra = engine_of(spec).capability(ServesExtraApiPaths)
    return (OPENAI_API_PATH, *(extra.paths(spec) if extra is not None else ()))


def blocked_paths(spec: ModelDeploymentSpec) -> tuple[str, ...]:
    """Paths below the OpenAI API that must never reach ``spec``'s servers through the load
    balancer: the runtime adapter endpoints of an engine that registers them
    (:class:`~eks_inference.specification.capabilities.ServesAdapters`)."""
    adapters = engine_of(spec).capability(ServesAdapters)
    if adapters is None or not adapters.serves(spec):
        return ()
    return adapters.runtime_paths(spec)


def served_model_names(spec: ModelDeploymentSpec) -> tuple[str, ...]:
    """The model names clients send in requests (``model``): the Hugging Face id, or the
    models of the repository an engine with one serves; then the LoRA adapters served beside
    the model (``adapters``)."""
    repository = engine_of(spec).capability(ServesModelRepository)
    names = repository.served_model_names(spec) if repository is not None else (spec.model.id,)
    if spec.adapters is not None and engine_of(spec).serves(ServesAdapters, spec):
        names += spec.adapters.names
    return names


def check_routes(
    cluster_name: str,
    endpoint: Endpoint | None,
    deployments: Sequence[ModelDeploymentSpec],
    problems: Problems,
) -> None:
    """Rules that span the exposed deployments of a platform, reported under its field paths.

    * no two deployments need a Service of the same name
      (:func:`~eks_inference.specification.service_names.check_names`);
    * a deployment's own ``endpoint.path``/``host`` needs a platform endpoint, and a path
      needs path routing;
    * no two routes overlap: a request must have exactly one deployment to go to, so equal
      paths (on overlapping hosts), a path that is a prefix of another, or equal hosts fail
      under the later deployment's field, naming the earlier one;
    * the routes and splits fit the load balancer's quotas of listener rules and target
      groups (:func:`check_load_balancer_quotas`);
    * each deployment's idle timeout fits the ALB's maximum.
    """
    check_names(deployments, problems)
    for i, spec in enumerate(deployments):
        given = spec.endpoint.model_fields_set & {"path", "host"}
        if endpoint is None and given:
            problems.add(
                ("deployments", i, "endpoint"),
                f"deployment {spec.name!r} sets endpoint.{sorted(given)[0]} but the platform "
                "has no load balancer: add a platform endpoint (e.g. endpoint: {}) or remove it",
            )
        elif endpoint is not None and endpoint.routing == "host" and spec.endpoint.path is not None:
            problems.add(
                ("deployments", i, "endpoint", "path"),
                "the platform endpoint routes by host, so a deployment is reached at the root "
                "of its own host name: remove path, or use routing: path",
                spec.endpoint.path,
            )
    if endpoint is None:
        return
    routes = resolve_routes(cluster_name, endpoint, deployments)
    index = {spec.name: i for i, spec in enumerate(deployments)}
    specs = {spec.name: spec for spec in deployments}
    # The field that decides where a deployment's requests go.
    field = "host" if endpoint.routing == "host" else "path"
    placed: list[Route] = []
    for name, route in routes.items():
        spec = specs[name]
        for earlier in placed:
            if _hosts_overlap(route.host, earlier.host) and _paths_overlap(
                route.path, earlier.path
            ):
                where = route.path if field == "path" else route.host
                problems.add(
                    ("deployments", index[name], "endpoint", field),
                    f"{field} {where} of deployment {name!r} overlaps the route of "
                    f"deployment {earlier.deployment!r} (deployments.{index[earlier.deployment]}"
                    f".endpoint.{field}: {earlier.path if field == 'path' else earlier.host}) "
                    f"on the load balancer: give each deployment its own {field}",
                    where,
                )
                break
        placed.append(route)
        timeout = idle_timeout_seconds(spec)
        cold = cold_start_seconds(spec)
        if timeout > MAX_IDLE_TIMEOUT_S and cold:
            problems.add(
                ("deployments", index[name], "scaling", "min_replicas"),
                f"the first request after idle waits a cold start of {cold} s (node launch, "
                f"image pull, model load) and then up to {timeout - cold} s of generation: "
                f"{timeout} s, beyond the {MAX_IDLE_TIMEOUT_S} s idle timeout an ALB allows; "
                "set min_replicas >= 1, lower max_model_len, or set endpoint.expose: false",
                spec.scaling.min_replicas,
            )
        elif timeout > MAX_IDLE_TIMEOUT_S:
            problems.add(
                ("deployments", index[name], "limits", "max_model_len"),
                f"a response of max_model_len ({spec.limits.max_model_len}) tokens takes up to "
                f"{timeout} s at the decode bound (with a margin of {IDLE_TIMEOUT_MARGIN}), "
                f"beyond the {MAX_IDLE_TIMEOUT_S} s idle timeout an ALB allows; lower "
                "max_model_len or max_num_seqs, use a larger tensor_parallel_size, or set "
                "endpoint.expose: false",
                spec.limits.max_model_len,
            )
    check_splits(endpoint, deployments, routes, problems)
    for k, split in enumerate(resolve_splits(endpoint, routes)):
        for earlier in placed:
            if _hosts_overlap(split.host, earlier.host) and _paths_overlap(
                split.path, earlier.path
            ):
                where = split.path if field == "path" else split.host
                problems.add(
                    ("endpoint", "splits", k, field),
                    f"{field} {where} of split {split.name!r} overlaps the route of "
                    f"{earlier.deployment!r} on the load balancer: give the split its own "
                    f"{field}",
                    where,
                )
                break
        placed.append(
            Route(
                deployment=f"split {split.name}",
                load_balancer=split.load_balancer.load_balancer,
                scheme=split.load_balancer.scheme,
                host=split.host,
                path=split.path,
                certificate_arn=split.load_balancer.certificate_arn,
                source_cidrs=split.load_balancer.source_cidrs,
                idle_timeout_seconds=split.load_balancer.idle_timeout_seconds,
                api_key=split.load_balancer.api_key,
                api_paths=split.api_paths,
            )
        )
    check_load_balancer_quotas(routes, resolve_splits(endpoint, routes), problems)


def check_load_balancer_quotas(
    routes: Mapping[str, Route], splits: Sequence[SplitRoute], problems: Problems
) -> None:
    """The routes and splits fit the load balancer's listener rules and target groups, each
    counted by the route that takes them (:attr:`Route.listener_rules`,
    :attr:`Route.target_groups`; a split's likewise). The excess fails under ``endpoint``
    with the counts, the rules first: what fixes them (fewer routes) fixes the target groups
    of the same routes."""
    fix = "set endpoint.expose: false on some deployments, or remove splits"
    by_routes = sum(route.listener_rules for route in routes.values())
    by_splits = sum(split.listener_rules for split in splits)
    if by_routes + by_splits > MAX_LISTENER_RULES:
        several = [route for route in routes.values() if route.listener_rules > 1]
        example = (
            f"; {len(several)} serve more than /v1, e.g. {several[0].deployment}: "
            f"{', '.join(several[0].api_paths)}"
            if several
            else ""
        )
        problems.add(
            ("endpoint",),
            f"the load balancer would need {by_routes + by_splits} listener rules, "
            f"{by_routes} for the API paths of {len(routes)} exposed deployments (one per "
            f"path{example}) and {by_splits} for {len(splits)} splits, over the "
            f"{MAX_LISTENER_RULES} an ALB holds; {fix}",
        )
        return
    by_routes = sum(route.target_groups for route in routes.values())
    by_splits = sum(split.target_groups for split in splits)
    if by_routes + by_splits > MAX_TARGET_GROUPS:
        problems.add(
            ("endpoint",),
            f"the load balancer would need {by_routes + by_splits} target groups, "
            f"{by_routes} for {len(routes)} exposed deployments and {by_splits} for the "
            f"targets of {len(splits)} splits (one per target), over the {MAX_TARGET_GROUPS} "
            f"an ALB holds; {fix}",
        )
