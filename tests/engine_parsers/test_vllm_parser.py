"""Every GPU vLLM argument list the charts render, parsed by the pinned vLLM's own parser.

vLLM 0.29.0 (``versions.GPU_VLLM_VERSION``) with its dependencies (torch among them, some
gigabytes) is not part of the development environment every test runs in; where it is
installed, these tests run ``vllm serve``'s parser (``vllm.entrypoints.cli.serve``) on the
arguments of every GPU deployment of the reference platform, of the chart variants and of the
example platforms, the LMCache variant's ``--kv-transfer-config`` included. They need only the
spec layer and :mod:`eks_inference.charts.vllm_server`, so an environment with vLLM and this
package's pure-Python dependencies runs them:

    python -m venv /tmp/vllm && /tmp/vllm/bin/pip install vllm==0.29.0 pytest
    PYTHONPATH=. /tmp/vllm/bin/python -m pytest tests/engine_parsers -p no:cacheprovider
"""

from __future__ import annotations

import argparse
import os
from importlib.metadata import version
from pathlib import Path

import pytest

from eks_inference.charts.vllm_server import vllm_server_args
from eks_inference.spec.deployment import ModelDeploymentSpec
from eks_inference.spec.platform import PlatformSpec
from eks_inference.versions import GPU_VLLM_VERSION

# Parsing needs a platform to describe devices, chosen when vLLM is first imported; the
# server's image finds its GPUs itself.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
serve = pytest.importorskip("vllm.entrypoints.cli.serve")

REPO = Path(__file__).resolve().parents[2]
PLATFORMS = (REPO / "deployments.yaml", *sorted((REPO / "examples").glob("*.yaml")))
BUCKET = "eks-inference-models-example"
# The chart variants' LMCache deployment (tests/charts/conftest.py), without importing the
# charts' fixtures: standalone vLLM with both tiers.
LMCACHE_VARIANT = {
    "name": "mistral-lmcache",
    "model": "mistral-7b",
    "instance_type": "g6e.4xlarge",
    "engine": "vllm",
    "weights": {"prefix": "models/mistral-7b/", "loader": "runai_streamer"},
    "kv_cache": {"offload": "cpu+disk", "cpu_gib": 64, "disk_gib": 400},
}


def _gpu_specs() -> list[ModelDeploymentSpec]:
    specs = [
        spec
        for path in PLATFORMS
        for spec in PlatformSpec.from_yaml(path).deployments
        if not spec.on_neuron and spec.engine == "vllm"
    ]
    return [*specs, ModelDeploymentSpec.model_validate(LMCACHE_VARIANT)]


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    root = FlexibleArgumentParser(prog="vllm")
    serve.ServeSubcommand().subparser_init(root.add_subparsers(dest="subparser"))
    return root


def test_the_pinned_vllm_parses() -> None:
    assert version("vllm") == GPU_VLLM_VERSION


@pytest.mark.parametrize("spec", _gpu_specs(), ids=lambda s: s.name)
def test_rendered_arguments_are_accepted(
    parser: argparse.ArgumentParser, spec: ModelDeploymentSpec
) -> None:
    args = vllm_server_args(spec, bucket_name=BUCKET)
    parsed = parser.parse_args(["serve", *args])
    assert parsed.model_tag == args[0]
    assert parsed.tensor_parallel_size == spec.tensor_parallel_size
    assert parsed.max_model_len == spec.limits.max_model_len
    if spec.kv_cache is None:
        assert parsed.kv_transfer_config is None
        return
    config = parsed.kv_transfer_config
    assert config.kv_connector == "LMCacheConnectorV1"
    assert config.kv_role == "kv_both"
    assert config.is_kv_producer
    assert config.is_kv_consumer
    # The parser keeps the name; the engine converts it with AttentionConfig's own validator.
    from vllm.config import AttentionConfig

    backend = AttentionConfig.validate_backend_before(parsed.attention_backend)
    assert backend.name == "FLASHINFER"
    assert parsed.enforce_eager is False
