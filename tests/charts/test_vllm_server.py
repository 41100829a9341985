"""Every ``vllm serve`` argument list the charts render for GPUs, checked against the option
table of its image's vLLM (``tests/upstream/vllm-v0.34.0-serve-options.txt`` for the pinned
release, ``vllm-v0.31.0-serve-options.txt`` for the EFA image of multi-node groups; each
rebuilt from its release's parser by ``tests/engine_parsers`` where that release is
installed): each option exists, flags take no value, values are of their option's kind,
choices among the allowed, JSON parses."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from eks_inference.charts.render import render_platform
from eks_inference.charts.vllm_server import REMOVED_VLLM_FLAGS
from eks_inference.specification.platform import PlatformSpec
from tests.charts.test_weights_loaders import FILE_SYSTEM
from tests.helpers.platforms import EXAMPLES
from tests.helpers.rendered import CONTEXT, Rendered
from tests.helpers.vllm_args import (
    SERVE_OPTION_TABLES,
    VLLM_SERVE_ENGINES,
    ServeArgs,
    by_role,
    rendered_vllm_args,
    serve_args_of,
    serve_args_problems,
    serve_options,
)

OPTIONS = serve_options()


@cache
def _example(path: Path) -> tuple[PlatformSpec, dict[str, list[dict[str, Any]]]]:
    """An example platform rendered, a file system of the stack's standing in for each one
    the stack would create (the manifests need its id, which only a deployment gives)."""
    platform = PlatformSpec.from_yaml(path)
    created = tuple(
        (spec.name, FILE_SYSTEM)
        for spec in platform.deployments
        if spec.weights.loader == "fsx"
        and (spec.weights.fsx is None or spec.weights.fsx.file_system_id is None)
    )
    return platform, render_platform(platform, replace(CONTEXT, file_systems=created))


def _platforms(
    reference: Rendered, variants: Rendered
) -> list[tuple[str, PlatformSpec, dict[str, list[dict[str, Any]]]]]:
    return [
        ("reference", reference.platform, reference.objects),
        ("variants", variants.platform, variants.objects),
        *((path.name, *_example(path)) for path in EXAMPLES),
    ]


def _gpu_serve_args(
    platform: PlatformSpec, objects: dict[str, list[dict[str, Any]]]
) -> dict[str, ServeArgs]:
    """Each GPU deployment's ``vllm serve`` servers found in its rendered objects."""
    found = {}
    for name, rendered in objects.items():
        if platform.deployment(name).on_neuron:
            continue
        lists = serve_args_of(rendered)
        if lists:
            found.update(by_role(name, lists))
    return found


def test_every_rendered_gpu_argument_list_passes_the_pinned_option_table(
    reference: Rendered, variants: Rendered
) -> None:
    checked = []
    releases = set()
    for source, platform, objects in _platforms(reference, variants):
        for name, server in _gpu_serve_args(platform, objects).items():
            problems = serve_args_problems(server.args, server.options)
            assert problems == [], (source, name, server)
            checked.append((platform.deployment(name.split("/")[0]), server.args))
            releases.add(server.release)
    # Each recorded release's table, the EFA image's (multi-node groups on EFA nodes) among
    # them.
    assert releases == set(SERVE_OPTION_TABLES)
    # Every engine that runs `vllm serve`, LMCache's connector and the API key's middleware.
    assert {spec.engine for spec, _ in checked} == VLLM_SERVE_ENGINES
    assert any("--kv-transfer-config" in args for _, args in checked)
    # LoRA adapters: the slots and a preloaded adapter, as an example and the variants render.
    assert any("--enable-lora" in args and "--lora-modules" in args for _, args in checked)
    # A multi-node group's leader and its headless workers.
    assert any("--nnodes" in args and "--headless" not in args for _, args in checked)
    assert any("--nnodes" in args and "--headless" in args for _, args in checked)
    assert any("--middleware" in args for spec, args in checked if spec.engine == "kserve")


def test_the_parser_tests_see_what_the_charts_render(
    reference: Rendered, variants: Rendered
) -> None:
    """The lists ``tests/engine_parsers`` parses (each engine's server alone, no cdk8s) are
    the rendered ones, for every engine that runs ``vllm serve``."""
    for source, platform, objects in _platforms(reference, variants):
        assert rendered_vllm_args(platform, CONTEXT) == _gpu_serve_args(platform, objects), source


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["m", "--max-model-len", "4k", "--enforce-eager"], None),
        (["m", "--tensor-parallel-sizes", "2"], "not an option"),
        (["m", "--enforce-eager", "true"], "takes 0 value"),
        (["m", "--dtype", "bf16"], "is not one of"),
        (["m", "--kv-transfer-config", "{'kv_connector': 1}"], "is not JSON"),
        (["m", "--kv-transfer-config", "[1]"], "not a JSON object"),
        (["m", "--tensor-parallel-size", "two"], "not a int value"),
        (["m", "--gpu-memory-utilization", "90%"], "not a float value"),
        (["m", "--max-num-seqs", "8", "--max-num-seqs", "16"], "given twice"),
        (["m", "--middleware", "a.B", "--middleware", "c.D"], None),
        (["--max-model-len", "4096"], "the model must come first"),
    ],
)
def test_the_check_refuses_what_the_parser_refuses(args: list[str], problem: str | None) -> None:
    problems = serve_args_problems(args, OPTIONS)
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


def test_flags_vllm_removed_are_not_options_of_the_pinned_release() -> None:
    """``--device`` is gone; ``--disable-log-requests`` came back in 0.34 only as the negation
    of ``--enable-log-requests``, not the option 0.12 removed (which took no part in a pair)."""
    assert {"--device", "--disable-log-requests"} == REMOVED_VLLM_FLAGS
    assert "--device" not in OPTIONS
    back = OPTIONS["--disable-log-requests"]
    assert (back.dest, back.kind) == ("enable_log_requests", "flag")
    assert OPTIONS["--enable-log-requests"].dest == back.dest


def test_the_table_reads_the_options_the_charts_render_as_the_source_declares_them() -> None:
    """Spot checks against vllm/engine/arg_utils.py and entrypoints/launchers/cli_args.py at
    v0.34.0: the kind each declared type becomes through _compute_kwargs."""
    kinds = {o.option: (o.kind, o.nargs, o.detail) for o in OPTIONS.values()}
    # served_model_name: str | list[str] | None -> one or more strings.
    assert kinds["--served-model-name"] == ("value", "+", "str")
    # max_model_len: parsed by human_readable_int_or_auto.
    assert kinds["--max-model-len"] == ("value", "1", "human-int-or-auto")
    assert kinds["--gpu-memory-utilization"] == ("value", "1", "float")
    assert kinds["--tensor-parallel-size"] == kinds["-tp"] == ("value", "1", "int")
    # FrontendArgs.middleware: action "append", type str.
    assert kinds["--middleware"] == ("value", "append", "str")
    # kv_transfer_config: KVTransferConfig | None, a config class validated from JSON.
    assert kinds["--kv-transfer-config"] == ("json", "1", "config")
    # load_format: str | LoadFormats -> a metavar, not choices: any string.
    assert kinds["--load-format"] == ("value", "1", "str")
    # model_loader_extra_config: dict | TensorizerConfig -> union_dict_and_str.
    assert kinds["--model-loader-extra-config"] == ("value", "1", "json-or-str")
    assert kinds["--enable-prefix-caching"] == kinds["--no-enable-prefix-caching"]
    assert kinds["--no-enable-prefix-caching"] == ("flag", "0", "-")
    assert "bfloat16" in kinds["--dtype"][2]
