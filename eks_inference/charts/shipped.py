"""Project modules that run inside server pods, shipped as a ConfigMap on ``PYTHONPATH``.

The model servers run public images; the project's own code for them (the Ray Serve
application for Inferentia2, the API-key check every engine loads) travels with the
manifests instead of in an image: a ConfigMap ``<deployment>-serve-app`` holding the modules
of ``eks_inference/serve/`` the pods need, mounted read-only at :data:`SHIPPED_PATH`, which is
put on ``PYTHONPATH``. The pod templates carry a digest of the files
(:data:`CODE_DIGEST_ANNOTATION`), so changed code changes the pod spec and rolls the pods
instead of leaving old code running.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

from eks_inference.charts import pod
from eks_inference.charts.common import api_object, metadata
from eks_inference.spec.deployment import ModelDeploymentSpec

SHIPPED_PATH = "/opt/eks-inference/serve"
CODE_DIGEST_ANNOTATION = "eks-inference.io/serve-app-sha256"
# The API-key check (eks_inference/serve/api_key_auth.py) and the class vLLM's --middleware
# flag loads from it.
API_KEY_AUTH_MODULE = "api_key_auth"
VLLM_API_KEY_MIDDLEWARE = f"{API_KEY_AUTH_MODULE}.VLLMAPIKeyMiddleware"
_VOLUME = "serve-app"


def module_file(module: str) -> str:
    """The file name of a shipped module."""
    return f"{module}.py"


def module_source(module: str) -> str:
    """Source of ``eks_inference/serve/<module>.py``, read from the installed package."""
    return (
        resources.files("eks_inference.serve")
        .joinpath(module_file(module))
        .read_text(encoding="utf-8")
    )


def config_map_name(spec: ModelDeploymentSpec) -> str:
    """The ConfigMap holding ``spec``'s shipped modules: ``<deployment>-serve-app``."""
    return f"{spec.name}-serve-app"


def code_digest(files: Mapping[str, str]) -> str:
    """A sha256 (hex) of ``files`` (name to source), each length-prefixed, in name order."""
    digest = hashlib.sha256()
    for name in sorted(files):
        for part in (name.encode(), files[name].encode()):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return digest.hexdigest()


@dataclass(frozen=True)
class ShippedCode:
    """The ConfigMap of some modules and what a pod needs to import them."""

    config_map: pod.Json
    volume: pod.Json
    mount: pod.Json
    env: tuple[tuple[str, str], ...]
    annotations: tuple[tuple[str, str], ...]


def shipped_code(
    spec: ModelDeploymentSpec, labels: Mapping[str, str], modules: Sequence[str]
) -> ShippedCode:
    """``modules`` of ``eks_inference/serve/`` in ``spec``'s ConfigMap, for its pods."""
    files = {module_file(module): module_source(module) for module in modules}
    name = config_map_name(spec)
    return ShippedCode(
        config_map=api_object("v1", "ConfigMap", metadata(name, labels), {"data": files}),
        volume=pod.config_map_volume(_VOLUME, name, list(files)),
        mount=pod.mount(_VOLUME, SHIPPED_PATH, read_only=True),
        env=(("PYTHONPATH", SHIPPED_PATH),),
        annotations=((CODE_DIGEST_ANNOTATION, code_digest(files)),),
    )
