"""Prometheus' volume: deleted with the release by default, kept when the options ask.

The default's effect on the synthesized reference app (the chart value, the namespace deleted
after the release and before the driver) is read in ``tests/stacks/test_teardown_order.py``;
here the option is built into a construct tree of its own, without a synth.
"""

from __future__ import annotations

from aws_cdk import App, CfnDeletionPolicy, CfnResource, Stack

from eks_inference.constructs import InferenceCluster, InferenceObservability, PlatformAddons
from eks_inference.constructs.addons.observability import ObservabilityOptions
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REFERENCE_PLATFORM

SYSTEM = PlatformSpec.from_yaml(REFERENCE_PLATFORM).system_pool


def test_the_claim_goes_with_the_statefulset_unless_kept() -> None:
    assert ObservabilityOptions().keep_prometheus_volume is False
    assert ObservabilityOptions().prometheus_claim_retention == {
        "whenDeleted": "Delete",
        "whenScaled": "Retain",
    }
    kept = ObservabilityOptions(keep_prometheus_volume=True)
    assert kept.prometheus_claim_retention == {"whenDeleted": "Retain", "whenScaled": "Retain"}


def _namespace_deletion_policy(options: ObservabilityOptions) -> CfnDeletionPolicy | None:
    stack = Stack(App(), "Monitoring")
    cluster = InferenceCluster(stack, "Cluster", cluster_name="monitored", node_pools=[SYSTEM])
    observability = InferenceObservability(
        cluster, "Observability", platform=PlatformAddons(cluster), options=options
    )
    resource = observability.namespace.node.default_child
    assert isinstance(resource, CfnResource)
    return resource.cfn_options.deletion_policy


def test_a_kept_volume_leaves_its_namespace_to_the_cluster() -> None:
    # Retained, CloudFormation never deletes the namespace, and with it the claim.
    kept = ObservabilityOptions(keep_prometheus_volume=True)
    assert _namespace_deletion_policy(kept) == CfnDeletionPolicy.RETAIN
    assert _namespace_deletion_policy(ObservabilityOptions()) in (None, CfnDeletionPolicy.DELETE)
