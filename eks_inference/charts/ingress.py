"""What exposes the deployments: one Ingress per deployment, and the platform's API-key objects.

**One load balancer, one Ingress per deployment.** Every exposed deployment gets an Ingress
of class ``alb`` in the IngressGroup of its :class:`~eks_inference.specification.routes.Route`; the
AWS Load
Balancer Controller merges the group into one Application Load Balancer with one listener rule
and one target group per Ingress. Settings of the load balancer itself (scheme, listener,
certificate, TLS policy, client networks, attributes) are "exclusive" in the controller's
terms and are rendered identically on every Ingress of the group from the one
:class:`~eks_inference.specification.endpoints.Endpoint`; route collisions are rejected when the
platform is
validated (:func:`eks_inference.specification.routes.check_routes`).

**Routing: the client APIs and nothing else.** A deployment's Ingress has one path per API
its route forwards (:attr:`~eks_inference.specification.routes.Route.api_paths`, its engine's): the
OpenAI API, ``/v1`` and below (Triton with framework models adds KServe's ``/v2/models``),
each a listener rule. With path routing that is ``/<name>/v1`` and below, and a URL-rewrite
transform strips the prefix, so the server sees ``/v1/...`` as it expects and a client's base
URL is ``http(s)://<load balancer>/<name>/v1``; with host routing it is ``/v1`` and below on
the deployment's host, with no rewrite. Every
other request, under a deployment's prefix or on its host or anywhere else, matches no rule
and gets the listener's default action: the controller makes that a fixed 404 when no Ingress
of the group sets a default backend, and none does (no ``defaultBackend``, no rule for ``/``
without a host). The servers' other routes (vLLM's ``/invocations``, ``/tokenize``,
``/docs``, ``/metrics``, Serve's ``/-/routes`` and so on) are therefore never reached through
the load balancer, whatever they check themselves; the API-key check of every engine
(``eks_inference/serve/api_key_auth.py``) covers the ``/v1`` paths that are.

**Targets and health.** Pods are registered by IP (``target-type: ip``, so the ClusterIP
Services need no node ports) and health-checked on the server's real readiness route, so a
replica that is still loading its model receives nothing:

* standalone vLLM: ``GET /health`` on port 8000, the route of its own readiness probe;
* Ray Serve: ``GET /-/healthz`` on port 8000, the route of Serve's HTTP proxy (the one
  KubeRay's readiness probes use). A worker's proxy answers 200 only once the route table
  has a running replica, and 503 while Serve drains the node (at least 30 s, longer than the
  20 s the health check takes to mark it unhealthy) before the pod is removed.

A target is healthy after 2 checks 10 s apart and unhealthy after 2 failures. The
deregistration delay equals the pods' termination grace period (120 s for vLLM, whose preStop
hook keeps serving while the target drains; 30 s for Ray pods), so the load balancer keeps a
draining target's requests exactly as long as the pod may live. Requests go to the target with
the fewest outstanding requests: generations differ in length by orders of magnitude, so
round robin would pile requests onto replicas busy with long ones.

**Listener.** HTTPS on 443 only, with the TLS 1.3/1.2 policy, when the endpoint has a
certificate; otherwise HTTP on 80, which only an internal load balancer may do. Clients may
connect from the endpoint's ``source_cidrs``
(:attr:`~eks_inference.specification.routes.Route.source_cidrs`)
or, when it lists none, from the cluster's VPC only: the render context's
:attr:`~eks_inference.charts.context.RenderContext.vpc_cidr`, the very range the deployment's
NetworkPolicies admit the load balancer from, so a cluster in a VPC of its own accepts its own
VPC's clients and not those of the default range. The idle timeout is the route's (see
:mod:`eks_inference.specification.routes`); invalid header fields are dropped.

**API key.** :func:`api_key_chart` is the platform's one copy of the API key in Kubernetes: an
External Secrets Operator ``SecretStore`` for AWS Secrets Manager in the inference namespace
(authenticated as the operator's own Pod Identity) and an ``ExternalSecret`` that syncs the
secret into the Secret ``names.API_KEY_SECRET``, refreshed hourly. The model servers read it
(:data:`~eks_inference.charts.api_key.API_KEY_SECRET_NEED`).

Every annotation rendered here is one the pinned controller release documents
(``tests/charts/test_endpoint.py`` holds the list with its source).
"""

