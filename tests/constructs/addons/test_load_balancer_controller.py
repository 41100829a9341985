"""The endpoint's platform side: the AWS Load Balancer Controller with its scoped published
policy (on its Pod Identity role only), the API key and its operator, subnet tags, ordering,
and the stack's outputs. Assertions on the reference app read the session's one synthesis."""

from __future__ import annotations

import json
from typing import Any

import pytest

from eks_inference import names, versions
from eks_inference.constructs.addons.load_balancer_controller import (
    CLUSTER_TAG,
    SERVICE_ACCOUNT,
    published_policy,
    scoped_policy,
)
from eks_inference.constructs.cluster import (
    INTERNAL_LOAD_BALANCER_SUBNET_TAG,
    PUBLIC_LOAD_BALANCER_SUBNET_TAG,
)
from eks_inference.specification.routes import api_key_secret_name
from tests.helpers.checks import found
from tests.helpers.synthesis import STACK_NAME, Synthesized

synth = [pytest.mark.synth, pytest.mark.xdist_group("synth")]
SCOPE = {
    "partition": "aws",
    "region": "us-east-1",
    "account": "111122223333",
    "cluster_name": "prod",
    "vpc_id": "vpc-0abc",
}
UNUSED = ("waf-regional:", "wafv2:", "shield:", "cognito-idp:", "elasticloadbalancing:SetWebAcl")


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def _resources(statement: dict[str, Any]) -> list[Any]:
    resource = statement["Resource"]
    return resource if isinstance(resource, list) else [resource]


# -- the published policy and how it is scoped (no synthesis) ---------------------------------


def test_the_published_policy_is_kept_with_its_source_and_version() -> None:
    document = published_policy()
    assert document["version"] == versions.AWS_LOAD_BALANCER_CONTROLLER_IMAGE_TAG
    assert document["source"] == (
        "https://github.com/kubernetes-sigs/aws-load-balancer-controller/blob/"
        f"{versions.AWS_LOAD_BALANCER_CONTROLLER_IMAGE_TAG}/docs/install/iam_policy.json"
    )
    assert f"{document['version'].removeprefix('v')}" == (
        versions.AWS_LOAD_BALANCER_CONTROLLER_CHART.version
    )
    assert document["policy"]["Version"] == "2012-10-17"


def test_scoping_keeps_every_action_the_controller_calls_and_drops_the_rest() -> None:
    published = published_policy()["policy"]
    scoped = scoped_policy(published, **SCOPE)
    before = {a for s in published["Statement"] for a in _actions(s)}
    after = {a for s in scoped["Statement"] for a in _actions(s)}
    assert after == {a for a in before if not a.startswith(UNUSED)}
    assert before - after >= {"wafv2:AssociateWebACL", "shield:CreateProtection"}


def test_changes_are_scoped_to_this_account_region_vpc_and_cluster() -> None:
    scoped = scoped_policy(published_policy()["policy"], **SCOPE)
    cluster_conditions = 0
    for statement in scoped["Statement"]:
        actions = _actions(statement)
        read_only = all(a.split(":")[1].startswith(("Describe", "Get", "List")) for a in actions)
        for resource in _resources(statement):
            if resource == "*":
                assert read_only, actions
                continue
            assert resource.startswith("arn:aws:"), resource
            service, region, account = resource.split(":")[2:5]
            assert account == "111122223333", resource
            assert region == ("" if service == "iam" else "us-east-1"), resource
        for operator, entries in statement.get("Condition", {}).items():
            for key, value in entries.items():
                if key.endswith(CLUSTER_TAG) and operator != "Null":
                    assert (operator, value) == ("StringEquals", "prod")
                    cluster_conditions += 1
                if operator == "Null":
                    # Only "this request must not set the cluster tag" stays a Null check.
                    assert (key, value) == (f"aws:RequestTag/{CLUSTER_TAG}", "true")
    assert cluster_conditions
    creating = [s for s in scoped["Statement"] if "ec2:CreateSecurityGroup" in _actions(s)]
    (create,) = creating
    assert "arn:aws:ec2:us-east-1:111122223333:vpc/vpc-0abc" in _resources(create)
    deleting = [
        s for s in scoped["Statement"] if "elasticloadbalancing:DeleteLoadBalancer" in _actions(s)
    ]
    (delete,) = deleting
    assert delete["Condition"] == {"StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": "prod"}}


def test_an_unreviewed_statement_on_everything_fails() -> None:
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["s3:PutObject"], "Resource": "*"}],
    }
    with pytest.raises(ValueError, match="review the policy"):
        scoped_policy(policy, **SCOPE)


# -- the reference app ------------------------------------------------------------------------


def _policies(reference: Synthesized) -> dict[str, dict[str, Any]]:
    policies: dict[str, dict[str, Any]] = {}
    for key, logical_id, resource in reference.all_resources("AWS::IAM::Policy"):
        policies[f"{key}/{logical_id}"] = resource
    return policies


