"""The EKS cluster: version, encryption, logging, endpoint, access and outputs."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App
from aws_cdk.assertions import Match
from constructs import Construct

from eks_inference import versions
from eks_inference.constructs.kubectl_layer import kubectl_layer, kubernetes_release
from tests.helpers.synthesis import Synthesized

LOG_TYPES = ["api", "audit", "authenticator", "controllerManager", "scheduler"]


def test_every_supported_version_pins_its_components() -> None:
    for version, release in versions.KUBERNETES_RELEASES.items():
        minor = version.split(".")[1]
        assert release.kubectl_layer_module.endswith(f"kubectl_v{minor}")
        assert release.cluster_autoscaler_image_tag.startswith(f"v{version}.")
        assert release.kube_scheduler_image_tag.startswith(f"v{version}.")
    assert versions.KUBERNETES_VERSION in versions.KUBERNETES_RELEASES


def test_unsupported_kubernetes_version_is_a_clear_error() -> None:
    with pytest.raises(
        ValueError, match=r"'1\.29' is not supported; use one of 1\.33, 1\.34, 1\.35"
    ):
        kubernetes_release("1.29")


def test_missing_kubectl_layer_package_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    release = versions.KubernetesRelease(
        kubectl_layer_module="aws_cdk.lambda_layer_kubectl_v99",
        kubectl_layer_class="KubectlV99Layer",
        cluster_autoscaler_image_tag="v1.99.0",
        kube_scheduler_image_tag="v1.99.0-eks-1-99-1",
    )
    monkeypatch.setitem(versions.KUBERNETES_RELEASES, "1.99", release)
    with pytest.raises(ValueError, match=r"pip install aws-cdk\.lambda-layer-kubectl-v99"):
        kubectl_layer(Construct(App(), "Scope"), "Layer", "1.99")


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_native_cluster_at_1_35_with_encrypted_secrets_and_all_logs(
    reference: Synthesized,
) -> None:
    template = reference.template
    template.resource_count_is("AWS::EKS::Cluster", 1)
    template.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "Name": "eks-inference",
            "Version": "1.35",
            "EncryptionConfig": [
                {"Provider": {"KeyArn": Match.any_value()}, "Resources": ["secrets"]}
            ],
            "Logging": {"ClusterLogging": {"EnabledTypes": [{"Type": t} for t in LOG_TYPES]}},
            "AccessConfig": Match.object_like(
                {"AuthenticationMode": "API", "BootstrapClusterCreatorAdminPermissions": False}
            ),
            # Private unless public_access_cidrs opens it to named networks.
            "ResourcesVpcConfig": Match.object_like(
                {"EndpointPublicAccess": False, "EndpointPrivateAccess": True}
            ),
        },
    )
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_the_vpc_cni_has_its_own_identity_and_nodes_lack_its_policy(
    reference: Synthesized,
) -> None:
    roles = reference.resources("AWS::IAM::Role")
    node_roles = [r for r in roles.values() if "ec2.amazonaws.com" in json.dumps(r)]
    assert node_roles
    for role in node_roles:
        assert "AmazonEKS_CNI_Policy" not in json.dumps(role["Properties"])
    (cni,) = [
        a["Properties"]
        for a in reference.resources("AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == "vpc-cni"
    ]
    assert cni["AddonVersion"] == versions.VPC_CNI_ADDON_VERSION
    assert cni["ResolveConflicts"] == "OVERWRITE"
    (association,) = cni["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "aws-node"
    cni_role = roles[association["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    assert "AmazonEKS_CNI_Policy" in json.dumps(cni_role["ManagedPolicyArns"])
    assert "pods.eks.amazonaws.com" in json.dumps(cni_role["AssumeRolePolicyDocument"])


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_no_default_capacity_and_no_bundled_neuron_plugin(reference: Synthesized) -> None:
    # Only our three pools; add_nodegroup_capacity's bundled Neuron plugin would be a manifest.
    reference.template.resource_count_is("AWS::EKS::Nodegroup", 3)
    manifests = reference.resources("Custom::AWSCDK-EKS-KubernetesResource")
    assert manifests
    assert "neuron-device-plugin" not in str(manifests)


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_kubectl_provider_uses_the_matching_layer(reference: Synthesized) -> None:
    layers = reference.resources("AWS::Lambda::LayerVersion")
    descriptions = " ".join(
        str(layer["Properties"].get("Description", "")) for layer in layers.values()
    )
    assert "kubectl" in descriptions.lower()
    reference.template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Description": "onEvent handler for EKS kubectl resource provider",
            "VpcConfig": Match.any_value(),
        },
    )


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_inference_namespace_is_applied(reference: Synthesized) -> None:
    namespaces = [
        str(m["Properties"]["Manifest"])
        for m in reference.resources("Custom::AWSCDK-EKS-KubernetesResource").values()
        if '"kind":"Namespace"' in str(m["Properties"]["Manifest"])
    ]
    # The inference namespace, and the monitoring namespace the observability add-on owns.
    assert len(namespaces) == 2
    assert sum('"name":"inference"' in rendered for rendered in namespaces) == 1


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_outputs_name_the_cluster_and_the_kubeconfig_command(reference: Synthesized) -> None:
    outputs = reference.templates["InferenceStack"]["Outputs"]
    values = [str(o["Value"]) for o in outputs.values()]
    assert any("update-kubeconfig --name" in v and "AWS::Region" in v for v in values)
    assert any(v.startswith("{'Ref': 'InferenceCluster") for v in values)


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_vpc_spans_three_zones_with_private_node_subnets(reference: Synthesized) -> None:
    subnets = reference.resources("AWS::EC2::Subnet")
    private = [s for s in subnets.values() if s["Properties"]["MapPublicIpOnLaunch"] is False]
    assert len(private) == 3
    reference.template.resource_count_is("AWS::EC2::NatGateway", 3)
    reference.template.has_resource_properties(
        "AWS::EC2::VPCEndpoint", {"VpcEndpointType": "Gateway"}
    )
    reference.template.resource_count_is("AWS::EC2::FlowLog", 1)


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_the_vpc_cni_enforces_network_policies_and_the_namespace_denies_by_default(
    reference: Synthesized,
) -> None:
    """Without the agent the API server keeps NetworkPolicies and nothing enforces them."""
    (cni,) = [
        a["Properties"]
        for a in reference.resources("AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == "vpc-cni"
    ]
    assert json.loads(cni["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}
    namespace_manifests = [
        json.loads(m["Properties"]["Manifest"])
        for logical_id, m in reference.resources("Custom::AWSCDK-EKS-KubernetesResource").items()
        if "InferenceNamespace" in logical_id
    ]
    (objects,) = namespace_manifests
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert policy["metadata"]["namespace"] == "inference"
    assert policy["spec"]["podSelector"] == {}
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == []
    assert policy["spec"]["egress"] == []
