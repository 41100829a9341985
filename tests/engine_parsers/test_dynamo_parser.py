"""The Dynamo release's own parsers rebuild the option tables the worker and frontend argument
lists are checked against (``tests/upstream/dynamo-1.6.1-*-options.txt``), and take every
argument list the example platform renders.

``ai-dynamo`` 1.6.1 and vLLM 0.31.0 (``versions.DYNAMO_VERSION``, ``DYNAMO_VLLM_VERSION``) are
not part of the development environment; where both are importable beside this package's
dependencies, these tests build the parsers as ``dynamo.vllm`` and ``dynamo.frontend`` do and
compare every row. The tables were made so: ``ai-dynamo==1.6.1``, ``ai-dynamo-runtime==1.6.1``
and ``vllm==0.31.0`` with the parts of their dependencies the parsers import (CPU torch
2.13.0 among them) in a virtual environment whose ``site-packages`` was appended to the
development environment's ``sys.path``, with ``VLLM_TARGET_DEVICE=cpu``.
"""

from __future__ import annotations

import argparse
import json
import os
from importlib.metadata import version
from typing import Any

import pytest

from eks_inference.charts.render import render_platform
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import DYNAMO_VERSION, DYNAMO_VLLM_VERSION
from tests.helpers.platforms import REPO, UPSTREAM
from tests.helpers.rendered import CONTEXT
from tests.helpers.vllm_args import option_rows, table_rows

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
pytest.importorskip("dynamo.vllm.backend_args")
arg_utils = pytest.importorskip("vllm.engine.arg_utils")


def _unordered(rows: list[list[str]]) -> list[list[str]]:
    """``rows`` with each list of choices sorted: the tool-call and reasoning parsers' choices
    come from a set, whose order changes with the process's hash seed."""
    return [
        [*row[:-1], json.dumps(sorted(json.loads(row[-1])))] if row[-3] == "choices" else row
        for row in rows
    ]


def test_the_installed_releases_are_the_pinned_ones() -> None:
    assert version("ai-dynamo") == DYNAMO_VERSION
    assert version("vllm") == DYNAMO_VLLM_VERSION


def test_the_worker_table_is_the_workers_parser() -> None:
    from dynamo.common.configuration.groups.router_args import register_worker_router_help
    from dynamo.common.configuration.groups.runtime_args import DynamoRuntimeArgGroup
    from dynamo.vllm.backend_args import DynamoVllmArgGroup
    from vllm import platforms
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # Parsing describes a device; without one detected, the CPU platform, as the release's
    # own frontend coerces it (dynamo/frontend/main.py).
    if platforms.current_platform.device_type == "":
        platforms.current_platform = CpuPlatform()

    parser = argparse.ArgumentParser(allow_abbrev=False)
    DynamoRuntimeArgGroup().add_arguments(parser)
    DynamoVllmArgGroup().add_arguments(parser)
    register_worker_router_help(parser)
    engine = FlexibleArgumentParser(add_help=False)
    arg_utils.AsyncEngineArgs.add_cli_args(engine, async_args_only=False)
    rows = [["dynamo", *r.row().split("\t")] for r in option_rows(parser)]
    rows += [["vllm", *r.row().split("\t")] for r in option_rows(engine)]
    recorded = table_rows(UPSTREAM / f"dynamo-{DYNAMO_VERSION}-vllm-worker-options.txt")
    assert _unordered(rows) == _unordered(recorded)


def test_the_frontend_table_is_the_frontends_parser() -> None:
    from dynamo.frontend.frontend_args import FrontendArgGroup

    parser = argparse.ArgumentParser()
    FrontendArgGroup().add_arguments(parser)
    rows = [r.row().split("\t") for r in option_rows(parser)]
    recorded = table_rows(UPSTREAM / f"dynamo-{DYNAMO_VERSION}-frontend-options.txt")
    assert _unordered(rows) == _unordered(recorded)


def _rendered() -> list[tuple[str, dict[str, Any]]]:
    platform = PlatformSpec.from_yaml(REPO / "examples" / "dynamo.yaml")
    objects = render_platform(platform, CONTEXT)
    return [
        (spec.name, component)
        for spec in platform.deployments
        for obj in objects[spec.name]
        if obj["kind"] == "DynamoGraphDeployment"
        for component in obj["spec"]["components"]
    ]


def test_the_release_parses_every_rendered_worker_argument_list() -> None:
    """``dynamo.vllm``'s own argument handling (Dynamo's groups, then vLLM's engine arguments
    built into ``AsyncEngineArgs``, the KV transfer and events configs validated as vLLM's
    config classes) takes each rendered worker list."""
    from dynamo.vllm.args import _parse_cli_args
    from vllm import platforms
    from vllm.platforms.cpu import CpuPlatform

    if platforms.current_platform.device_type == "":
        platforms.current_platform = CpuPlatform()
    workers = [(n, c) for n, c in _rendered() if c["type"] in ("worker", "prefill", "decode")]
    assert workers
    for name, component in workers:
        (main,) = component["podTemplate"]["spec"]["containers"]
        config, engine = _parse_cli_args(main["args"])
        assert engine.tensor_parallel_size > 0, name
        if component["type"] in ("prefill", "decode"):
            assert config.disaggregation_mode == component["type"], name
            assert engine.kv_transfer_config.kv_connector == "NixlConnector", name


def test_the_release_parses_every_rendered_frontend_argument_list() -> None:
    from dynamo.frontend.frontend_args import FrontendArgGroup, FrontendConfig

    fronts = [(n, c) for n, c in _rendered() if c["type"] == "frontend"]
    assert fronts
    for name, component in fronts:
        (main,) = component["podTemplate"]["spec"]["containers"]
        parser = argparse.ArgumentParser()
        FrontendArgGroup().add_arguments(parser)
        args = parser.parse_args(main["args"][2:])
        config = FrontendConfig.from_cli_args(args)
        config.validate()
        assert config.router_mode == "kv", name
