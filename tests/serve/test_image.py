"""The Neuron Ray image: its build context, content hash, name, and packaging."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest

from eks_inference import versions
from eks_inference.serve import image
from eks_inference.serve.image import (
    NEURON_RAY_IMAGE_CONTEXT,
    asset_image_uri,
    neuron_ray_build_args,
    neuron_ray_image_hash,
)
from tests.helpers.platforms import REPO

DOCKERFILE = NEURON_RAY_IMAGE_CONTEXT / "Dockerfile"


@pytest.fixture
def context_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "context"
    shutil.copytree(NEURON_RAY_IMAGE_CONTEXT, copy)
    return copy


def test_build_args_come_from_versions() -> None:
    assert neuron_ray_build_args() == {
        "BASE_IMAGE": versions.NEURON_VLLM_IMAGE,
        "RAY_VERSION": versions.RAY_VERSION,
    }


def test_dockerfile_declares_every_build_arg_without_a_default() -> None:
    declared = re.findall(r"^ARG\s+(\S+)\s*$", DOCKERFILE.read_text(), flags=re.MULTILINE)
    assert sorted(declared) == sorted(neuron_ray_build_args())
    assert not re.search(r"^ARG\s+\S+=", DOCKERFILE.read_text(), flags=re.MULTILINE)


def test_dockerfile_builds_on_the_base_and_runs_as_the_ray_user() -> None:
    text = DOCKERFILE.read_text()
    assert re.findall(r"^FROM\s+(.+)$", text, flags=re.MULTILINE) == ["${BASE_IMAGE}"]
    assert '"ray[serve]==${RAY_VERSION}"' in text
    assert "--constraint" in text
    assert "--uid 1000" in text
    assert re.findall(r"^USER\s+(.+)$", text, flags=re.MULTILINE) == ["1000"]


def test_hash_is_a_stable_sha256() -> None:
    first = neuron_ray_image_hash()
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    assert neuron_ray_image_hash() == first


def test_hash_ignores_where_the_context_lives(context_copy: Path) -> None:
    assert neuron_ray_image_hash(context_copy) == neuron_ray_image_hash()


def test_hash_changes_with_the_dockerfile(context_copy: Path) -> None:
    dockerfile = context_copy / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "LABEL changed=true\n")
    assert neuron_ray_image_hash(context_copy) != neuron_ray_image_hash()


def test_hash_changes_with_a_file_added_or_renamed(context_copy: Path) -> None:
    original = neuron_ray_image_hash(context_copy)
    (context_copy / "extra.txt").write_text("x")
    with_extra = neuron_ray_image_hash(context_copy)
    (context_copy / "extra.txt").rename(context_copy / "other.txt")
    assert len({original, with_extra, neuron_ray_image_hash(context_copy)}) == 3


@pytest.mark.parametrize("name", ["BASE_IMAGE", "RAY_VERSION"])
def test_hash_changes_with_a_build_arg(name: str) -> None:
    args = neuron_ray_build_args()
    args[name] += "-changed"
    assert neuron_ray_image_hash(build_args=args) != neuron_ray_image_hash()


def test_hash_does_not_depend_on_build_arg_order() -> None:
    args = neuron_ray_build_args()
    reversed_args = dict(reversed(list(args.items())))
    assert neuron_ray_image_hash(build_args=reversed_args) == neuron_ray_image_hash()


def test_hash_keeps_fields_apart() -> None:
    # Moving a character between a name and a value must not collide.
    assert neuron_ray_image_hash(build_args={"AB": "C"}) != neuron_ray_image_hash(
        build_args={"A": "BC"}
    )


def test_hash_needs_a_context(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        neuron_ray_image_hash(tmp_path)


def test_asset_uri_matches_the_cdk_default_synthesizer() -> None:
    uri = asset_image_uri("123456789012", "us-east-1")
    assert uri == (
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/"
        f"cdk-hnb659fds-container-assets-123456789012-us-east-1:{neuron_ray_image_hash()}"
    )


def test_asset_uri_without_an_account_uses_a_placeholder() -> None:
    uri = asset_image_uri(None, "eu-west-2")
    assert uri.startswith(
        "ACCOUNT_ID.dkr.ecr.eu-west-2.amazonaws.com/cdk-hnb659fds-container-assets-ACCOUNT_ID-eu-west-2:"
    )
    assert image.ACCOUNT_PLACEHOLDER == "ACCOUNT_ID"


def test_asset_uri_in_china_regions() -> None:
    assert ".dkr.ecr.cn-north-1.amazonaws.com.cn/" in asset_image_uri("123456789012", "cn-north-1")


@pytest.mark.parametrize(
    ("account", "region"), [("1234", "us-east-1"), ("123456789012", "US-EAST-1"), (None, "")]
)
def test_asset_uri_rejects_malformed_names(account: str | None, region: str) -> None:
    with pytest.raises(ValueError, match=r"account_id|region"):
        asset_image_uri(account, region)


def test_package_data_ships_the_build_context() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["eks_inference"]
    package = REPO / "eks_inference"
    shipped = {path for pattern in patterns for path in package.glob(pattern)}
    missing = [
        p.relative_to(package)
        for p in NEURON_RAY_IMAGE_CONTEXT.rglob("*")
        if p.is_file() and p not in shipped
    ]
    assert not missing, f"pyproject package-data does not include {missing}"
