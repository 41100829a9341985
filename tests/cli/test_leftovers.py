"""``leftovers`` against the EC2, ELBv2 and FSx emulator: exactly the platform's resources.

The emulator is seeded with resources of every kind tagged the way each creator tags them
(the AWS Load Balancer Controller, Karpenter, managed node groups, the EBS CSI driver, the
VPC CNI), beside untagged ones, ones of another cluster and ones tagged with a creator's tag
whose value names another cluster; the command lists the first kind only, with the command
that removes each.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from typer.testing import Result

from eks_inference.cli.leftovers import DEFAULT_STACK_NAME
from eks_inference.ops.leftovers import Owner
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO

from .conftest import REGION

Cli = Callable[..., Result]
CLUSTER = "eks-inference"
OTHER = "someone-elses-cluster"
AMI = "ami-12c6146b"


def _tags(**tags: str) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def _spec(resource: str, tags: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [{"ResourceType": resource, "Tags": tags}] if tags else []


@pytest.fixture
def account(aws_env: str) -> dict[str, set[str]]:
    """Seed the emulator; return the ids of the platform's resources, by kind."""
    ec2 = boto3.client("ec2", region_name=REGION)
    elbv2 = boto3.client("elbv2", region_name=REGION)
    fsx = boto3.client("fsx", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{n}.0/24", AvailabilityZone=f"{REGION}{z}")[
            "Subnet"
        ]["SubnetId"]
        for n, z in ((1, "a"), (2, "b"))
    ]
    ours: dict[str, set[str]] = {
        "EC2 instance": set(),
        "EBS volume": set(),
        "network interface": set(),
        "security group": set(),
        "load balancer": set(),
        "target group": set(),
        "FSx file system": set(),
    }

    def instance(tags: list[dict[str, str]]) -> str:
        return str(
            ec2.run_instances(
                ImageId=AMI,
                MinCount=1,
                MaxCount=1,
                InstanceType="m5.large",
                SubnetId=subnets[0],
                TagSpecifications=_spec("instance", tags),
            )["Instances"][0]["InstanceId"]
        )

    # A Karpenter node and a managed node group's node.
    ours["EC2 instance"] |= {
        instance(
            _tags(
                **{
                    "karpenter.sh/nodepool": "inf2",
                    "eks:eks-cluster-name": CLUSTER,
                    f"kubernetes.io/cluster/{CLUSTER}": "owned",
                }
            )
        ),
        instance(_tags(**{"eks:cluster-name": CLUSTER, "eks:nodegroup-name": "system"})),
    }
    instance(_tags(**{"eks:cluster-name": OTHER, f"kubernetes.io/cluster/{OTHER}": "owned"}))
    instance([])
    terminated = instance(_tags(**{"eks:cluster-name": CLUSTER}))
    ec2.terminate_instances(InstanceIds=[terminated])

    def volume(tags: list[dict[str, str]]) -> str:
        return str(
            ec2.create_volume(
                AvailabilityZone=f"{REGION}a", Size=50, TagSpecifications=_spec("volume", tags)
            )["VolumeId"]
        )

    # The EBS CSI driver with --k8s-tag-cluster-id: both of its cluster tags.
    ours["EBS volume"].add(
        volume(
            _tags(
                **{
                    "CSIVolumeName": "pvc-1",
                    "ebs.csi.aws.com/cluster": "true",
                    "kubernetes.io/created-for/pvc/name": "prometheus-db",
                    "KubernetesCluster": CLUSTER,
                    f"kubernetes.io/cluster/{CLUSTER}": "owned",
                }
            )
        )
    )
    volume(_tags(**{"KubernetesCluster": OTHER, "ebs.csi.aws.com/cluster": "true"}))
    volume([])

    def interface(tags: list[dict[str, str]]) -> str:
        return str(
            ec2.create_network_interface(
                SubnetId=subnets[0], TagSpecifications=_spec("network-interface", tags)
            )["NetworkInterface"]["NetworkInterfaceId"]
        )

    ours["network interface"].add(interface(_tags(**{"cluster.k8s.amazonaws.com/name": CLUSTER})))
    interface(_tags(**{"cluster.k8s.amazonaws.com/name": OTHER}))
    interface([])

    def group(name: str, tags: list[dict[str, str]]) -> str:
        return str(
            ec2.create_security_group(
                GroupName=name,
                Description=name,
                VpcId=vpc,
                TagSpecifications=_spec("security-group", tags),
            )["GroupId"]
        )

    managed = group("k8s-inference-managed", _tags(**{"elbv2.k8s.aws/cluster": CLUSTER}))
    ours["security group"].add(managed)
    group("k8s-other-managed", _tags(**{"elbv2.k8s.aws/cluster": OTHER}))
    group("plain", [])

    def balancer(name: str, tags: list[dict[str, str]]) -> str:
        return str(
            elbv2.create_load_balancer(
                Name=name,
                Subnets=subnets,
                SecurityGroups=[managed],
                **({"Tags": tags} if tags else {}),
            )["LoadBalancers"][0]["LoadBalancerArn"]
        )

    lbc = {"elbv2.k8s.aws/cluster": CLUSTER, "ingress.k8s.aws/stack": "inference"}
    ours["load balancer"].add(balancer("k8s-inference-1", _tags(**lbc)))
    balancer("k8s-other-1", _tags(**{"elbv2.k8s.aws/cluster": OTHER}))
    balancer("plain", [])

    def target_group(name: str, tags: list[dict[str, str]]) -> str:
        return str(
            elbv2.create_target_group(
                Name=name,
                Protocol="HTTP",
                Port=8000,
                VpcId=vpc,
                TargetType="ip",
                **({"Tags": tags} if tags else {}),
            )["TargetGroups"][0]["TargetGroupArn"]
        )

    ours["target group"].add(target_group("k8s-inference-tg", _tags(**lbc)))
    target_group("k8s-other-tg", _tags(**{"elbv2.k8s.aws/cluster": OTHER}))
    target_group("plain-tg", [])

    def file_system(tags: list[dict[str, str]]) -> str:
        return str(
            fsx.create_file_system(
                FileSystemType="LUSTRE",
                StorageCapacity=1200,
                SubnetIds=subnets[:1],
                **({"Tags": tags} if tags else {}),
            )["FileSystem"]["FileSystemId"]
        )

    ours["FSx file system"].add(file_system(_tags(**{f"kubernetes.io/cluster/{CLUSTER}": "owned"})))
    file_system(_tags(**{f"kubernetes.io/cluster/{OTHER}": "owned"}))
    file_system([])
    return ours


