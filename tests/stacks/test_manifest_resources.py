"""One manifest resource per deployment, deleted with it before what it needs, and the move
from the per-chart resources of earlier releases that deletes nothing.

Each ``Custom::AWSCDK-EKS-KubernetesResource`` is one run of the kubectl handler on create and
again on delete. A deployment's objects are one resource of its nested stack: applied in one
``kubectl apply`` after everything they need, and deleted in one ``kubectl delete`` when the
nested stack is, which CloudFormation does before the parent's resources the nested stack
depends on (the namespace, the add-ons that install its CRDs and run its controllers).

Earlier releases applied one resource per chart. Dropping those from a deployed template
would make CloudFormation delete them after the new resource applied the objects, and their
deletion would delete the objects. ``-c retain_chart_manifests=true`` keeps them, unchanged
(their ids and properties as those releases synthesized them, so CloudFormation runs nothing
for them) and retained, so the next deploy without it only forgets them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App

from eks_inference.specification.platform import PlatformSpec
from eks_inference.stacks import build_app
from tests.helpers.deployed import MANIFEST_TYPE, DeployedDeployment, deployed
from tests.helpers.platforms import REFERENCE_PLATFORM
from tests.helpers.synthesis import STACK_NAME, Synthesized, cdk_context, synthesize

pytestmark = [pytest.mark.synth, pytest.mark.xdist_group("synth")]

PLATFORM = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
# The logical ids of the reference app's per-chart manifest resources in the release before
# one resource per deployment (a chart's role, hashed with its path), chart by chart.
PER_CHART_IDS = {
    "llama3-8b-inf2": [
        "Deploymentnetworkpolicy47ABF209",
        "DeploymentmodelweightsC52FD846",
        "Deploymentneuronartifacts2AE6ADBB",
        "DeploymentrayserviceE6505E9E",
        "Deploymentmonitoring53529A12",
        "Deploymentendpoint3F604624",
    ],
    "mistral-7b-g6e": [
        "Deploymentnetworkpolicy47ABF209",
        "Deploymentvllm2E442D0C",
        "Deploymentmonitoring53529A12",
        "Deploymentendpoint3F604624",
    ],
    "qwen25-7b-g6e": [
        "Deploymentnetworkpolicy47ABF209",
        "DeploymentmodelweightsC52FD846",
        "DeploymentrayserviceE6505E9E",
        "Deploymentmonitoring53529A12",
        "Deploymentendpoint3F604624",
    ],
}
OBJECTS_ID = "DeploymentObjects4B79A084"


@pytest.fixture(scope="module")
def retaining(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The reference app synthesized with ``-c retain_chart_manifests=true``."""
    outdir = tmp_path_factory.mktemp("cdk.out.retaining")
    context = {**cdk_context(), "retain_chart_manifests": "true"}
    app, stack = build_app(PLATFORM, app=App(context=context, outdir=str(outdir)))
    return synthesize(app, stack, outdir)


def _manifests(deployment: DeployedDeployment) -> dict[str, dict[str, Any]]:
    return deployment.resources(MANIFEST_TYPE)


def test_a_deployments_objects_are_one_resource_deleted_before_what_it_needs(
    reference: Synthesized,
) -> None:
    parent = reference.templates[STACK_NAME]["Resources"]
    namespace = {k for k in parent if "InferenceNamespace" in k}
    assert namespace
    for name, deployment in deployed(reference, PLATFORM).items():
        assert list(_manifests(deployment)) == [OBJECTS_ID], name
        # Deleted with the nested stack, which goes before what its resource depends on.
        assert namespace <= set(deployment.stack_resource["DependsOn"]), name


def test_retaining_keeps_every_per_chart_resource_unchanged_and_retained(
    retaining: Synthesized,
) -> None:
    for name, deployment in deployed(retaining, PLATFORM).items():
        manifests = _manifests(deployment)
        assert sorted(manifests) == sorted([*PER_CHART_IDS[name], OBJECTS_ID]), name
        objects = manifests.pop(OBJECTS_ID)
        assert objects["Properties"]["Overwrite"] is True
        assert "DeletionPolicy" not in objects or objects["DeletionPolicy"] == "Delete"
        per_chart: list[dict[str, Any]] = []
        for logical_id in PER_CHART_IDS[name]:
            legacy = manifests[logical_id]
            assert legacy["DeletionPolicy"] == legacy["UpdateReplacePolicy"] == "Retain"
            # As the earlier release wrote it: no Overwrite, kubectl create on create.
            assert set(legacy["Properties"]) == {
                "ServiceToken",
                "ClusterName",
                "Manifest",
                "PruneLabel",
            }
            per_chart += json.loads(deployment.resolve(legacy["Properties"]["Manifest"]))
        # Together the per-chart resources hold exactly the objects the one resource applies.
        applied = json.loads(deployment.resolve(objects["Properties"]["Manifest"]))
        assert _unlabelled(per_chart) == _unlabelled(applied), name


def test_retaining_changes_nothing_of_the_parent_but_the_nested_templates_addresses(
    retaining: Synthesized, reference: Synthesized
) -> None:
    def without_template_urls(template: dict[str, Any]) -> dict[str, Any]:
        resources = {
            logical_id: (
                {**r, "Properties": {**r["Properties"], "TemplateURL": None}}
                if r["Type"] == "AWS::CloudFormation::Stack"
                else r
            )
            for logical_id, r in template["Resources"].items()
        }
        return {**template, "Resources": resources}

    ours, theirs = retaining.templates[STACK_NAME], reference.templates[STACK_NAME]
    assert without_template_urls(ours) == without_template_urls(theirs)


def _unlabelled(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``objects`` without aws_eks_v2's pruning label, which names the resource applying them."""
    kept = []
    for obj in objects:
        labels = {
            k: v
            for k, v in obj["metadata"].get("labels", {}).items()
            if not k.startswith("aws.cdk.eks/prune-")
        }
        kept.append({**obj, "metadata": {**obj["metadata"], "labels": labels}})
    return kept