from __future__ import annotations

import json
from typing import Any

from eks_inference.charts.api_key import API_KEY_SECRET_NEED
from eks_inference.charts.context import RenderContext
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import PART_OF, api_object, metadata, object_labels
from eks_inference.charts.record import ChartRecord, deployment_chart
from eks_inference.charts.routing import backend
from eks_inference.charts.serving import Backend
from eks_inference.names import ALB_INGRESS_CLASS, COMPONENT_LABEL, INFERENCE_NAMESPACE
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.routes import Route

ENDPOINT_ROLE = "endpoint"
API_KEY_ROLE = "api-key"
ALB_ANNOTATION_PREFIX = "alb.ingress.kubernetes.io/"
HEALTH_CHECK_INTERVAL_S = 10
HEALTH_CHECK_TIMEOUT_S = 5
HEALTHY_THRESHOLD = 2
UNHEALTHY_THRESHOLD = 2
# TLS 1.3 and 1.2 only (the controller's default policy, ELBSecurityPolicy-2016-08, still
# accepts TLS 1.0).
TLS_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
HTTPS_PORT = 443
HTTP_PORT = 80
# The action of a route's blocked paths: the load balancer answers them itself, as it answers
# every path no rule forwards. A backend naming an action takes this port name.
NOT_FOUND_ACTION = "not-found"
USE_ANNOTATION_PORT = "use-annotation"

# The External Secrets Operator's API and the custom resources the API-key chart creates.
EXTERNAL_SECRETS_API_VERSION = "external-secrets.io/v1"
EXTERNAL_SECRET_CRD = "externalsecrets.external-secrets.io"
SECRET_STORE_CRD = "secretstores.external-secrets.io"
SECRET_STORE = "aws-secrets-manager"
# How often the operator re-reads the key: a rotated key reaches the Secret within the hour
# (and the servers when their pods restart, since they read it into their environment).
API_KEY_REFRESH_INTERVAL = "1h"


def _attributes(values: dict[str, Any]) -> str:
    return ",".join(f"{key}={value}" for key, value in values.items())


def _alb(annotations: dict[str, str]) -> dict[str, str]:
    return {f"{ALB_ANNOTATION_PREFIX}{key}": value for key, value in annotations.items()}


def load_balancer_annotations(route: Route, vpc_cidr: str) -> dict[str, str]:
    """The annotations that configure the load balancer itself, equal on every route of it.

    The controller requires these "exclusive" settings to agree across an IngressGroup, so
    they are computed from the route's load-balancer fields and the cluster's VPC range
    ``vpc_cidr`` (the client networks when the endpoint lists none) only. ``vpc_cidr`` may be
    a CDK token (a VPC passed to the stack): the annotation is then that token, which CDK
    resolves in the manifest.
    """
    listener = {"HTTPS": HTTPS_PORT} if route.certificate_arn is not None else {"HTTP": HTTP_PORT}
    annotations = {
        "group.name": route.load_balancer,
        "scheme": route.scheme,
        "listen-ports": json.dumps([listener], separators=(",", ":")),
        "load-balancer-attributes": _attributes(
            {
                "idle_timeout.timeout_seconds": route.idle_timeout_seconds,
                "routing.http.drop_invalid_header_fields.enabled": "true",
            }
        ),
    }
    if route.certificate_arn is not None:
        annotations["certificate-arn"] = route.certificate_arn
        annotations["ssl-policy"] = TLS_POLICY
    annotations["inbound-cidrs"] = ",".join(route.source_cidrs or (vpc_cidr,))
    return _alb(annotations)


