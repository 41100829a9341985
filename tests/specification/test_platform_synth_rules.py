"""Rules that used to fail only at synth now fail at validation, naming the field.

An unsupported ``kubernetes_version`` and a platform beyond CloudFormation's quotas passed
``plan`` and ``manifests`` and failed in ``cdk synth`` (or deploy) with a traceback.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from eks_inference import versions
from eks_inference.cli.main import app as cli
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.errors import problems_of
from tests.helpers.platforms import REFERENCE_PLATFORM, reference


def _reference(**changes: Any) -> dict[str, Any]:
    data = reference()
    data.update(changes)
    return data


def _with_pools(count: int, **changes: Any) -> dict[str, Any]:
    data = _reference(**changes)
    extra = [
        {"name": f"pool{i}", "instance_types": ["m6i.xlarge"], "max_size": 2}
        for i in range(count - len(data["node_pools"]))
    ]
    data["node_pools"] = [*data["node_pools"], *extra]
    return data


def test_an_unsupported_kubernetes_version_names_the_supported_ones() -> None:
    supported = ", ".join(sorted(versions.KUBERNETES_RELEASES))
    assert problems_of(_reference(kubernetes_version="9.99")) == [
        ("kubernetes_version", f"Kubernetes 9.99 is not supported; use one of {supported}")
    ]


@pytest.mark.parametrize("version", sorted(versions.KUBERNETES_RELEASES))
def test_every_pinned_kubernetes_version_is_accepted(version: str) -> None:
    assert PlatformSpec.model_validate(_reference(kubernetes_version=version)).kubernetes_version


def test_five_hundred_managed_node_pools_are_refused_at_node_pools() -> None:
    ((loc, message),) = problems_of(_with_pools(500))
    assert loc == "node_pools"
    assert message.startswith(
        "the stack would have 3,101 resources, over CloudFormation's 500 per stack; its 500 "
        "node pools make 3,000 of them: use at most 66"
    )


def test_the_most_node_pools_the_message_allows_fit() -> None:
    assert PlatformSpec.model_validate(_with_pools(66))
    ((loc, _),) = problems_of(_with_pools(67))
    assert loc == "node_pools"


def test_five_hundred_karpenter_pools_are_refused_by_template_size() -> None:
    ((loc, message),) = problems_of(_with_pools(500, node_provisioning="karpenter"))
    assert loc == "node_pools"
    assert "template would be about" in message
    assert "over CloudFormation's 1,000 KB per template" in message


def test_the_parent_grows_by_the_terms_of_its_constructs() -> None:
    from eks_inference.specification import cloudformation_limits as limits

    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)

    def use(data: dict[str, Any]) -> limits.StackUse:
        spec = PlatformSpec.model_validate(data)
        return limits.parent_stack_use(
            spec.node_pools,
            spec.node_provisioning,
            spec.deployments,
            spec.endpoint,
            spec.routes(),
            spec.splits(),
        ).total

    base = use(_reference())
    assert use(_with_pools(len(platform.node_pools) + 1)).resources == base.resources + 6
    karpenter = use(_reference(node_provisioning="karpenter"))
    assert use(_with_pools(len(platform.node_pools) + 1, node_provisioning="karpenter")) == (
        limits.StackUse(
            resources=karpenter.resources,
            outputs=karpenter.outputs,
            template_bytes=karpenter.template_bytes + 2_200,
        )
    )


def test_mountpoint_grants_overflow_into_managed_policies_as_cdk_packs_them() -> None:
    """Prefixes of the scale benchmark's shape: about 30 fit beside the inline policy."""
    from eks_inference.specification import cloudformation_limits as limits

    prefixes = [f"models/m{i:03d}-llama-3-8b/" for i in range(200)]
    counts = [limits.mountpoint_overflow_policies(prefixes[:n]) for n in (0, 20, 40, 200)]
    assert counts[0] == counts[1] == 0
    assert 0 < counts[2] < counts[3]


@pytest.mark.parametrize("command", ["plan", "manifests"])
def test_plan_and_manifests_refuse_five_hundred_node_pools_in_one_line(
    tmp_path: Any, command: str
) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(_with_pools(500)))
    args = [command, "--platform", str(path)]
    if command == "manifests":
        args += ["--out", str(tmp_path / "out")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: invalid platform file {path}: node_pools: the stack would")
    assert not (tmp_path / "out").exists()
