"""Every GPU vLLM argument list the charts render, parsed by vLLM's own parser.

vLLM 0.34.0 (``versions.GPU_VLLM_VERSION``) with its dependencies (torch among them, some
gigabytes) is not part of the development environment every test runs in; where it is
installed, these tests run ``vllm serve``'s parser (``vllm.entrypoints.cli.serve``) on the
arguments of every GPU deployment of every engine that runs ``vllm serve`` (standalone vLLM
and KServe's predictor), of the reference platform, of the example platforms and of the chart
variants (LMCache's ``--kv-transfer-config``, GPU tensor parallelism), as each
engine renders its server, the API key's ``--middleware`` included. They rebuild the option
table under ``tests/upstream/`` from that parser too: ``tests/charts/test_vllm_server.py``
checks every rendered list against the table in every environment. They need only the spec
layer and the engines' server builders (no cdk8s), so an environment with vLLM and this
package's pure-Python dependencies runs them:

    python -m venv /tmp/vllm && /tmp/vllm/bin/pip install vllm==0.34.0 pytest
    PYTHONPATH=. /tmp/vllm/bin/python -m pytest tests/engine_parsers -p no:cacheprovider

Where pip cannot resolve vLLM 0.34.0's ``flashinfer-python==0.7.3``, install the wheel with
``--no-deps`` and its other requirements: building the parser never imports FlashInfer. The
tests' own imports (the package's dependencies, hypothesis, kubernetes-validate, moto) go in
the same environment.

vLLM 0.31.0 is the release of the AWS Deep Learning Containers vLLM EC2 image that multi-node
groups on EFA nodes run, and ``vllm-v0.31.0-serve-options.txt`` is its table. Where 0.31.0 is
the installed vLLM, these tests rebuild that table and parse the arguments of every
multi-node group with its parser (the other deployments run the pinned image alone). Where
pip puts CPU torch beside the wheel, torchvision, torchaudio and torchcodec (built against
CUDA torch) fail to load: remove them, the parser needs none. Then run pytest on
``tests/engine_parsers`` from the development environment's Python (``PYTHONPATH=.``) with
``/tmp/vllm031/lib/python3.11/site-packages`` appended to ``sys.path``, as for the Dynamo
parsers:

    python3.11 -m venv /tmp/vllm031 && /tmp/vllm031/bin/pip install vllm==0.31.0
    /tmp/vllm031/bin/pip uninstall -y torchvision torchaudio torchcodec

Each release's tests run where it is installed, and are skipped, saying so, elsewhere.
"""

from __future__ import annotations

import argparse
import os
from importlib.metadata import version

import pytest

from eks_inference.charts.api_key import requires_api_key
from eks_inference.charts.context import RenderContext
from eks_inference.charts.shipped import VLLM_API_KEY_MIDDLEWARE
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REPO
from tests.helpers.rendered import variants_spec
from tests.helpers.vllm_args import (
    EXPANDED,
    SERVE_OPTION_TABLES,
    ServeArgs,
    option_rows,
    rendered_vllm_args,
    serve_options,
)

# Parsing needs a platform to describe devices, chosen when vLLM is first imported; the
# server's image finds its GPUs itself.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
serve = pytest.importorskip("vllm.entrypoints.cli.serve")
INSTALLED = version("vllm")


PLATFORMS = (REPO / "deployments.yaml", *sorted((REPO / "examples").glob("*.yaml")))
CONTEXT = RenderContext(
    bucket_name="eks-inference-models-example", region="us-east-1", neuron_ray_image=""
)


def _platforms() -> list[tuple[str, PlatformSpec]]:
    return [
        *((path.name, PlatformSpec.from_yaml(path)) for path in PLATFORMS),
        ("variants", variants_spec()),
    ]


def _cases() -> list[tuple[str, ModelDeploymentSpec, bool, ServeArgs]]:
    """(id, spec, whether its route requires the API key, rendered server)."""
    cases = []
    for source, platform in _platforms():
        routes = platform.routes()
        for name, server in rendered_vllm_args(platform, CONTEXT).items():
            deployment = name.split("/")[0]
            keyed = requires_api_key(routes.get(deployment))
            cases.append((f"{source}:{name}", platform.deployment(deployment), keyed, server))
    return cases


CASES = _cases()


def _only_where_installed(release: str) -> None:
    if release != INSTALLED:
        pytest.skip(f"vLLM {INSTALLED} is installed, not {release}")


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    root = FlexibleArgumentParser(prog="vllm")
    serve.ServeSubcommand().subparser_init(root.add_subparsers(dest="subparser"))
    return root


def _serve_parser(root: argparse.ArgumentParser) -> argparse.ArgumentParser:
    (subparsers,) = (a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    found = subparsers.choices["serve"]
    assert isinstance(found, argparse.ArgumentParser)
    return found


def test_the_installed_vllm_is_a_recorded_release() -> None:
    assert INSTALLED in SERVE_OPTION_TABLES


def test_every_engine_running_vllm_serve_is_covered() -> None:
    engines = {spec.engine for _, spec, _, _ in CASES}
    assert {"vllm", "kserve"} <= engines
    assert any(spec.kv_cache is not None for _, spec, _, _ in CASES)
    assert any(keyed for _, _, keyed, _ in CASES)
    assert any(spec.multi_node is not None for _, spec, _, _ in CASES)


@pytest.mark.parametrize("release", sorted(SERVE_OPTION_TABLES))
def test_the_vendored_option_table_is_its_releases_parser(
    parser: argparse.ArgumentParser, release: str
) -> None:
    """tests/upstream/vllm-v<release>-serve-options.txt, row for row, is that release's parser."""
    _only_where_installed(release)
    rebuilt = [row.row() for row in option_rows(_serve_parser(parser))]
    assert rebuilt == [row.row() for row in serve_options(SERVE_OPTION_TABLES[release]).values()]


@pytest.mark.parametrize(
    ("spec", "keyed", "server"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_rendered_arguments_are_accepted(
    parser: argparse.ArgumentParser, spec: ModelDeploymentSpec, keyed: bool, server: ServeArgs
) -> None:
    _only_where_installed(server.release)
    args = server.args
    parsed = parser.parse_args(["serve", *args])
    assert parsed.model_tag == args[0]
    assert parsed.served_model_name == [spec.model.id]
    assert parsed.tensor_parallel_size == spec.tensor_parallel_size
    assert parsed.max_model_len == spec.limits.max_model_len
    assert parsed.gpu_memory_utilization == spec.limits.gpu_memory_utilization
    assert parsed.middleware == ([VLLM_API_KEY_MIDDLEWARE] if keyed else [])
    assert parsed.pipeline_parallel_size == spec.pipeline_parallel_size
    assert parsed.nnodes == spec.nodes_per_replica
    if spec.multi_node is not None:
        # The leader is rank 0 with the API server; each worker a headless rank of the group.
        assert parsed.distributed_executor_backend == "mp"
        assert parsed.node_rank == (1 if parsed.headless else 0)
        assert parsed.master_addr == EXPANDED["LWS_LEADER_ADDRESS"]
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
