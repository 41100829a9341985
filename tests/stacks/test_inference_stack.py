"""The stack as a whole: lint-clean, nag-clean, pinned, reusable and synthesizable offline."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from eks_inference.constructs import InferenceAddons, InferenceCluster, ModelBucket
from eks_inference.specification.artifacts import artifact_prefix
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.platform import PlatformSpec
from eks_inference.stacks import build_app, register_nag
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO
from tests.helpers.synthesis import Synthesized, cdk_context, lint_all

# `latest` as a tag or version, not as part of a word such as LatestVersionNumber.
LATEST = re.compile(r"(?<![A-Za-z])latest(?![A-Za-z])")


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_mountpoint_prefixes_come_from_the_platform(reference: Synthesized) -> None:
    neuron = PlatformSpec.from_yaml(REFERENCE_PLATFORM).deployment("llama3-8b-inf2")
    assert reference.stack.mountpoint_prefixes == (
        "models/llama-3-8b/",
        "models/qwen2.5-7b/",
        artifact_prefix(neuron),
    )


def test_context_region_must_match_the_platform() -> None:
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    with pytest.raises(ValueError, match="differs from the platform's region 'us-east-1'"):
        build_app(platform, app=App(context={"region": "eu-west-1"}))


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_cfn_lint_reports_no_errors(reference: Synthesized) -> None:
    for name, template in reference.templates.items():
        errors = [
            f"{m.rule.id} {m.message} at {'/'.join(map(str, m.path))}"
            for m in lint_all(json.dumps(template))
            if m.rule.severity == "error"
        ]
        assert errors == [], name


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_nothing_is_tagged_latest(reference: Synthesized) -> None:
    for name, template in reference.templates.items():
        text = json.dumps(template)
        assert not LATEST.findall(text), name


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_cdk_nag_reports_nothing_unacknowledged(reference: Synthesized) -> None:
    report = json.loads((reference.outdir / "validation-report.json").read_text())
    assert report["pluginReports"] == []


@pytest.mark.synth
def test_an_unacknowledged_finding_fails_synth(tmp_path: Path) -> None:
    app = App(outdir=str(tmp_path))
    stack = Stack(app, "Insecure")
    s3.Bucket(stack, "Plain")  # no TLS-only policy, no access logs
    register_nag(app)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    rules = {v["ruleName"] for r in report["pluginReports"] for v in r["violations"]}
    assert {"AwsSolutions-S1", "AwsSolutions-S10"} <= rules


@pytest.mark.synth
def test_another_app_can_bring_its_own_vpc(tmp_path: Path) -> None:
    app = App(context=cdk_context(), outdir=str(tmp_path))
    stack = Stack(app, "OwnVpc")
    vpc = ec2.Vpc(stack, "SharedVpc", max_azs=2, nat_gateways=1)
    vpc.add_flow_log("FlowLog")
    cluster = InferenceCluster(
        stack,
        "Serving",
        cluster_name="own-vpc",
        node_pools=[NodePool(name="system", instance_types=("m6i.xlarge",), min_size=1)],
        kubernetes_version="1.34",
        vpc=vpc,
        admin_role_arn="arn:aws:iam::123456789012:role/PlatformAdmin",
    )
    bucket = ModelBucket(
        stack, "Models", encryption_key=kms.Key(stack, "ModelKey", enable_key_rotation=True)
    )
    InferenceAddons(cluster, "Addons", cluster=cluster, model_bucket=bucket)
    compile_role = iam.Role(
        stack, "CompileJob", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com")
    )
    bucket.grant_write_prefix(compile_role, "neuron-artifacts/")
    register_nag(app)
    template = Template.from_json(app.synth().get_stack_by_name("OwnVpc").template)

    private = [stack.resolve(s.subnet_id) for s in vpc.private_subnets]
    template.resource_count_is("AWS::EC2::VPC", 1)
    template.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "Version": "1.34",
            "ResourcesVpcConfig": Match.object_like(
                {"SubnetIds": private, "EndpointPublicAccess": False, "EndpointPrivateAccess": True}
            ),
        },
    )
    template.has_resource_properties("AWS::EKS::Nodegroup", {"Subnets": private})
    template.has_resource_properties(
        "AWS::EKS::AccessEntry",
        {
            "PrincipalArn": "arn:aws:iam::123456789012:role/PlatformAdmin",
            "AccessPolicies": [
                Match.object_like(
                    {
                        "AccessScope": {"Type": "cluster"},
                        "PolicyArn": Match.any_value(),
                    }
                )
            ],
        },
    )
    charts = template.find_resources("Custom::AWSCDK-EKS-HelmChart")
    # No accelerator pools: no device plugins, but KubeRay and the autoscaler (1.34 image).
    assert sorted(c["Properties"]["Chart"] for c in charts.values()) == [
        "cluster-autoscaler",
        "kuberay-operator",
    ]
    assert "v1.34.5" in json.dumps(charts)
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": Match.string_like_regexp("CompileJob")}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": ["s3:AbortMultipartUpload", "s3:PutObject"],
                                "Resource": {
                                    "Fn::Join": ["", [Match.any_value(), "/neuron-artifacts/*"]]
                                },
                            }
                        )
                    ]
                )
            },
        },
    )
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    Match.object_like(
                        {
                            "BucketKeyEnabled": True,
                            "ServerSideEncryptionByDefault": Match.object_like(
                                {"SSEAlgorithm": "aws:kms"}
                            ),
                        }
                    )
                ]
            }
        },
    )


@pytest.mark.synth
def test_a_fixed_environment_needs_no_lookup(tmp_path: Path) -> None:
    # Also opens the API endpoint to one network, the only way to have a public endpoint.
    context = {
        **cdk_context(),
        "account": "123456789012",
        "region": "us-east-1",
        "public_access_cidrs": "203.0.113.0/24",
    }
    app, _ = build_app(
        PlatformSpec.from_yaml(REFERENCE_PLATFORM), app=App(context=context, outdir=str(tmp_path))
    )
    template = app.synth().get_stack_by_name("InferenceStack").template
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert "missing" not in manifest
    report = json.loads((tmp_path / "validation-report.json").read_text())
    assert [v for r in report["pluginReports"] for v in r.get("violations", [])] == []
    zones = {
        r["Properties"]["AvailabilityZone"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EC2::Subnet"
    }
    assert zones == {"us-east-1a", "us-east-1b", "us-east-1c"}
    (cluster,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Cluster"]
    access = cluster["Properties"]["ResourcesVpcConfig"]
    assert access["EndpointPublicAccess"] is True
    assert access["PublicAccessCidrs"] == ["203.0.113.0/24"]


def _unshare_works() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = subprocess.run([unshare, "--net", "true"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.long
@pytest.mark.synth
def test_synth_needs_no_network_and_no_credentials(tmp_path: Path) -> None:
    if not _unshare_works():
        pytest.skip("`unshare --net` is unavailable here (needs root or user namespaces)")
    home = tmp_path / "home"
    outdir = tmp_path / "cdk.out"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        HOME=str(home),
        CDK_OUTDIR=str(outdir),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION="1",
    )
    result = subprocess.run(
        ["unshare", "--net", sys.executable, str(REPO / "app.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (outdir / "InferenceStack.template.json").is_file()