def target_annotations(target: Backend) -> dict[str, str]:
    """The annotations of one deployment's target group: IP targets, health, draining."""
    health_port = (
        {} if target.health_port is None else {"healthcheck-port": str(target.health_port)}
    )
    return _alb(
        {
            "target-type": "ip",
            **health_port,
            "healthcheck-path": target.health_path,
            "healthcheck-interval-seconds": str(HEALTH_CHECK_INTERVAL_S),
            "healthcheck-timeout-seconds": str(HEALTH_CHECK_TIMEOUT_S),
            "healthy-threshold-count": str(HEALTHY_THRESHOLD),
            "unhealthy-threshold-count": str(UNHEALTHY_THRESHOLD),
            "success-codes": "200",
            "target-group-attributes": _attributes(
                {
                    "deregistration_delay.timeout_seconds": target.deregistration_delay_seconds,
                    "load_balancing.algorithm.type": "least_outstanding_requests",
                }
            ),
        }
    )


def strip_prefix_transform(path: str) -> list[dict[str, Any]]:
    """The URL rewrite that turns ``<path>/v1/...`` into ``/v1/...``.

    ``path`` is a :data:`~eks_inference.specification.endpoints.RoutePath`: only lowercase letters,
    digits,
    ``-`` and ``/``, none of which a regular expression reads as anything but itself.
    """
    return [
        {
            "type": "url-rewrite",
            "urlRewriteConfig": {"rewrites": [{"regex": f"^{path}/(.*)$", "replace": "/$1"}]},
        }
    ]


def host_header_transform(host: str) -> dict[str, Any]:
    """The rewrite that sets every request's Host to ``host`` (a DNS name: nothing in it is
    read as a pattern by the replacement)."""
    return {
        "type": "host-header-rewrite",
        "hostHeaderRewriteConfig": {"rewrites": [{"regex": "^.*$", "replace": host}]},
    }


def not_found_action() -> dict[str, Any]:
    """A fixed 404 in OpenAI's error shape, the answer of a route's blocked paths."""
    body = {"error": {"message": "not found", "type": "invalid_request_error", "code": 404}}
    return {
        "type": "fixed-response",
        "fixedResponseConfig": {
            "contentType": "application/json",
            "statusCode": "404",
            "messageBody": json.dumps(body, separators=(",", ":")),
        },
    }


def ingress(spec: ModelDeploymentSpec, route: Route, vpc_cidr: str) -> dict[str, Any]:
    """The Ingress of ``spec`` on ``route``'s load balancer: a path per API of the route.

    A route's :attr:`~eks_inference.specification.routes.Route.blocked_paths` (the runtime
    adapter endpoints of servers that find adapters on demand) come first, each an ``Exact``
    path to the fixed-404 action :data:`NOT_FOUND_ACTION`: the controller gives an Ingress's
    exact paths their listener rules before its prefix paths (``sortIngressPaths`` in its
    ``pkg/ingress/model_build_listener_rules.go``), and they are listed first as well, so these
    match before the API's prefix would forward them and the servers never see them from
    outside.

    ``vpc_cidr`` is the cluster's VPC
    (:attr:`~eks_inference.charts.context.RenderContext.vpc_cidr`), whose clients an endpoint
    without ``source_cidrs`` accepts.
    """
    if route.deployment != spec.name:
        raise ValueError(f"route of deployment {route.deployment!r} given for {spec.name!r}")
    # The engine's servers, or the proxy of the deployment's endpoint picker (``routing``).
    target = backend(spec)
    annotations = {**load_balancer_annotations(route, vpc_cidr), **target_annotations(target)}
    transforms = strip_prefix_transform(route.path) if route.path is not None else []
    if target.host_header is not None:
        transforms.append(host_header_transform(target.host_header))
    if transforms:
        annotations[f"{ALB_ANNOTATION_PREFIX}transforms.{target.service}"] = json.dumps(
            transforms, separators=(",", ":")
        )
    blocked = [
        {
            "path": f"{route.path or ''}{path}",
            "pathType": "Exact",
            "backend": {
                "service": {"name": NOT_FOUND_ACTION, "port": {"name": USE_ANNOTATION_PORT}}
            },
        }
        for path in route.blocked_paths
    ]
    if blocked:
        annotations[f"{ALB_ANNOTATION_PREFIX}actions.{NOT_FOUND_ACTION}"] = json.dumps(
            not_found_action(), separators=(",", ":")
        )
    rule: dict[str, Any] = {
        "http": {
            "paths": blocked
            + [
                {
                    "path": f"{route.path or ''}{api_path}",
                    "pathType": "Prefix",
                    "backend": {
                        "service": {"name": target.service, "port": {"number": target.port}}
                    },
                }
                for api_path in route.api_paths
            ]
        }
    }
    if route.host is not None:
        rule["host"] = route.host
    return api_object(
        "networking.k8s.io/v1",
        "Ingress",
        metadata(
            spec.name,
            object_labels(spec, ENDPOINT_ROLE),
            namespace=target.namespace,
            annotations=annotations,
        ),
        {"spec": {"ingressClassName": ALB_INGRESS_CLASS, "rules": [rule]}},
    )