def _controller_role(reference: Synthesized) -> str:
    (association,) = [
        r["Properties"]
        for r in reference.resources("AWS::EKS::PodIdentityAssociation").values()
        if r["Properties"]["ServiceAccount"] == SERVICE_ACCOUNT
    ]
    assert association["Namespace"] == "kube-system"
    role: str = association["RoleArn"]["Fn::GetAtt"][0]
    return role


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_the_controllers_policy_is_attached_to_its_pod_identity_role_only(
    reference: Synthesized,
) -> None:
    role = _controller_role(reference)
    holding = {
        name: policy
        for name, policy in _policies(reference).items()
        if "elasticloadbalancing:CreateLoadBalancer"
        in json.dumps(policy["Properties"]["PolicyDocument"])
    }
    (policy,) = holding.values()
    assert policy["Properties"]["Roles"] == [{"Ref": role}]
    assert "Users" not in policy["Properties"]
    assert "Groups" not in policy["Properties"]
    role_resource = reference.templates[STACK_NAME]["Resources"][role]
    assert "ManagedPolicyArns" not in role_resource["Properties"]
    assert "Policies" not in role_resource["Properties"]
    trust = json.dumps(role_resource["Properties"]["AssumeRolePolicyDocument"])
    assert "pods.eks.amazonaws.com" in trust
    assert "sts:TagSession" in trust
    # No other policy of any template grants the controller's load-balancer actions.
    others = [(name, other) for name, other in _policies(reference).items() if other is not policy]
    for name, other in found(others):
        assert "elasticloadbalancing:" not in json.dumps(other["Properties"]), name
    # Nor does a managed policy (the reference app has none).
    granting = [
        key
        for key, _, managed in reference.all_resources("AWS::IAM::ManagedPolicy")
        if "elasticloadbalancing:Create" in json.dumps(managed["Properties"])
    ]
    assert granting == []


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_the_controller_release_is_pinned_configured_and_ordered(reference: Synthesized) -> None:
    (chart_id, chart) = next(
        (logical_id, r)
        for logical_id, r in reference.resources("Custom::AWSCDK-EKS-HelmChart").items()
        if r["Properties"]["Chart"] == versions.AWS_LOAD_BALANCER_CONTROLLER_CHART.chart
    )
    props = chart["Properties"]
    assert props["Version"] == versions.AWS_LOAD_BALANCER_CONTROLLER_CHART.version
    assert props["Repository"] == versions.AWS_LOAD_BALANCER_CONTROLLER_CHART.repository
    assert props["Namespace"] == "kube-system"
    assert props["Wait"] is True
    values = json.dumps(props["Values"])
    for expected in (
        f'\\"tag\\":\\"{versions.AWS_LOAD_BALANCER_CONTROLLER_IMAGE_TAG}\\"',
        '\\"clusterName\\":\\"eks-inference\\"',
        '\\"enableWafv2\\":false',
        '\\"enableShield\\":false',
        '\\"enableServiceMutatorWebhook\\":false',
        f'\\"ingressClass\\":\\"{names.ALB_INGRESS_CLASS}\\"',
        '\\"vpcId\\":\\"',
    ):
        assert expected in values, expected
    depends = chart["DependsOn"]
    assert any("ControllerAssociation" in d for d in depends)
    assert any("Poolsystem" in d and "Nodegroup" in d for d in depends)
    # Every deployment's nested stack (its Ingress) is created after, deleted before, it.
    stacks = reference.resources("AWS::CloudFormation::Stack")
    assert stacks
    for stack in stacks.values():
        assert chart_id in stack["DependsOn"]


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_the_api_key_is_generated_and_only_the_operator_reads_it(reference: Synthesized) -> None:
    (secret_id, secret) = next(iter(reference.resources("AWS::SecretsManager::Secret").items()))
    props = secret["Properties"]
    assert props["Name"] == api_key_secret_name("eks-inference")
    assert props["GenerateSecretString"]["ExcludePunctuation"] is True
    assert props["GenerateSecretString"]["PasswordLength"] >= 32
    readers = [
        p
        for p in _policies(reference).values()
        if "secretsmanager:GetSecretValue" in json.dumps(p["Properties"]["PolicyDocument"])
    ]
    (reader,) = readers
    (statement,) = reader["Properties"]["PolicyDocument"]["Statement"]
    assert sorted(_actions(statement)) == [
        "secretsmanager:DescribeSecret",
        "secretsmanager:GetSecretValue",
    ]
    assert statement["Resource"] == {"Ref": secret_id}
    (association,) = [
        r["Properties"]
        for r in reference.resources("AWS::EKS::PodIdentityAssociation").values()
        if r["Properties"]["Namespace"] == "external-secrets"
    ]
    assert reader["Properties"]["Roles"] == [{"Ref": association["RoleArn"]["Fn::GetAtt"][0]}]
    (operator,) = [
        r
        for r in reference.resources("Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Chart"] == versions.EXTERNAL_SECRETS_CHART.chart
    ]
    assert operator["Properties"]["Version"] == versions.EXTERNAL_SECRETS_CHART.version
    # Nothing resolves the key into a template or a manifest.
    assert "resolve:secretsmanager" not in json.dumps(reference.templates)


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_servers_wait_for_the_synced_key(reference: Synthesized) -> None:
    manifests = {
        logical_id: r
        for logical_id, r in reference.resources("Custom::AWSCDK-EKS-KubernetesResource").items()
        if "ExternalSecret" in json.dumps(r["Properties"]["Manifest"])
    }
    (synced_id,) = manifests
    for stack in found(reference.resources("AWS::CloudFormation::Stack").values()):
        assert synced_id in stack["DependsOn"]


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_new_subnets_are_tagged_for_load_balancers(reference: Synthesized) -> None:
    public, private = [], []
    for resource in reference.resources("AWS::EC2::Subnet").values():
        tags = {t["Key"]: t["Value"] for t in resource["Properties"]["Tags"]}
        kind = tags["aws-cdk:subnet-type"]
        (public if kind == "Public" else private).append(tags)
    assert public
    assert private
    assert all(t.get(PUBLIC_LOAD_BALANCER_SUBNET_TAG) == "1" for t in public)
    assert all(INTERNAL_LOAD_BALANCER_SUBNET_TAG not in t for t in public)
    assert all(t.get(INTERNAL_LOAD_BALANCER_SUBNET_TAG) == "1" for t in private)
    assert all(PUBLIC_LOAD_BALANCER_SUBNET_TAG not in t for t in private)


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_the_stack_prints_each_base_url_and_how_to_get_the_key(reference: Synthesized) -> None:
    outputs = reference.templates[STACK_NAME]["Outputs"]
    lookups = reference.resources("Custom::AWSCDK-EKS-KubernetesObjectValue")
    (lookup_id, lookup) = next(iter(lookups.items()))
    assert lookup["Properties"]["ObjectType"] == "ingress"
    assert lookup["Properties"]["JsonPath"] == ".status.loadBalancer.ingress[0].hostname"
    urls = {
        o["Description"].rsplit(" ", 1)[-1]: o["Value"]
        for o in outputs.values()
        if o.get("Description", "").startswith("OpenAI-compatible base URL")
    }
    assert set(urls) == {"llama3-8b-inf2", "mistral-7b-g6e", "qwen25-7b-g6e"}
    for name, value in urls.items():
        assert value == {
            "Fn::Join": ["", ["http://", {"Fn::GetAtt": [lookup_id, "Value"]}, f"/{name}/v1"]]
        }
    (command,) = [o for o in outputs.values() if "API key" in o.get("Description", "")]
    assert api_key_secret_name("eks-inference") in json.dumps(command["Value"])


