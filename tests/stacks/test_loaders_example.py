"""The loaders example (``examples/loaders.yaml``: Run:ai, image, Mountpoint with its cache on
NVMe, FSx) synthesized credential-free in both provisioning modes: cdk-nag and cfn-lint clean,
every accelerator pool's bootstrap carrying the kubelet's CPU and topology managers and the
NVMe instance store, the FSx file system in its pool's one zone and reachable from the nodes
only, and the FSx CSI driver's role granted nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from eks_inference.catalog import Accelerator
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.numa import pool_policy
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.checks import found
from tests.helpers.deployed import MANIFEST_TYPE
from tests.helpers.objects import crd_validator, schema_errors
from tests.helpers.platforms import REPO
from tests.helpers.synthesis import STACK_NAME, Synthesized, cfn_lint_errors, example_group

EXAMPLE_FILE = REPO / "examples" / "loaders.yaml"
EXAMPLE = PlatformSpec.from_yaml(EXAMPLE_FILE)
# With the example's own test (tests/stacks/test_examples.py), which synthesizes and lints the
# managed mode's app: on one worker, each is done once.
EXAMPLE_GROUP = example_group(EXAMPLE_FILE)
NODE_CONFIG_CRD = REPO / "tests" / "crds" / "node.eks.aws_nodeconfigs.yaml"
NODE_CLASS_CRD = REPO / "tests" / "crds" / "karpenter.k8s.aws_ec2nodeclasses.yaml"
LATEST = re.compile(r"(?<![A-Za-z])latest(?![A-Za-z])")
LUSTRE_PORTS = {(988, 988), (1018, 1023)}
MODES = ["managed", "karpenter"]


@pytest.fixture(scope="module", params=MODES)
def synth(
    request: pytest.FixtureRequest, synthesized_platform: Callable[[PlatformSpec], Synthesized]
) -> Synthesized:
    return synthesized_platform(EXAMPLE.with_node_provisioning(request.param))


def _node_config(user_data: str) -> dict[str, Any]:
    """The NodeConfig document of a user data: a MIME archive's part, or the document."""
    if user_data.startswith("MIME-Version:"):
        (part,) = re.findall(
            r"Content-Type: application/node\.eks\.aws\n\n(.*?)\n--", user_data, re.S
        )
        user_data = part
    config: dict[str, Any] = yaml.safe_load(user_data)
    return config


# KubeletConfiguration (k8s.io/kubelet/config/v1beta1, types.go, read at kubernetes/kubernetes
# commit 001332b0): the fields the bootstrap sets and the values each takes.
KUBELET_VALUES = {
    "cpuManagerPolicy": {"none", "static"},
    "topologyManagerPolicy": {"none", "best-effort", "restricted", "single-numa-node"},
    "topologyManagerScope": {"container", "pod"},
}


def _assert_bootstrapped(config: dict[str, Any], pool: NodePool) -> None:
    """The NodeConfig validates against nodeadm's CRD at the pinned AMI release, and its
    kubelet settings are KubeletConfiguration fields with values the kubelet takes.

    The CRD renders ``kubelet.config``'s values (RawExtensions, which nodeadm decodes from
    any JSON, as its own example's ``shutdownGracePeriod: 30s`` shows) as objects, so they
    are checked against the kubelet's types instead.
    """
    kubelet = config["spec"]["kubelet"]["config"]
    structure = {**config, "spec": {**config["spec"], "kubelet": {"config": {}}}}
    assert schema_errors(crd_validator(NODE_CONFIG_CRD, "v1alpha1"), structure) == []
    for field, value in kubelet.items():
        assert value in KUBELET_VALUES[field], (field, value)
    policy = pool_policy(pool)
    assert policy is not None
    assert kubelet == {
        "cpuManagerPolicy": "static",
        "topologyManagerPolicy": policy.policy,
        "topologyManagerScope": policy.scope,
    }


@pytest.mark.synth
@EXAMPLE_GROUP
def test_nag_lint_and_pins_are_clean(synth: Synthesized) -> None:
    """cdk-nag reports nothing; cfn-lint reports no error (:func:`cfn_lint_errors`)."""
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    assert report["pluginReports"] == []
    for name, template in synth.templates.items():
        assert cfn_lint_errors(template) == [], name
        assert not LATEST.findall(json.dumps(template)), name


def _applied(synth: Synthesized, marker: str) -> list[dict[str, Any]]:
    return [
        document
        for _, logical_id, resource in synth.all_resources(MANIFEST_TYPE)
        if marker in logical_id
        for document in json.loads(resource["Properties"]["Manifest"])
    ]