def _listed(result: Result) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for item in json.loads(result.stdout):
        found.setdefault(item["kind"], set()).add(item["id"])
    return found


def test_it_lists_exactly_the_platforms_resources_of_every_kind(
    cli: Cli, account: dict[str, set[str]]
) -> None:
    result = cli("leftovers", "--platform", REFERENCE_PLATFORM, "--json")
    assert result.exit_code == 1, result.output
    assert _listed(result) == account
    items = json.loads(result.stdout)
    # Instances first (they hold volumes and interfaces), security groups last.
    kinds = [item["kind"] for item in items]
    assert kinds[0] == "EC2 instance"
    assert kinds[-1] == "security group"
    by_id = {item["id"]: item for item in items}
    (volume,) = account["EBS volume"]
    assert by_id[volume]["tag"] == f"KubernetesCluster={CLUSTER}"
    assert by_id[volume]["command"] == (
        f"aws ec2 --region {REGION} delete-volume --volume-id {volume}"
    )
    (balancer,) = account["load balancer"]
    assert by_id[balancer]["command"] == (
        f"aws elbv2 --region {REGION} delete-load-balancer --load-balancer-arn {balancer}"
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    count = sum(map(len, account.values()))
    assert errors == [
        f"error: {count} resources of cluster {CLUSTER} (stack {DEFAULT_STACK_NAME}) in "
        f"{REGION} are left; remove them with the commands listed, in that order"
    ]


def test_the_table_names_each_resource_and_its_command(
    cli: Cli, account: dict[str, set[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    result = cli("leftovers", "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 1, result.output
    text = " ".join(result.stdout.split())
    (instance, *_) = sorted(account["EC2 instance"])
    assert f"aws ec2 --region {REGION} terminate-instances --instance-ids {instance}" in text
    (file_system,) = account["FSx file system"]
    assert f"aws fsx --region {REGION} delete-file-system --file-system-id {file_system}" in text


def test_an_account_without_leftovers_passes(cli: Cli, aws_env: str) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.create_volume(AvailabilityZone=f"{REGION}a", Size=10)
    result = cli("leftovers", "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        f"nothing of cluster {CLUSTER} (stack {DEFAULT_STACK_NAME}) in {REGION} is left"
    )
    as_json = cli("leftovers", "--platform", REFERENCE_PLATFORM, "--json")
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout) == []


@pytest.mark.parametrize("stack", ["", "1stack", "has space", "x" * 129])
def test_a_bad_stack_name_is_bad_input(cli: Cli, aws_env: str, stack: str) -> None:
    result = cli("leftovers", "--platform", REFERENCE_PLATFORM, "--stack-name", stack)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --stack-name must be a CloudFormation stack name")


def test_a_bad_platform_file_is_bad_input(cli: Cli, aws_env: str, tmp_path: Path) -> None:
    platform = tmp_path / "platform.yaml"
    platform.write_text("cluster_name: 1-not-a-name\n")
    result = cli("leftovers", "--platform", platform)
    assert result.exit_code == 2
    assert "cluster_name" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_resources_of_the_stack_and_its_nested_stacks_are_the_platforms() -> None:
    owner = Owner(cluster=CLUSTER, stack=DEFAULT_STACK_NAME, region=REGION)
    stack_tag = "aws:cloudformation:stack-name"
    nested = f"{DEFAULT_STACK_NAME}-Llama3Inf2NestedStack-1ABCDEF"
    assert owner.matching_tag({stack_tag: nested}) == f"{stack_tag}={nested}"
    assert owner.matching_tag({stack_tag: DEFAULT_STACK_NAME}) is not None
    assert owner.matching_tag({stack_tag: f"{DEFAULT_STACK_NAME}Other"}) is None
    # The cluster security group EKS makes.
    assert owner.matching_tag({"aws:eks:cluster-name": CLUSTER}) is not None
    assert owner.matching_tag({"aws:eks:cluster-name": OTHER}) is None


def test_the_default_stack_name_is_the_apps() -> None:
    # Read from the source: the app module imports aws-cdk, which the operations never do.
    source = (REPO / "eks_inference" / "stacks" / "app.py").read_text()
    assigned = {
        node.targets[0].id: node.value
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    assert ast.literal_eval(assigned["STACK_NAME"]) == DEFAULT_STACK_NAME
