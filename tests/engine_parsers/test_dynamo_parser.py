"""The Dynamo release's own parsers rebuild the option tables the worker and frontend argument
lists are checked against (``tests/upstream/dynamo-1.6.1-*-options.txt``).

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

import pytest

from eks_inference.versions import DYNAMO_VERSION, DYNAMO_VLLM_VERSION
from tests.helpers.platforms import UPSTREAM
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