@pytest.mark.synth
@EXAMPLE_GROUP
def test_every_accelerator_pool_is_bootstrapped_for_serving(synth: Synthesized) -> None:
    accelerated = {p.name: p for p in EXAMPLE.node_pools if p.accelerator is not Accelerator.NONE}
    resources = synth.templates[STACK_NAME]["Resources"]
    seen = set()
    for group in synth.resources("AWS::EKS::Nodegroup").values():
        props = group["Properties"]
        pool = props["Labels"]["eks-inference.io/node-pool"]
        template_id = props["LaunchTemplate"]["Id"]["Ref"]
        data = resources[template_id]["Properties"]["LaunchTemplateData"]
        if pool not in accelerated:
            assert "UserData" not in data, pool
            continue
        user_data = data["UserData"]["Fn::Base64"]
        config = _node_config(user_data)
        _assert_bootstrapped(config, accelerated[pool])
        assert config["spec"]["instance"]["localStorage"] == {"strategy": "RAID0"}
        seen.add(pool)
    for node_class in (
        d for d in _applied(synth, "KarpenterNodePools") if d["kind"] == "EC2NodeClass"
    ):
        name = node_class["metadata"]["name"]
        assert schema_errors(crd_validator(NODE_CLASS_CRD, "v1"), node_class) == []
        if name not in accelerated:
            assert "userData" not in node_class["spec"], name
            continue
        _assert_bootstrapped(_node_config(node_class["spec"]["userData"]), accelerated[name])
        assert node_class["spec"]["instanceStorePolicy"] == "RAID0"
        seen.add(name)
    assert seen == set(accelerated)


def _nested_parameter(synth: Synthesized, path: str, value: Any) -> Any:
    """What a nested stack's ``Ref`` to a parameter is given by the parent."""
    if isinstance(value, dict) and "Ref" in value:
        for resource in synth.resources("AWS::CloudFormation::Stack").values():
            parameters = resource["Properties"].get("Parameters", {})
            if value["Ref"] in parameters and path in json.dumps(resource.get("Metadata", {})):
                return parameters[value["Ref"]]
    return value


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_file_system_sits_in_its_pools_zone_and_admits_the_nodes_only(
    synth: Synthesized,
) -> None:
    key = next(k for k in synth.templates if "llama3-8b-fsx" in k)
    nested = synth.templates[key]["Resources"]
    (file_system,) = [r for r in nested.values() if r["Type"] == "AWS::FSx::FileSystem"]
    (subnet,) = file_system["Properties"]["SubnetIds"]
    subnet = _nested_parameter(synth, "llama3-8b-fsx", subnet)
    assert subnet == {
        "Ref": next(
            k
            for k in synth.templates[STACK_NAME]["Resources"]
            if k.startswith("InferenceVpcNodesSubnet1Subnet")
        )
    }
    (association,) = [
        r for r in nested.values() if r["Type"] == "AWS::FSx::DataRepositoryAssociation"
    ]
    assert association["Properties"]["FileSystemPath"] == "/model"
    assert (
        association["Properties"]["DataRepositoryPath"]["Fn::Join"][1][-1] == "/models/llama-3-8b/"
    )
    (group_id,) = [k for k, r in nested.items() if r["Type"] == "AWS::EC2::SecurityGroup"]
    assert (
        nested[group_id]["Properties"].get("SecurityGroupEgress", [{}])[0].get("CidrIp")
        != "0.0.0.0/0"
    )
    rules = [
        r["Properties"] for r in nested.values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"
    ]
    assert rules
    assert {(r["FromPort"], r["ToPort"]) for r in rules} == LUSTRE_PORTS
    for rule in rules:
        assert "CidrIp" not in rule
        source = _nested_parameter(synth, "llama3-8b-fsx", rule["SourceSecurityGroupId"])
        own = {"Fn::GetAtt": [group_id, "GroupId"]}
        assert source == own or "ClusterSecurityGroupId" in json.dumps(source), source
    if synth.stack.platform_addons.cluster.node_provisioning.uses_karpenter:
        (node_class,) = [
            d
            for d in _applied(synth, "KarpenterNodePools")
            if d["kind"] == "EC2NodeClass" and d["metadata"]["name"] == "g6e-fsx"
        ]
        terms = node_class["spec"]["subnetSelectorTerms"]
        assert [t["tags"]["eks-inference/zone"] for t in terms] == ["0"]
    else:
        (group,) = [
            g
            for g in synth.resources("AWS::EKS::Nodegroup").values()
            if g["Properties"]["Labels"]["eks-inference.io/node-pool"] == "g6e-fsx"
        ]
        assert group["Properties"]["Subnets"] == [subnet]


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_fsx_csi_role_is_granted_nothing(synth: Synthesized) -> None:
    resources = synth.templates[STACK_NAME]["Resources"]
    (addon,) = [
        r
        for r in resources.values()
        if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == "aws-fsx-csi-driver"
    ]
    (association,) = addon["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "fsx-csi-controller-sa"
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    assert "ManagedPolicyArns" not in resources[role_id]["Properties"]
    assert "Policies" not in resources[role_id]["Properties"]
    policies = [
        resource
        for template in synth.templates.values()
        for resource in template["Resources"].values()
        if resource["Type"] in {"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"}
    ]
    for resource in found(policies):
        assert role_id not in json.dumps(resource["Properties"].get("Roles", [])), resource


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_servers_of_the_image_and_fsx_loaders_have_no_aws_identity(synth: Synthesized) -> None:
    for name in ("qwen25-1b5-image", "llama3-8b-fsx"):
        deployment = synth.stack.deployments[name]
        assert deployment.server_identity is None, name
        assert deployment.mountpoint_prefixes == (), name
