"""Project modules that run inside server pods, shipped as a ConfigMap on ``PYTHONPATH``.

The model servers run public images; the project's own code for them (the Ray Serve
application for Inferentia2, the API-key check every engine loads) travels with the
manifests instead of in an image: a ConfigMap ``<deployment>-serve-app`` holding the modules
of ``eks_inference/serve/`` the pods need, mounted read-only at :data:`SHIPPED_PATH`, which is
put on ``PYTHONPATH``. The pod templates carry a digest of the files
(:data:`CODE_DIGEST_ANNOTATION`), so changed code changes the pod spec and rolls the pods
instead of leaving old code running.

A module is named by its dotted path under ``eks_inference/serve/`` (``api_key_auth``,
``neuron.app``, ``neuron.__init__``). A ConfigMap key cannot hold ``/``, so each module is one
key, its dotted name and ``.py`` (:func:`module_file`), and the volume's ``items`` lay the keys
out as files. Standalone vLLM gets ``api_key_auth`` at the top of ``PYTHONPATH``, where its
``--middleware`` flag loads it; the Ray pods get the Neuron package (:data:`NEURON_PACKAGE`)
and the check as the package :data:`SHIPPED_PACKAGE`, a copy of ``eks_inference/serve/``'s
tree, in which the relative imports between the modules resolve as they do in the project.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

from eks_inference.charts import pod
from eks_inference.charts.metadata import api_object, metadata
from eks_inference.specification.deployment import ModelDeploymentSpec

SHIPPED_PATH = "/opt/eks-inference/serve"
# The top-level package the Ray pods import the shipped tree as: a name of the project's own, so
# it can shadow nothing the images have (eks_inference itself is not in the pods).
SHIPPED_PACKAGE = "eks_inference_serve"
CODE_DIGEST_ANNOTATION = "eks-inference.io/serve-app-sha256"
# The API-key check (eks_inference/serve/api_key_auth.py) and the class vLLM's --middleware
# flag loads from it.
API_KEY_AUTH_MODULE = "api_key_auth"
VLLM_API_KEY_MIDDLEWARE = f"{API_KEY_AUTH_MODULE}.VLLMAPIKeyMiddleware"
# The Ray Serve application for Inferentia2 (eks_inference/serve/neuron/), a package.
NEURON_PACKAGE = "neuron"
_VOLUME = "serve-app"


def module_file(module: str) -> str:
    """The ConfigMap key of a shipped module: its dotted name and ``.py``."""
    return f"{module}.py"


def module_path(module: str) -> str:
    """The file of a shipped module, relative to ``eks_inference/serve/``."""
    return "/".join(module.split(".")) + ".py"


@functools.cache
def module_source(module: str) -> str:
    """Source of ``eks_inference/serve/<module path>``, read from the installed package once
    per process (every Ray deployment ships the same modules)."""
    return (
        resources.files("eks_inference.serve")
        .joinpath(*module_path(module).split("/"))
        .read_text(encoding="utf-8")
    )


def package_modules(package: str) -> tuple[str, ...]:
    """Every module of the package ``eks_inference/serve/<package>/``, in name order, and
    ``eks_inference/serve/__init__`` (``__init__``), which makes the copy's root a package too.

    Read from the installed package, so a module added to it is shipped without naming it here.
    """
    directory = resources.files("eks_inference.serve").joinpath(package)
    modules = (
        f"{package}.{entry.name.removesuffix('.py')}"
        for entry in directory.iterdir()
        if entry.is_file() and entry.name.endswith(".py")
    )
    return ("__init__", *sorted(modules))


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
    spec: ModelDeploymentSpec,
    labels: Mapping[str, str],
    modules: Sequence[str],
    *,
    package: str | None = None,
) -> ShippedCode:
    """``modules`` of ``eks_inference/serve/`` in ``spec``'s ConfigMap, for its pods.

    With ``package`` the files are laid out below that top-level package, each at its path under
    ``eks_inference/serve/`` (``neuron.app`` at ``<package>/neuron/app.py``); without, each
    module is a top-level file named by its key.
    """
    ordered = sorted(modules)
    files = {module_file(module): module_source(module) for module in ordered}
    items = [
        {
            "key": module_file(module),
            "path": module_file(module) if package is None else f"{package}/{module_path(module)}",
        }
        for module in ordered
    ]
    name = config_map_name(spec)
    return ShippedCode(
        config_map=api_object("v1", "ConfigMap", metadata(name, labels), {"data": files}),
        volume={"name": _VOLUME, "configMap": {"name": name, "items": items}},
        mount=pod.mount(_VOLUME, SHIPPED_PATH, read_only=True),
        env=(("PYTHONPATH", SHIPPED_PATH),),
        annotations=((CODE_DIGEST_ANNOTATION, code_digest(files)),),
    )
