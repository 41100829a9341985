"""Where a deployment's compiled Neuron artifacts live in the model bucket, and what decides it.

The Neuron plugin for vLLM loads a precompiled model from ``NEURON_COMPILED_ARTIFACTS`` and
only recompiles (about 15 minutes for an 8B model) when it finds nothing it can load. A
compiled graph is valid only for the exact shapes and compiler it was built with, so the key
of an artifact set is derived from everything that changes the graph: the model and its
revision, the Neuron SDK (compiler and runtime), tensor parallelism, the batch size
(``max_num_seqs``), the maximum sequence length, the dtype, and the ``override_neuron_config``
payload (buckets and explicit overrides). Two deployments that would compile the same graph
share one key; any change that would need a recompile yields a new key, so stale artifacts are
never loaded by mistake and old ones stay in place for a rollback.

Example key for Llama-3-8B at TP 8, a batch of 32 and 4k context::

    neuron-artifacts/meta-llama--Meta-Llama-3-8B-Instruct/main/neuron-2.31.1/
        tp8-seqs32-len4096-bfloat16-<8 hex digits of the hash>/
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.versions import NEURON_SDK_VERSION

# Characters kept verbatim in a key segment; anything else becomes '-'. S3 accepts more, but
# these are safe in keys, in paths inside a Mountpoint mount and in shell commands alike.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# A segment used verbatim: safe characters, no leading, trailing or doubled '-' (the model
# slug joins the parts of an id with '--'), and not a '.'/'..' path component, which a
# Mountpoint mount could not address.
_VERBATIM = re.compile(r"^(?!\.{1,2}$)[A-Za-z0-9._]+(-[A-Za-z0-9._]+)*$")
_HASH_CHARS = 8


def override_neuron_config(spec: ModelDeploymentSpec) -> dict[str, Any]:
    """The ``override_neuron_config`` payload the Neuron plugin receives for ``spec``.

    Explicit ``sequence_buckets`` turn bucketing on with the same buckets for context encoding
    and token generation; without them the plugin derives power-of-two buckets from 128 up to
    ``max_model_len``. ``neuron.overrides`` are applied last, so an override of a bucket list
    wins over ``sequence_buckets``. Both engines (standalone vLLM and the Ray Serve
    application) pass this same payload, so they compile, and can share, the same graph.
    """
    options = spec.neuron_options
    config: dict[str, Any] = {}
    if options.sequence_buckets:
        buckets = sorted(set(options.sequence_buckets))
        config["enable_bucketing"] = True
        config["context_encoding_buckets"] = buckets
        config["token_generation_buckets"] = list(buckets)
    config.update(options.overrides)
    return config


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_CHARS]


def _segment(value: str) -> str:
    """``value`` as one key segment, distinct from the segment of any other value.

    Usual values (Hugging Face names, branch names, commit hashes, SDK versions) are used
    verbatim. Anything else is made safe and suffixed with a short hash of the original, so
    that values differing only in unsafe characters (``refs/pr/1`` and ``refs-pr-1``) still
    name different artifacts instead of silently sharing one set (barring a collision of the
    32-bit hash with a verbatim value).
    """
    if _VERBATIM.match(value):
        return value
    readable = re.sub(r"-{2,}", "-", _UNSAFE.sub("-", value)).strip("-") or "x"
    return f"{readable}-{_short_hash(value)}"


def _config_hash(config: dict[str, Any]) -> str:
    return _short_hash(json.dumps(config, sort_keys=True, separators=(",", ":")))


def artifact_prefix(spec: ModelDeploymentSpec) -> str:
    """The bucket key prefix (ending in ``/``) of ``spec``'s compiled Neuron artifacts.

    Layout: ``<compiled_artifacts_prefix><model-id-slug>/<revision>/neuron-<sdk>/
    tp<tp>-seqs<max_num_seqs>-len<max_model_len>-<dtype>-<hash>/`` where the slug replaces the
    ``/`` of the Hugging Face id with ``--`` and ``<hash>`` is a short SHA-256 of the
    canonical JSON of :func:`override_neuron_config`. The readable parts let an operator find
    artifacts by eye; the hash covers the settings too long to spell out. A model id or
    revision with characters unsafe in a key keeps a readable form plus a short hash of the
    original, so distinct inputs never share a key.

    Raises ``ValueError`` when ``spec`` has no compiled-artifacts prefix (it serves on GPUs,
    or it compiles at startup for development).
    """
    prefix = spec.neuron_options.compiled_artifacts_prefix
    if not spec.on_neuron or prefix is None:
        raise ValueError(
            f"deployment {spec.name!r} has no neuron.compiled_artifacts_prefix; compiled "
            "artifacts exist only for Inferentia2 deployments that set one"
        )
    model_slug = "--".join(_segment(part) for part in spec.model.id.split("/"))
    shape = (
        f"tp{spec.tensor_parallel_size}"
        f"-seqs{spec.limits.max_num_seqs}"
        f"-len{spec.limits.max_model_len}"
        f"-{spec.model.architecture.dtype}"
        f"-{_config_hash(override_neuron_config(spec))}"
    )
    return (
        f"{prefix}{model_slug}/{_segment(spec.model.revision)}/"
        f"neuron-{_segment(NEURON_SDK_VERSION)}/{shape}/"
    )


# Name of the marker object under an artifact prefix; see completion_marker_key.
COMPLETION_MARKER_NAME = "_COMPLETE"


def completion_marker_key(spec: ModelDeploymentSpec) -> str:
    """The key of the marker object written last, after every compiled artifact of ``spec``.

    Whatever produces the artifacts (a compile job, or ``eks-inference upload --kind
    artifacts``) writes this object only once the whole set is in the bucket, so its presence
    means the set is complete; ``eks-inference preflight`` checks for it. It lives under
    :func:`artifact_prefix`, so it is bound to exactly the shapes serving loads.
    """
    return artifact_prefix(spec) + COMPLETION_MARKER_NAME
