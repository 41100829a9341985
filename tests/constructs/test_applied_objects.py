"""AppliedObjects creates what aws_eks_v2.KubernetesManifest creates, from one JSON text.

Each case builds the same objects both ways, side by side in one stack, and compares the
synthesized resources: type, properties (the pruning label aside, which names each
construct's own address), and what they wait for. The objects carry the tokens a
deployment's objects carry (a bucket's name in a string, an image URI inside a longer
string), and, for the cases CDK must serialize itself, a number and a list token.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from aws_cdk import App, CfnParameter, Fn, Stack, Token
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from eks_inference.constructs.applied_objects import (
    PRUNE_LABEL_PREFIX,
    RESOURCE_TYPE,
    AppliedObjects,
)
from eks_inference.constructs.cluster import InferenceCluster
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REFERENCE_PLATFORM

SYSTEM = PlatformSpec.from_yaml(REFERENCE_PLATFORM).system_pool


def _objects(bucket: str, image: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "inference"}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "settings",
                "namespace": "inference",
                "labels": {"app.kubernetes.io/name": "settings"},
            },
            "data": {
                "bucket": bucket,
                "image": f"{image}@sha256:{'0' * 64}",
                "quoted": 'a "quoted" value\\ with a tab\t and \u00e9',
                "script": "#!/bin/sh\necho ${HOME} #{not a token}\n",
            },
        },
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "no-labels"}},
        {"kind": "", "note": "not an object: left as it is"},
    ]


def _side_by_side(extra: str | None = None) -> dict[str, Any]:
    """The template of one stack with the objects applied both ways, with a Service holding
    an ``extra`` token (``number`` or ``list``) among them."""
    stack = Stack(App(), "Applied")
    cluster = InferenceCluster(stack, "Cluster", cluster_name="applied", node_pools=[SYSTEM])
    bucket = CfnParameter(stack, "Bucket").value_as_string
    image = Fn.sub("${AWS::AccountId}.dkr.ecr.${AWS::Region}.${AWS::URLSuffix}/server")
    objects: list[Any] = _objects(bucket, image)
    if extra is not None:
        token = Fn.ref("Elsewhere")
        spec = (
            {"port": Token.as_number(token)} if extra == "number" else {"ips": Token.as_list(token)}
        )
        objects.append({"kind": "Service", "metadata": {"name": extra}, "spec": spec})
    given = copy.deepcopy(objects)
    theirs = copy.deepcopy(objects)
    eks.KubernetesManifest(
        stack, "Theirs", cluster=cluster.eks_cluster, manifest=theirs, overwrite=True
    )
    AppliedObjects(stack, "Ours", cluster=cluster, objects=objects, overwrite=True)
    assert objects == given, "the objects given were changed"
    return Template.from_stack(stack).to_json()


def _resource(template: dict[str, Any], prefix: str) -> dict[str, Any]:
    (resource,) = [
        r
        for logical_id, r in template["Resources"].items()
        if logical_id.startswith(prefix) and r["Type"] == RESOURCE_TYPE
    ]
    return resource


def _without_prune_label(resource: dict[str, Any]) -> dict[str, Any]:
    label = resource["Properties"]["PruneLabel"]
    assert label.startswith(PRUNE_LABEL_PREFIX)
    text = json.dumps(resource).replace(label, "<prune label>")
    return dict(json.loads(text))


@pytest.mark.parametrize(
    "extra",
    # Tokens a JSON text cannot carry (number, list): CDK serializes these objects itself.
    [None, "number", "list"],
    ids=["string tokens", "number token", "list token"],
)
def test_the_resource_is_the_one_kubernetes_manifest_creates(extra: str | None) -> None:
    template = _side_by_side(extra)
    theirs = _resource(template, "Theirs")
    ours = _resource(template, "Ours")
    assert _without_prune_label(ours) == _without_prune_label(theirs)
    # Both wait for the cluster's kubectl access, and for nothing else here.
    assert ours["DependsOn"] == theirs["DependsOn"]
    assert any(d.startswith("ClusterKubectlReadyBarrier") for d in ours["DependsOn"])


def test_the_objects_are_labelled_for_pruning_first_and_otherwise_unchanged() -> None:
    stack = Stack(App(), "Applied")
    cluster = InferenceCluster(stack, "Cluster", cluster_name="applied", node_pools=[SYSTEM])
    objects = _objects("bucket", "registry/server")
    applied = AppliedObjects(stack, "Ours", cluster=cluster, objects=objects)
    properties = _resource(Template.from_stack(stack).to_json(), "Ours")["Properties"]
    label = PRUNE_LABEL_PREFIX + applied.node.addr
    assert properties["PruneLabel"] == label
    assert properties["Overwrite"] is False
    written = json.loads(properties["Manifest"])
    for before, after in zip(objects, written, strict=True):
        if not before.get("kind"):
            assert after == before
            continue
        assert list(after["metadata"]["labels"]) == [
            label,
            *before["metadata"].get("labels", {}),
        ]
        after["metadata"]["labels"].pop(label)
        if not after["metadata"]["labels"] and "labels" not in before["metadata"]:
            del after["metadata"]["labels"]
        assert after == before
