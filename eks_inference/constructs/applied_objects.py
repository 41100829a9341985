"""``AppliedObjects``: Kubernetes objects applied by the cluster's kubectl handler, handed over
to CDK as one JSON text.

It creates what ``aws_eks_v2.KubernetesManifest`` creates (one
``Custom::AWSCDK-EKS-KubernetesResource`` named ``Resource``, pruned by a label that carries
this construct's address, applied after the cluster's kubectl barrier), with one difference
in how the objects reach it. ``KubernetesManifest`` takes them as a structure: jsii walks
every value of it on both sides of the pipe to Node.js, and CDK walks it twice more, to
serialize it and to find the references in it. A deployment's objects are tens of kilobytes
of JSON whose only tokens are a few strings (the bucket's name, an image's URI), so here
Python serializes them once, in C, and CDK receives one string, in which it finds the token
strings as it finds them in any string. The kubectl handler reads the same JSON either way.

It takes five requests to Node.js where a ``KubernetesManifest`` and its dependencies take
three, so the add-ons' few objects stay ``KubernetesManifest``s. At 100 deployments this
construct saves about 0.8 s of the synth's CPU (5.57 s to 4.76 s, five interleaved runs), with
the templates unchanged byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from aws_cdk import CustomResource
from constructs import Construct, IConstruct

from eks_inference.constructs._stacks import record_construct, stack_of
from eks_inference.constructs.cluster import InferenceCluster

RESOURCE_TYPE = "Custom::AWSCDK-EKS-KubernetesResource"
# aws_eks_v2.KubernetesManifest's prefix: the label the kubectl handler prunes by.
PRUNE_LABEL_PREFIX = "aws.cdk.eks/prune-"
# What a list or number token looks like in Python. Only a string token stays a token inside
# a JSON text; objects holding these are serialized by CDK (Stack.to_json_string), as
# KubernetesManifest serializes every manifest.
_LIST_OR_NUMBER_TOKEN = re.compile(r"#\{Token\[|-1\.888\d*e\+289")


class AppliedObjects(Construct):
    """``objects`` applied to ``cluster`` in their order, as one kubectl run.

    Create, update and delete are those of ``KubernetesManifest(prune=True)``: the handler
    applies the objects with ``kubectl apply`` (``overwrite``: also on create, so objects that
    exist are adopted), deletes on update what it applied before and no longer applies
    (found by the pruning label), and deletes them all with the resource.

    Each object is labelled with the pruning label ahead of its own labels, as
    ``KubernetesManifest`` labels it; ``objects`` themselves are not changed. :attr:`resource`
    is the custom resource; dependencies added to this construct are its.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: InferenceCluster,
        objects: Iterable[Mapping[str, Any]],
        overwrite: bool = False,
        after: Iterable[IConstruct] = (),
    ) -> None:
        """Apply ``objects`` after the constructs in ``after`` and the cluster's readiness for
        kubectl (its access entries), as ``KubernetesManifest`` is applied after it.

        :param overwrite: ``kubectl apply`` on create too, adopting objects that exist.
            Default: off, as ``KubernetesManifest``'s: an object that exists fails the create.
        """
        super().__init__(scope, construct_id)
        record_construct(self, scope)
        node = self.node
        node.add_dependency(cluster.kubectl_barrier, *after)
        prune_label = PRUNE_LABEL_PREFIX + node.addr
        labelled = [_labelled(obj, prune_label) for obj in objects]
        text = json.dumps(labelled, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=cluster.kubectl_service_token,
            resource_type=RESOURCE_TYPE,
            properties={
                "Manifest": (
                    stack_of(self).to_json_string(labelled)
                    if _LIST_OR_NUMBER_TOKEN.search(text)
                    else text
                ),
                "ClusterName": cluster.cluster_name_ref,
                "PruneLabel": prune_label,
                "Overwrite": overwrite,
            },
        )


def _labelled(obj: Mapping[str, Any], prune_label: str) -> Mapping[str, Any]:
    """``obj`` with ``prune_label`` first among its labels; ``obj`` itself is not changed."""
    if not obj.get("kind"):
        return obj
    metadata = obj.get("metadata") or {}
    labels = {prune_label: "", **(metadata.get("labels") or {})}
    return {**obj, "metadata": {**metadata, "labels": labels}}
