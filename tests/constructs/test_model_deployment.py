"""ModelDeployment: least-privilege IAM, Pod Identity, apply order and the shared image asset.

Assertions are made on the synthesized templates of the reference app (its deployments each
live in a nested stack), resolved to plain strings where they carry tokens.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from fnmatch import fnmatchcase
from itertools import groupby
from pathlib import Path
from typing import cast

import pytest
from aws_cdk import App, CfnElement, Environment, Stack, Token
from constructs import IConstruct

from eks_inference import names
from eks_inference.constructs import (
    InferenceAddons,
    InferenceCluster,
    ModelBucket,
    ModelDeployment,
    NeuronRayImage,
)
from eks_inference.serve.image import neuron_ray_build_args, neuron_ray_image_hash
from eks_inference.specification.artifacts import artifact_prefix
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.platform import Placement, PlatformSpec
from eks_inference.stacks import register_nag
from tests.helpers.deployed import DeployedDeployment, Statement, deployed, statements
from tests.helpers.platforms import REFERENCE_PLATFORM
from tests.helpers.synthesis import STACK_NAME, Synthesized, cdk_context

PLATFORM = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
BUCKET_ARN = f"arn:aws:s3:::{PLATFORM.model_bucket_name}"
NEURON = "llama3-8b-inf2"  # RayService on Inferentia2, Mountpoint, compiled artifacts
STREAMER = "mistral-7b-g6e"  # standalone vLLM on L40S, Run:ai streamer
RAY_GPU = "qwen25-7b-g6e"  # RayService on L40S, Mountpoint
READ_ACTIONS = frozenset({"s3:GetObject", "s3:ListBucket"})
S3_WRITE_ACTIONS = (
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
    "s3:AbortMultipartUpload",
    "s3:PutObjectAcl",
    "s3:RestoreObject",
)


def synth(test: Callable[..., None]) -> Callable[..., None]:
    """Mark a test that synthesizes (directly or through the session fixture)."""
    marked: Callable[..., None] = pytest.mark.synth(pytest.mark.xdist_group("synth")(test))
    return marked


class RegionalStack(Stack):
    """A stack in a fixed region whose availability zones are given, so none is looked up."""

    @property
    def availability_zones(self) -> list[str]:
        return [f"{self.region}a", f"{self.region}b"]


@pytest.fixture(scope="module")
def deployments(reference: Synthesized) -> dict[str, DeployedDeployment]:
    return deployed(reference, PLATFORM)


@pytest.fixture(scope="module")
def all_statements(
    reference: Synthesized, deployments: dict[str, DeployedDeployment]
) -> list[Statement]:
    resolvers = {d.key: d.resolve for d in deployments.values()}
    return list(statements(reference, PLATFORM, resolvers))


def _role_id(deployment: DeployedDeployment, description_start: str) -> str:
    (role_id,) = (
        logical_id
        for logical_id, role in deployment.resources("AWS::IAM::Role").items()
        if role["Properties"]["Description"].startswith(description_start)
    )
    return role_id


def _of_role(all_statements: list[Statement], template: str, role: str) -> list[Statement]:
    return [s for s in all_statements if s.template == template and s.role == role]


def _mountpoint_role(reference: Synthesized) -> str:
    (role_id,) = (k for k in reference.resources("AWS::IAM::Role") if "MountpointRole" in k)
    return role_id


def _allows(statement: Statement, action: str) -> bool:
    return statement.effect == "Allow" and any(
        fnmatchcase(action.lower(), pattern.lower()) for pattern in statement.actions
    )


def _covers(statement: Statement, arn: str) -> bool:
    return any(fnmatchcase(arn, resource) for resource in statement.resources)


@synth
def test_streamer_role_reads_only_its_weights_prefix(
    deployments: dict[str, DeployedDeployment], all_statements: list[Statement]
) -> None:
    deployment = deployments[STREAMER]
    role = _role_id(deployment, f"Model servers of {STREAMER}")
    prefix = PLATFORM.deployment(STREAMER).weights.prefix
    granted = {
        (tuple(sorted(s.actions)), s.resources, json.dumps(s.conditions, sort_keys=True))
        for s in _of_role(all_statements, deployment.key, role)
    }
    assert granted == {
        (
            ("s3:ListBucket",),
            (BUCKET_ARN,),
            json.dumps({"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}}, sort_keys=True),
        ),
        (("s3:GetObject",), (f"{BUCKET_ARN}/{prefix}*",), "{}"),
    }
    trust = deployment.template["Resources"][role]["Properties"]["AssumeRolePolicyDocument"]
    (statement,) = trust["Statement"]
    # This cluster's pods only (tests/stacks/test_least_privilege.py).
    assert set(statement["Condition"]["StringEquals"]) == {
        "aws:SourceAccount",
        "aws:RequestTag/eks-cluster-arn",
    }
    assert {k: v for k, v in statement.items() if k != "Condition"} == {
        "Action": ["sts:AssumeRole", "sts:TagSession"],
        "Effect": "Allow",
        "Principal": {"Service": "pods.eks.amazonaws.com"},
    }


@synth
def test_compile_role_is_the_only_writer_of_the_artifact_key(
    reference: Synthesized,
    deployments: dict[str, DeployedDeployment],
    all_statements: list[Statement],
) -> None:
    deployment = deployments[NEURON]
    key = artifact_prefix(PLATFORM.deployment(NEURON))
    compile_role = _role_id(deployment, f"Neuron compile job of {NEURON}")
    artifact = f"{BUCKET_ARN}/{key}model.pt"
    writers = {
        (s.template, s.role)
        for s in all_statements
        for action in S3_WRITE_ACTIONS
        if _allows(s, action) and _covers(s, artifact)
    }
    assert writers == {(deployment.key, compile_role)}
    own = _of_role(all_statements, deployment.key, compile_role)
    assert [(sorted(s.actions), s.resources) for s in own] == [
        (["s3:AbortMultipartUpload", "s3:PutObject"], (f"{BUCKET_ARN}/{key}*",))
    ]
    # Nothing else in the bucket is writable by it: not the weights, not other keys.
    assert not any(_covers(s, f"{BUCKET_ARN}/neuron-artifacts/other/model.pt") for s in own)


@synth
def test_serving_and_mountpoint_roles_only_read(
    reference: Synthesized,
    deployments: dict[str, DeployedDeployment],
    all_statements: list[Statement],
) -> None:
    readers = [(STACK_NAME, _mountpoint_role(reference))]
    readers += [
        (d.key, _role_id(d, f"Model servers of {d.name}"))
        for d in deployments.values()
        if PLATFORM.deployment(d.name).weights.loader == "runai_streamer"
    ]
    for template, role in readers:
        granted = _of_role(all_statements, template, role)
        assert granted, role
        for statement in granted:
            assert statement.actions <= READ_ACTIONS, (role, statement)
            assert all(r.startswith(BUCKET_ARN) for r in statement.resources), statement


@synth
def test_pod_identity_associations_name_the_deployment_service_accounts(
    reference: Synthesized, deployments: dict[str, DeployedDeployment]
) -> None:
    (cluster,) = reference.resources("AWS::EKS::Cluster")
    found = {}
    for deployment in deployments.values():
        for association in deployment.resources("AWS::EKS::PodIdentityAssociation").values():
            props = association["Properties"]
            role = props["RoleArn"]["Fn::GetAtt"][0]
            assert role in deployment.template["Resources"], "the role of its own nested stack"
            parameter = props["ClusterName"]["Ref"]
            passed = deployment.stack_resource["Properties"]["Parameters"][parameter]
            assert passed == {"Ref": cluster}
            found[(props["Namespace"], props["ServiceAccount"])] = (deployment.name, role)
    assert set(found) == {
        (names.INFERENCE_NAMESPACE, names.service_account_name(STREAMER)),
        (names.INFERENCE_NAMESPACE, names.compile_service_account_name(NEURON)),
    }
    # The streamer's pods run as the associated service account.
    (pod_deployment,) = (
        o
        for _, objects in deployments[STREAMER].manifests()
        for o in objects
        if o["kind"] == "Deployment"
    )
    assert pod_deployment["spec"]["template"]["spec"]["serviceAccountName"] == (
        names.service_account_name(STREAMER)
    )


@synth
def test_charts_are_applied_in_order_after_what_they_need(
    reference: Synthesized, deployments: dict[str, DeployedDeployment]
) -> None:
    parent = reference.templates[STACK_NAME]["Resources"]

    def parent_ids(fragment: str) -> set[str]:
        return {k for k in parent if fragment in k}

    kuberay = parent_ids("KubeRayOperator")
    mountpoint = parent_ids("MountpointS3Csi") | parent_ids("MountpointRole")
    always = parent_ids("InferenceNamespace") | parent_ids("KubectlReadyBarrier")
    agent = parent_ids("PodIdentityAgent")
    for ids in (kuberay, mountpoint, always, agent):
        assert ids
    # Monitoring last: after the pods it scrapes (and the CRDs of kube-prometheus-stack).
    expected_roles = {
        NEURON: [
            "network-policy",
            "model-weights",
            "neuron-artifacts",
            "rayservice",
            "monitoring",
            "endpoint",
        ],
        STREAMER: ["network-policy", "vllm", "monitoring", "endpoint"],
        RAY_GPU: ["network-policy", "model-weights", "rayservice", "monitoring", "endpoint"],
    }
    for name, deployment in deployments.items():
        spec = PLATFORM.deployment(name)
        depends_on = set(deployment.stack_resource["DependsOn"])
        assert always <= depends_on, name
        assert (kuberay <= depends_on) == (spec.engine == "rayservice"), name
        assert (mountpoint <= depends_on) == (spec.weights.loader == "mountpoint"), name
        has_identity = bool(deployment.resources("AWS::EKS::PodIdentityAssociation"))
        assert (agent <= depends_on) == has_identity, name

        # One manifest resource holds every object, chart after chart.
        ((logical_id, objects),) = deployment.manifests()
        roles = [o["metadata"]["labels"][names.COMPONENT_LABEL] for o in objects]
        assert [role for role, _ in groupby(roles)] == expected_roles[name]
        manifest = deployment.resources("Custom::AWSCDK-EKS-KubernetesResource")[logical_id]
        assert manifest["Properties"]["Overwrite"] is True
        if name == STREAMER:
            associations = deployment.resources("AWS::EKS::PodIdentityAssociation")
            assert set(associations) <= set(manifest["DependsOn"])


@synth
def test_neuron_ray_image_is_one_staged_asset_tagged_with_its_source_hash(
    reference: Synthesized,
) -> None:
    assets = json.loads((reference.outdir / f"{STACK_NAME}.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    assert image["source"]["dockerBuildArgs"] == neuron_ray_build_args()
    context = reference.outdir / image["source"]["directory"]
    assert (context / "Dockerfile").is_file(), "the build context is staged into cdk.out"
    (destination,) = image["destinations"].values()
    assert destination["imageTag"] == neuron_ray_image_hash()


@synth
def test_another_app_can_apply_deployments_in_its_own_stack(tmp_path: Path) -> None:
    """No nested stacks: two deployments beside the cluster, one applying its compile job."""
    app = App(context=cdk_context(), outdir=str(tmp_path))
    stack = RegionalStack(app, "Serving", env=Environment(region="eu-west-1"))
    system = NodePool(name="system", instance_types=("m6i.xlarge",), min_size=1)
    gpu = NodePool(name="gpu", instance_types=("g6e.2xlarge",), max_size=2)
    inf2 = NodePool(name="inf2", instance_types=("inf2.48xlarge",), max_size=2)
    cluster = InferenceCluster(
        stack,
        "Cluster",
        cluster_name="serving",
        node_pools=[system, gpu, inf2],
        availability_zones=stack.availability_zones,
    )
    bucket = ModelBucket(stack, "Models")
    addons = InferenceAddons(cluster, "Addons", cluster=cluster, model_bucket=bucket)
    streamer = ModelDeployment(
        stack,
        "Mistral",
        platform=addons.platform,
        bucket=bucket,
        spec=PLATFORM.deployment(STREAMER),
        placement=Placement(workers=gpu, head=system),
    )
    reference_neuron = PLATFORM.deployment(NEURON)
    compiling = ModelDeploymentSpec.model_validate(
        {
            **reference_neuron.model_dump(),
            "neuron": {**reference_neuron.neuron_options.model_dump(), "run_compile_job": True},
        }
    )
    neuron = ModelDeployment(
        stack,
        "Llama",
        platform=addons.platform,
        bucket=bucket,
        spec=compiling,
        placement=Placement(workers=inf2, head=system),
    )
    assert streamer.region == neuron.region == "eu-west-1"
    assert streamer.neuron_ray_image is None
    assert neuron.neuron_ray_image == NeuronRayImage.of(stack).image_uri
    assert streamer.server_identity is not None
    assert streamer.compile_identity is None
    assert neuron.server_identity is None
    assert neuron.compile_identity is not None
    assert [c.chart_id for c in neuron.charts] == [
        f"{NEURON}-network-policy",
        f"{NEURON}-model-weights",
        f"{NEURON}-neuron-artifacts",
        f"{NEURON}-rayservice",
        f"{NEURON}-compile-job",
    ]
    register_nag(app)
    template = app.synth().get_stack_by_name("Serving").template
    resources = template["Resources"]

    def logical_id(construct: IConstruct) -> str:
        element = construct if isinstance(construct, CfnElement) else construct.node.default_child
        return stack.get_logical_id(cast(CfnElement, element))

    # The compile job is applied with the rest, after its identity's association.
    objects = resources[logical_id(neuron.manifest.resource)]
    assert logical_id(neuron.compile_identity.association) in objects["DependsOn"]
    job = json.dumps(objects["Properties"]["Manifest"])
    assert names.compile_service_account_name(NEURON) in job
    assert '\\"kind\\":\\"Job\\"' in job
    # The namespace and one manifest per deployment, all in this one template.
    manifests = [
        r for r in resources.values() if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    ]
    assert len(manifests) == 1 + 2
    assert "region eu-west-1" in json.dumps(manifests)
    report = json.loads((tmp_path / "validation-report.json").read_text())
    assert [v for r in report["pluginReports"] for v in r.get("violations", [])] == []


def _cluster_stack(
    region: str | None,
) -> tuple[Stack, InferenceCluster, InferenceAddons, ModelBucket, NodePool]:
    stack = (
        RegionalStack(App(), "Checks", env=Environment(region=region))
        if region
        else Stack(App(), "Checks")
    )
    system = NodePool(name="system", instance_types=("m6i.xlarge",), min_size=1)
    gpu = NodePool(name="gpu", instance_types=("g6e.2xlarge",), max_size=2)
    cluster = InferenceCluster(
        stack,
        "Cluster",
        cluster_name="checks",
        node_pools=[system, gpu],
        availability_zones=stack.availability_zones if region else None,
    )
    bucket = ModelBucket(stack, "Models")
    addons = InferenceAddons(cluster, "Addons", cluster=cluster, model_bucket=bucket)
    return stack, cluster, addons, bucket, gpu


def test_region_must_be_literal_and_agree_with_the_stack() -> None:
    spec = PLATFORM.deployment(STREAMER)
    stack, cluster, addons, bucket, gpu = _cluster_stack(None)
    placement = Placement(workers=gpu, head=cluster.system_pool)
    with pytest.raises(ValueError, match="needs a literal region"):
        ModelDeployment(
            stack,
            "NoRegion",
            platform=addons.platform,
            bucket=bucket,
            spec=spec,
            placement=placement,
        )
    with pytest.raises(ValueError, match="must be a literal string"):
        ModelDeployment(
            stack,
            "TokenRegion",
            platform=addons.platform,
            bucket=bucket,
            spec=spec,
            placement=placement,
            region=Token.as_string(stack.region),
        )
    stack, cluster, addons, bucket, gpu = _cluster_stack("eu-west-1")
    with pytest.raises(ValueError, match="differs from the stack's region 'eu-west-1'"):
        ModelDeployment(
            stack,
            "OtherRegion",
            platform=addons.platform,
            bucket=bucket,
            spec=spec,
            placement=Placement(workers=gpu, head=cluster.system_pool),
            region="us-east-1",
        )


def test_placement_must_use_the_cluster_pools() -> None:
    spec = PLATFORM.deployment(STREAMER)
    stack, cluster, addons, bucket, _ = _cluster_stack("us-east-1")
    other = NodePool(name="gpu", instance_types=("g6e.2xlarge",), max_size=9)
    with pytest.raises(ValueError, match="differs from the cluster's pool of that name"):
        ModelDeployment(
            stack,
            "Elsewhere",
            platform=addons.platform,
            bucket=bucket,
            spec=spec,
            placement=Placement(workers=other, head=cluster.system_pool),
        )
