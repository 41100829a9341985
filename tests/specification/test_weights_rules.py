"""The loaders' rules: each refuses a deployment that cannot work, naming the field and the fix,
in the spec and through the CLI (exit 2, one ``error:`` line)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.weights_rules import mountpoint_cache_gib, nvme_cache_budget_gib
from tests.helpers.cli import run_cli
from tests.helpers.errors import errors_of, one_line_error
from tests.helpers.platforms import EXAMPLES_DIR, example, named, reference

EXAMPLE = EXAMPLES_DIR / "loaders.yaml"
DIGEST = "sha256:" + "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"


def _cli(data: dict[str, Any], tmp_path: Path, *expected: str) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2, *expected)


def test_the_example_validates() -> None:
    platform = PlatformSpec.from_yaml(EXAMPLE)
    assert {d.weights.loader for d in platform.deployments} == {
        "runai_streamer",
        "image",
        "mountpoint",
        "fsx",
    }


def test_an_image_with_a_tag_and_no_digest_fails(tmp_path: Path) -> None:
    data = example("loaders")
    image = named(data["deployments"], "qwen25-1b5-image")["weights"]["image"]
    image["reference"] = "111122223333.dkr.ecr.us-east-1.amazonaws.com/weights/qwen:2025-01"
    field = "deployments.1.weights.image.reference"
    errors = errors_of(data)
    assert "not pinned by digest" in errors[field]
    assert f"{image['reference']}@sha256:<digest>" in errors[field]
    _cli(data, tmp_path, field, "pin it by digest")


@pytest.mark.parametrize(
    "reference",
    [
        f"busybox@{DIGEST}",
        f"public.ecr.aws/docker/library/busybox:1.37@{DIGEST}",
        f"registry.example.com:5000/team/weights:v1@{DIGEST}",
    ],
)
def test_images_pinned_by_digest_pass(reference: str) -> None:
    data = example("loaders")
    named(data["deployments"], "qwen25-1b5-image")["weights"]["image"]["reference"] = reference
    PlatformSpec.model_validate(data)


@pytest.mark.parametrize("path", ["models/x", "/models/../etc", "/models/$(id)", "/a//b"])
def test_an_image_path_must_be_plain_and_absolute(path: str) -> None:
    data = example("loaders")
    named(data["deployments"], "qwen25-1b5-image")["weights"]["image"]["path"] = path
    assert "absolute directory" in errors_of(data)["deployments.1.weights.image.path"]


def test_image_weights_above_the_limit_fail(tmp_path: Path) -> None:
    """Mistral's 14.5 GB of weights are no tiny model: the image loader is refused."""
    data = example("loaders")
    weights = named(data["deployments"], "mistral-7b-runai")["weights"]
    weights["loader"] = "image"
    weights["image"] = {"reference": f"weights/mistral@{DIGEST}", "path": "/models/mistral"}
    field = "deployments.0.weights.loader"
    assert "at most 5 GB" in errors_of(data)[field]
    _cli(data, tmp_path, field, "use loader: runai_streamer or mountpoint")


def test_the_image_loader_needs_its_image() -> None:
    data = example("loaders")
    del named(data["deployments"], "qwen25-1b5-image")["weights"]["image"]
    assert "needs image" in errors_of(data)["deployments.1.weights.image"]


def test_a_mountpoint_cache_that_does_not_fit_the_nvme_fails(tmp_path: Path) -> None:
    """g6e.4xlarge has 600 GB of NVMe: a 1000 GiB cache cannot fit beside the images."""
    data = example("loaders")
    named(data["deployments"], "qwen25-7b-mountpoint")["weights"]["cache_gib"] = 1000
    field = "deployments.2.weights.cache_gib"
    budget = nvme_cache_budget_gib("g6e.4xlarge")
    assert f"set cache_gib <= {budget}" in errors_of(data)[field]
    _cli(data, tmp_path, field, "600 GB NVMe")


def test_a_cache_on_ebs_is_bounded(tmp_path: Path) -> None:
    data = reference()
    data["deployments"][0]["weights"]["cache_gib"] = 100
    field = "deployments.0.weights.cache_gib"
    assert "no NVMe instance store" in errors_of(data)[field]


def test_the_cache_defaults_to_the_weights_on_nvme() -> None:
    platform = PlatformSpec.from_yaml(EXAMPLE)
    spec = platform.deployment("qwen25-7b-mountpoint")
    assert mountpoint_cache_gib(spec) == 64
    default = spec.model_copy(
        update={"weights": spec.weights.model_copy(update={"cache_gib": None})}
    )
    assert mountpoint_cache_gib(default) == 16  # 14.2 GiB of weights plus 10%


def test_an_fsx_deployment_on_a_pool_spanning_two_zones_fails(tmp_path: Path) -> None:
    data = example("loaders")
    named(data["node_pools"], "g6e-fsx")["zones"] = [0, 1]
    field = "node_pools.3.zones"
    message = errors_of(data)[field]
    assert "spans zones [0, 1]" in message
    assert "set zones: [0]" in message
    _cli(data, tmp_path, field, "one Availability Zone")


def test_an_fsx_deployment_on_a_pool_in_every_zone_fails() -> None:
    data = example("loaders")
    del named(data["node_pools"], "g6e-fsx")["zones"]
    assert "every zone" in errors_of(data)["node_pools.3.zones"]


def test_fsx_is_refused_where_the_engine_reads_no_filesystem() -> None:
    """Ray Serve reads only Mountpoint; the loader rule names where fsx works."""
    data = example("loaders")
    named(data["deployments"], "qwen25-7b-mountpoint")["weights"] = {
        "prefix": "models/qwen2.5-7b/",
        "loader": "fsx",
    }
    message = errors_of(data)["deployments.2.weights.loader"]
    assert "engine: vllm on a GPU instance" in message


def test_lustre_capacity_steps() -> None:
    data = example("loaders")
    named(data["deployments"], "llama3-8b-fsx")["weights"]["fsx"] = {"storage_capacity_gib": 3000}
    message = errors_of(data)["deployments.3.weights.fsx.storage_capacity_gib"]
    assert "use 4800" in message


def test_an_imported_file_system_needs_its_three_names() -> None:
    data = example("loaders")
    named(data["deployments"], "llama3-8b-fsx")["weights"]["fsx"] = {
        "file_system_id": "fs-0123456789abcdef0"
    }
    assert "dns_name and mount_name" in errors_of(data)["deployments.3.weights.fsx.file_system_id"]


def test_manifests_of_a_created_file_system_are_refused(tmp_path: Path) -> None:
    """Its id exists only once deployed: writing its manifests is bad input, naming the fix."""
    completed = run_cli("manifests", "--platform", EXAMPLE, "--out", tmp_path / "out", cwd=tmp_path)
    one_line_error(completed, 2, "llama3-8b-fsx", "weights.fsx.file_system_id")
