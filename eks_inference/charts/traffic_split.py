"""Traffic splits: one Ingress per split, whose rule forwards to several deployments by weight.

A split (``endpoint.splits``, :class:`~eks_inference.specification.endpoints.TrafficSplit`) is one
more
listener rule on the platform's load balancer. Its Ingress joins the same IngressGroup with
the same load-balancer settings as every deployment's (:func:`load_balancer_annotations`),
and routes one path, the split's OpenAI API (``<path>/v1`` and below), to an action of the
AWS Load Balancer Controller rather than to a Service: the path's backend names the action
(``service.name`` the action's name, ``port.name`` ``use-annotation``), and the annotation
``alb.ingress.kubernetes.io/actions.<action>`` holds a forward action whose
``forwardConfig.targetGroups`` list each target's Service and port with its weight (the
"advanced schema" of docs/guide/ingress/annotations.md and ``pkg/ingress/config_types.go`` at
the controller's v3.5.0). The controller makes a target group per Service of the Ingress,
each checking its own pods' health (:func:`target_annotations` of the first target, whose
engine every target shares) and draining as long as the longest of them. The prefix is
stripped by the ``transforms.<action>`` rewrite, as on a deployment's own route.

Nothing else is opened: the targets are exposed deployments, whose servers already require
the API key on every path the rule forwards, and the rule forwards only ``/v1``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.ingress import (
    ALB_ANNOTATION_PREFIX,
    load_balancer_annotations,
    strip_prefix_transform,
    target_annotations,
)
from eks_inference.charts.metadata import PART_OF, api_object, metadata
from eks_inference.charts.model_server import OPENAI_PORT
from eks_inference.charts.record import ChartRecord
from eks_inference.charts.serving import serving_engine
from eks_inference.names import ALB_INGRESS_CLASS, COMPONENT_LABEL, INFERENCE_NAMESPACE
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.routes import SplitRoute

SPLIT_ROLE = "traffic-split"
# The controller's marker for a backend that is an action of the annotations.
USE_ANNOTATION = "use-annotation"


def split_name(split: SplitRoute) -> str:
    """The split's Ingress and action name: ``split-<name>`` (a DNS-1035 label)."""
    return f"split-{split.name}"


def forward_action(split: SplitRoute, deployments: Mapping[str, ModelDeploymentSpec]) -> str:
    """The weighted forward action of ``split``, as the annotation's JSON."""
    groups = [
        {
            "serviceName": serving_engine(deployments[route.deployment])
            .backend(deployments[route.deployment])
            .service,
            "servicePort": OPENAI_PORT,
            "weight": weight,
        }
        for route, weight in split.targets
    ]
    return json.dumps(
        {"type": "forward", "forwardConfig": {"targetGroups": groups}}, separators=(",", ":")
    )


def split_ingress(
    split: SplitRoute, deployments: Mapping[str, ModelDeploymentSpec], vpc_cidr: str
) -> dict[str, Any]:
    """The Ingress of ``split``: one path, its OpenAI API, to the weighted forward action.

    ``deployments`` holds at least the split's targets, by name; ``vpc_cidr`` is the
    cluster's VPC, as for the deployments' own Ingresses.
    """
    name = split_name(split)
    targets = [deployments[route.deployment] for route, _ in split.targets]
    backends = [serving_engine(spec).backend(spec) for spec in targets]
    drain = max(backend.deregistration_delay_seconds for backend in backends)
    annotations = {
        **load_balancer_annotations(split.load_balancer, vpc_cidr),
        **target_annotations(replace(backends[0], deregistration_delay_seconds=drain)),
        f"{ALB_ANNOTATION_PREFIX}actions.{name}": forward_action(split, deployments),
    }
    if split.path is not None:
        annotations[f"{ALB_ANNOTATION_PREFIX}transforms.{name}"] = json.dumps(
            strip_prefix_transform(split.path), separators=(",", ":")
        )
    rule: dict[str, Any] = {
        "http": {
            "paths": [
                {
                    "path": f"{split.path or ''}{api_path}",
                    "pathType": "Prefix",
                    "backend": {"service": {"name": name, "port": {"name": USE_ANNOTATION}}},
                }
                for api_path in split.api_paths
            ]
        }
    }
    if split.host is not None:
        rule["host"] = split.host
    labels = {
        COMPONENT_LABEL: SPLIT_ROLE,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": PART_OF,
    }
    return api_object(
        "networking.k8s.io/v1",
        "Ingress",
        metadata(name, labels, annotations=annotations),
        {"spec": {"ingressClassName": ALB_INGRESS_CLASS, "rules": [rule]}},
    )


def traffic_split_chart(
    splits: list[SplitRoute], deployments: Mapping[str, ModelDeploymentSpec], vpc_cidr: str
) -> ChartRecord:
    """The Ingresses of the platform's splits (``traffic-splits``).

    Applied after the deployments they route to (their Services must exist when the
    controller builds the target groups); its needs name the ``alb`` IngressClass.
    """
    return ChartRecord(
        chart_id=SPLIT_ROLE,
        role=SPLIT_ROLE,
        objects=tuple(split_ingress(split, deployments, vpc_cidr) for split in splits),
        needs=PlatformNeeds(
            namespaces=(INFERENCE_NAMESPACE,), ingress_classes=(ALB_INGRESS_CLASS,)
        ),
    )