# -- a deployment of another app: what an exposed one must be handed ---------------------------


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_an_exposed_deployment_needs_the_controller_and_the_key() -> None:
    from aws_cdk import App, Stack

    from eks_inference.constructs import (
        ApiKeys,
        InferenceAddons,
        InferenceCluster,
        LoadBalancerController,
        ModelBucket,
        ModelDeployment,
    )
    from eks_inference.specification.platform import PlatformSpec
    from tests.helpers.platforms import REFERENCE_PLATFORM

    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    spec = platform.deployment("mistral-7b-g6e")
    route = platform.route(spec)
    stack = Stack(App(), "Serving")
    cluster = InferenceCluster(
        stack, "Cluster", cluster_name="serving", node_pools=platform.node_pools
    )
    bucket = ModelBucket(stack, "Models")
    addons = InferenceAddons(cluster, "Addons", cluster=cluster, model_bucket=bucket)
    common: dict[str, Any] = {
        "platform": addons.platform,
        "bucket": bucket,
        "spec": spec,
        "placement": platform.placement(spec),
        "region": "us-east-1",
        "route": route,
    }
    with pytest.raises(ValueError, match=r"Secret inference/.*add ApiKeys"):
        ModelDeployment(stack, "WithoutKey", **common)
    api_keys = ApiKeys(cluster, "ApiKeys", platform=addons.platform)
    with pytest.raises(ValueError, match=r"IngressClass 'alb'.*add LoadBalancerController"):
        ModelDeployment(stack, "WithoutController", **common)
    controller = LoadBalancerController(cluster, "Controller", platform=addons.platform)
    deployment = ModelDeployment(stack, "Exposed", **common)
    # The servers wait for their key, the Ingress for its controller.
    assert api_keys.manifest in deployment.manifest.node.dependencies
    assert controller.chart in deployment.manifest.node.dependencies
    with pytest.raises(ValueError, match="route of deployment 'mistral-7b-g6e' given for"):
        ModelDeployment(
            stack, "WrongRoute", **{**common, "spec": platform.deployment("qwen25-7b-g6e")}
        )
