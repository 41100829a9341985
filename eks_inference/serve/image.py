"""The Ray + Neuron vLLM image that RayService workers run on Inferentia2, and its name.

KubeRay needs Ray (at the operator's ``rayVersion``) in every Ray pod, and no public image
has both Ray and the Neuron vLLM stack, so the CDK app builds one from ``image/Dockerfile`` as a
container asset. Its tag is a hash computed here from the build context and the build args, so
the image URI is known without synthesizing a CDK app: the charts (and ``k8s_manifests/``) name
the image by :func:`asset_image_uri`, and the CDK side registers the asset with the same hash as
its source hash (``stack.synthesizer.add_docker_image_asset(source_hash=neuron_ray_image_hash(),
directory_name=str(NEURON_RAY_IMAGE_CONTEXT), docker_build_args=neuron_ray_build_args())``), so
the tag it pushes is the one the manifests name. ``DockerImageAsset`` computes its own
fingerprint and takes no custom hash, which is why the synthesizer call is used.

Pure Python: importing this module needs neither aws-cdk nor Docker.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

from eks_inference.specification.aws_types import ACCOUNT_ID_PATTERN, REGION_PATTERN
from eks_inference.versions import NEURON_VLLM_IMAGE, RAY_VERSION

NEURON_RAY_IMAGE_CONTEXT: Path = Path(__file__).parent / "image"
"""The Docker build context: a folder holding only the Dockerfile."""

# The CDK default synthesizer's qualifier and container-asset repository naming.
CDK_DEFAULT_QUALIFIER = "hnb659fds"
# The name a chart's needs give this image by, when its pods run it (the CDK app builds it).
NEURON_RAY_IMAGE = "neuron-ray"

ACCOUNT_PLACEHOLDER = "ACCOUNT_ID"
"""Written in place of the account when none is known; substitute it before applying."""

_ACCOUNT_ID = re.compile(ACCOUNT_ID_PATTERN)
_REGION = re.compile(REGION_PATTERN)


def neuron_ray_build_args() -> dict[str, str]:
    """The Dockerfile's build args, from ``versions`` (the Dockerfile has no defaults)."""
    return {"BASE_IMAGE": NEURON_VLLM_IMAGE, "RAY_VERSION": RAY_VERSION}


def neuron_ray_image_hash(
    context: Path = NEURON_RAY_IMAGE_CONTEXT,
    build_args: Mapping[str, str] | None = None,
) -> str:
    """A sha256 (hex) identifying what the image is built from.

    It covers every file in the build context (relative path and bytes, in sorted order) and
    the build args (sorted by name), so a change to the Dockerfile or to a pinned version gives
    a new tag, and nothing else does: timestamps, the checkout location and the platform's
    path separator are not part of it. Fields are length-prefixed so that no two different
    inputs produce the same byte stream.
    """
    args = neuron_ray_build_args() if build_args is None else dict(build_args)
    files = sorted(
        (path.relative_to(context).as_posix(), path)
        for path in context.rglob("*")
        if path.is_file()
    )
    if not files:
        raise FileNotFoundError(f"no files in the image build context {context}")
    digest = hashlib.sha256()

    def field(kind: bytes, data: bytes) -> None:
        digest.update(kind)
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)

    for relative, path in files:
        field(b"path", relative.encode())
        field(b"data", path.read_bytes())
    for name in sorted(args):
        field(b"arg-name", name.encode())
        field(b"arg-value", args[name].encode())
    return digest.hexdigest()


def asset_image_uri(account_id: str | None, region: str) -> str:
    """The URI the CDK default synthesizer gives the Neuron Ray image asset.

    ``{account}.dkr.ecr.{region}.{suffix}/cdk-hnb659fds-container-assets-{account}-{region}:
    {hash}``, where the suffix is ``amazonaws.com`` (``amazonaws.com.cn`` in China regions).
    With ``account_id=None`` the account is written as the literal text ``ACCOUNT_ID``
    (:data:`ACCOUNT_PLACEHOLDER`), keeping rendered manifests account-agnostic until deployed.
    """
    if account_id is not None and not _ACCOUNT_ID.fullmatch(account_id):
        raise ValueError(f"account_id must be 12 digits, got {account_id!r}")
    if not _REGION.fullmatch(region):
        raise ValueError(f"not an AWS region name: {region!r}")
    account = ACCOUNT_PLACEHOLDER if account_id is None else account_id
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    repository = f"cdk-{CDK_DEFAULT_QUALIFIER}-container-assets-{account}-{region}"
    return f"{account}.dkr.ecr.{region}.{suffix}/{repository}:{neuron_ray_image_hash()}"