def endpoint_chart(spec: ModelDeploymentSpec, route: Route, context: RenderContext) -> ChartRecord:
    """A deployment's Ingress on the platform's load balancer (``<name>-endpoint``).

    Its needs name the ``alb`` IngressClass: the AWS Load Balancer Controller must run
    before the Ingress is applied (its webhook validates it) and after it is deleted (it
    deletes the load balancer and removes the Ingress's finalizer). ``context`` is the
    deployment's render context, whose ``vpc_cidr`` an internal endpoint without
    ``source_cidrs`` accepts clients from.
    """
    return deployment_chart(
        spec,
        ENDPOINT_ROLE,
        [ingress(spec, route, context.vpc_cidr)],
        PlatformNeeds(
            namespaces=(backend(spec).namespace,),
            ingress_classes=(ALB_INGRESS_CLASS,),
        ),
    )


def api_key_objects(secret_id: str, region: str) -> list[dict[str, Any]]:
    """The SecretStore and ExternalSecret that sync ``secret_id`` into the API-key Secret.

    ``secret_id`` is the Secrets Manager name (or ARN) of the key, ``region`` its region; the
    operator reads it with its own Pod Identity, so the store names no credentials.
    """
    labels = {
        COMPONENT_LABEL: API_KEY_ROLE,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": PART_OF,
    }
    store = api_object(
        EXTERNAL_SECRETS_API_VERSION,
        "SecretStore",
        metadata(SECRET_STORE, labels),
        {"spec": {"provider": {"aws": {"service": "SecretsManager", "region": region}}}},
    )
    external_secret = api_object(
        EXTERNAL_SECRETS_API_VERSION,
        "ExternalSecret",
        metadata(API_KEY_SECRET_NEED.name, labels),
        {
            "spec": {
                "refreshInterval": API_KEY_REFRESH_INTERVAL,
                "secretStoreRef": {"kind": "SecretStore", "name": SECRET_STORE},
                "target": {"name": API_KEY_SECRET_NEED.name, "creationPolicy": "Owner"},
                "data": [{"secretKey": API_KEY_SECRET_NEED.key, "remoteRef": {"key": secret_id}}],
            }
        },
    )
    return [store, external_secret]


def api_key_chart(*, secret_id: str, region: str) -> ChartRecord:
    """The platform's API key in Kubernetes: a SecretStore and an ExternalSecret (``api-key``).

    Its needs name their CRDs; the External Secrets Operator must run first.
    """
    return ChartRecord(
        chart_id=API_KEY_ROLE,
        role=API_KEY_ROLE,
        objects=tuple(api_key_objects(secret_id, region)),
        needs=PlatformNeeds(
            namespaces=(INFERENCE_NAMESPACE,),
            custom_resources=(SECRET_STORE_CRD, EXTERNAL_SECRET_CRD),
        ),
    )
