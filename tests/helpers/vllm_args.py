"""vLLM's argument tables under ``tests/upstream/`` and the argument lists the charts render.

- :func:`engine_args_table`: ``vllm-v0.11.0-engine-args.txt``, the ``EngineArgs`` fields and
  type aliases (what Triton's vLLM backend builds ``AsyncEngineArgs`` from).
- :func:`serve_options`: ``vllm-v0.34.0-serve-options.txt`` (or another release's table of
  :data:`SERVE_OPTION_TABLES`), every option of ``vllm serve`` with its kind;
  :func:`option_rows` extracts those rows from a vLLM's own parser (``tests/engine_parsers``
  regenerates the installed release's table and compares), and :func:`serve_args_problems`
  checks a rendered argument list against them.
- :func:`rendered_vllm_args`: the ``vllm serve`` argument list of every deployment of a
  platform, as its engine renders the server (no cdk8s needed, so the parser tests run
  beside vLLM alone).

Each table is tab-separated, one row a line, ``#`` lines its header.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from eks_inference.charts.context import RenderContext
from eks_inference.charts.serving import ServerInputs, serving_engine
from eks_inference.charts.vllm_server import VLLM_SERVE_COMMAND
from eks_inference.charts.weights_loaders import loader_of
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import (
    EFA_VLLM_VERSION,
    GPU_VLLM_VERSION,
    LMCACHE_VLLM_IMAGE,
    VLLM_EFA_IMAGE,
    VLLM_GPU_IMAGE,
)
from tests.helpers.platforms import UPSTREAM

SERVE_OPTIONS = UPSTREAM / "vllm-v0.34.0-serve-options.txt"
# vLLM 0.31.0's: the release in the AWS Deep Learning Containers vLLM EC2 image (vLLM's own
# image with the EFA installer's libfabric and aws-ofi-nccl) that multi-node groups on EFA
# nodes run.
SERVE_OPTIONS_V031 = UPSTREAM / "vllm-v0.31.0-serve-options.txt"
# Each recorded table by the vLLM release whose parser it was extracted from.
SERVE_OPTION_TABLES = {GPU_VLLM_VERSION: SERVE_OPTIONS, EFA_VLLM_VERSION: SERVE_OPTIONS_V031}
# The vLLM release whose parser reads each image's `vllm serve` arguments (LMCache's image is
# checked against the pinned release's: versions.LMCACHE_VLLM_IMAGE says why).
IMAGE_RELEASES = {
    VLLM_GPU_IMAGE: GPU_VLLM_VERSION,
    LMCACHE_VLLM_IMAGE: GPU_VLLM_VERSION,
    VLLM_EFA_IMAGE: EFA_VLLM_VERSION,
}


def table_rows(path: Path) -> list[list[str]]:
    """The rows of a tab-separated table, without its ``#`` header and blank lines."""
    return [
        line.split("\t")
        for line in path.read_text().splitlines()
        if line and not line.startswith("#")
    ]


def split_known(args: list[str], known: dict[str, ServeOption]) -> tuple[list[str], list[str]]:
    """``args`` split into the options of ``known`` with their values, and the rest: how a
    parser that parses its own options first (``parse_known_args``) leaves the others to the
    next one (Dynamo's worker, then vLLM's engine arguments)."""
    ours: list[str] = []
    rest: list[str] = []
    target = rest
    for arg in args:
        if arg.startswith("--"):
            target = ours if arg in known else rest
        target.append(arg)
    return ours, rest


def engine_args_table(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """``EngineArgs`` fields (name -> annotation) and type aliases (name -> definition)."""
    fields: dict[str, str] = {}
    aliases: dict[str, str] = {}
    for kind, *rest in table_rows(path):
        if kind == "field":
            fields[rest[1]] = rest[2]
        else:
            aliases[rest[0]] = rest[1]
    return fields, aliases


@dataclass(frozen=True)
class ServeOption:
    """One option string of ``vllm serve``.

    ``kind``: ``flag`` (takes no value), ``value`` (``detail`` names the conversion: ``int``,
    ``float``, ``str``, ``human-int``, ``human-int-or-auto``, ``json-or-str``), ``choices``
    (``detail`` is the JSON list of allowed values) or ``json`` (``detail``: ``dict``, or
    ``config`` for a config class validated from JSON). ``nargs``: ``1``, ``?``, ``+``, a
    count, or ``append`` (one value, repeatable).
    """

    option: str
    dest: str
    kind: str
    nargs: str
    detail: str

    def row(self) -> str:
        return "\t".join((self.option, self.dest, self.kind, self.nargs, self.detail))


@cache
def serve_options(path: Path = SERVE_OPTIONS) -> dict[str, ServeOption]:
    """The options of the vendored table, by option string."""
    return {row[0]: ServeOption(*row) for row in table_rows(path)}


# The conversions vLLM's parser applies, by the qualified name of the callable it passes as
# an argument's type (vllm/engine/arg_utils.py, vllm/utils/argparse_utils.py); a lambda
# normalizes a string before its choices are checked.
_VALUE_TYPES = {
    "int": "int",
    "float": "float",
    "str": "str",
    "human_readable_int": "human-int",
    "human_readable_int_or_auto": "human-int-or-auto",
    "union_dict_and_str": "json-or-str",
}
_JSON_TYPES = {"loads": "dict", "_compute_kwargs.<locals>.parse_dataclass": "config"}


def _base_type(convert: object) -> str:
    """The conversion under vLLM's ``optional_type``/``parse_type`` wrappers (closures)."""
    while getattr(convert, "__closure__", None):
        cells = [cell.cell_contents for cell in getattr(convert, "__closure__", ())]
        convert = next((c for c in cells if callable(c)), None)
    return str(getattr(convert, "__qualname__", "str"))


def _describe(action: argparse.Action) -> tuple[str, str, str]:
    if isinstance(action, argparse._AppendAction):
        nargs = "append"
    else:
        nargs = "1" if action.nargs is None else str(action.nargs)
    if action.nargs == 0:
        return "flag", "0", "-"
    if action.choices is not None:
        return "choices", nargs, json.dumps([str(c) for c in action.choices])
    base = _base_type(action.type)
    if base in _JSON_TYPES:
        return "json", nargs, _JSON_TYPES[base]
    return "value", nargs, _VALUE_TYPES.get(base, "str")


def option_rows(parser: argparse.ArgumentParser) -> list[ServeOption]:
    """Every option string ``parser`` accepts (help aside), in registration order.

    Read from the strings the parser registered rather than each action's
    ``option_strings``: from vLLM 0.34 a boolean's ``--no-enable-x`` is still accepted but
    hidden from help by leaving the action's list, and it is an option all the same.
    """
    strings: dict[int, list[str]] = {}
    for option, registered in parser._option_string_actions.items():
        strings.setdefault(id(registered), []).append(option)
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        kind, nargs, detail = _describe(action)
        accepted: tuple[str, ...] | list[str] = strings.get(id(action), ())
        rows += [ServeOption(o, action.dest, kind, nargs, detail) for o in accepted]
    return rows


# How many values each nargs takes: at least, at most (None: no limit).
_ARITY: dict[str, tuple[int, int | None]] = {
    "0": (0, 0),
    "1": (1, 1),
    "append": (1, 1),
    "?": (0, 1),
    "+": (1, None),
}
_HUMAN_INT = re.compile(r"\d+|\d+(?:\.\d+)?[kKmMgGtT]")


def _value_problem(option: ServeOption, value: str) -> str | None:
    if option.kind == "choices":
        allowed = json.loads(option.detail)
        return None if value in allowed else f"{value!r} is not one of {allowed}"
    if option.kind == "json" or (option.detail == "json-or-str" and value.lstrip()[:1] == "{"):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as error:
            return f"{value!r} is not JSON: {error}"
        if option.kind == "json" and option.detail == "config" and not isinstance(parsed, dict):
            return f"{value!r} is not a JSON object"
        return None
    checks: dict[str, Callable[[str], bool]] = {
        "int": lambda v: re.fullmatch(r"-?\d+", v) is not None,
        "float": lambda v: re.fullmatch(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?", v) is not None,
        "human-int": lambda v: _HUMAN_INT.fullmatch(v) is not None,
        "human-int-or-auto": lambda v: v in {"-1", "auto"} or _HUMAN_INT.fullmatch(v) is not None,
    }
    check = checks.get(option.detail)
    if check is not None and not check(value):
        return f"{value!r} is not a {option.detail} value"
    return None


def serve_args_problems(
    args: list[str], options: Mapping[str, ServeOption], *, positional: bool = True
) -> list[str]:
    """What vLLM's parser would refuse in ``vllm serve`` ``args``: the model first
    (positional), then options it has, flags with no value, each value of its option's kind,
    no option given twice unless repeatable. With ``positional=False`` (a parser without the
    positional model, as Dynamo's worker and frontend), options only."""
    problems = []
    if positional and (not args or args[0].startswith("-")):
        problems.append("the model must come first, as the positional model_tag")
    seen: set[str] = set()
    i = 1 if positional else 0
    while i < len(args):
        name = args[i]
        i += 1
        option = options.get(name)
        if option is None:
            problems.append(f"{name}: not an option of vllm serve")
            continue
        if option.dest in seen and option.nargs != "append":
            problems.append(f"{name}: given twice ({option.dest})")
        seen.add(option.dest)
        values = []
        while i < len(args) and not args[i].startswith("--"):
            values.append(args[i])
            i += 1
        low, high = _ARITY.get(option.nargs) or (int(option.nargs), int(option.nargs))
        if len(values) < low or (high is not None and len(values) > high):
            problems.append(f"{name} takes {option.nargs} value(s), got {values}")
            continue
        problems += [f"{name}: {problem}" for v in values if (problem := _value_problem(option, v))]
    return problems


@dataclass(frozen=True)
class _Claim:
    """The weights volume a loader that mounts one reads: only its claim's name reaches the
    pod, never the arguments."""

    claim_name: str


def _serve_containers(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        if value.get("command") == list(VLLM_SERVE_COMMAND):
            yield value
        for item in value.values():
            yield from _serve_containers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _serve_containers(item)


# What the kubelet puts in place of the variables a group's arguments refer to: the address
# the LeaderWorkerSet controller gives every container (the leader pod's name under the set's
# headless Service) and a worker's node rank (its worker-index label, by the downward API).
EXPANDED = {"LWS_LEADER_ADDRESS": "llm-group-0.llm-group.inference", "NODE_RANK": "1"}
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _expanded(arg: str) -> str:
    """``arg`` as the kubelet passes it: ``$(NAME)`` replaced for the variables of
    :data:`EXPANDED` (a reference to any other is left as written, as the kubelet does)."""
    return _REFERENCE.sub(lambda m: EXPANDED.get(m[1], m[0]), arg)


@dataclass(frozen=True)
class ServeArgs:
    """One ``vllm serve`` container's arguments, as the kubelet expands them, and the vLLM
    release of its image (:data:`IMAGE_RELEASES`), whose table they are checked against."""

    release: str
    args: list[str]

    @property
    def options(self) -> dict[str, ServeOption]:
        return serve_options(SERVE_OPTION_TABLES[self.release])


def serve_args_of(objects: list[dict[str, Any]]) -> list[ServeArgs]:
    """Every ``vllm serve`` container among ``objects``: its release and arguments."""
    return [
        ServeArgs(IMAGE_RELEASES[container["image"]], [_expanded(a) for a in container["args"]])
        for container in _serve_containers(objects)
    ]


def by_role(name: str, servers: list[ServeArgs]) -> dict[str, ServeArgs]:
    """A deployment's servers by pod: ``name`` for its one server, or for a multi-node
    group's leader (rendered first), and ``<name>/worker`` for the group's workers."""
    if len(servers) == 1:
        return {name: servers[0]}
    leader, worker = servers
    return {name: leader, f"{name}/worker": worker}


# The engines whose servers run `vllm serve`; tests/charts/test_vllm_server.py fails when
# the rendered platforms show another (Ray Serve passes engine arguments in its config,
# Triton's vLLM backend in model.json).
VLLM_SERVE_ENGINES = frozenset({"vllm", "kserve"})


def rendered_vllm_args(platform: PlatformSpec, context: RenderContext) -> dict[str, ServeArgs]:
    """Each GPU deployment's ``vllm serve`` arguments and release, for the engines of
    :data:`VLLM_SERVE_ENGINES`, as its engine renders its server (with the route and
    placement of ``platform``); Inferentia2 runs another vLLM release."""
    found = {}
    routes = platform.routes()
    for spec in platform.deployments:
        if spec.on_neuron or spec.engine not in VLLM_SERVE_ENGINES:
            continue
        mounted = loader_of(spec).mounted
        weights = _Claim(f"{spec.name}-weights") if mounted else None
        content = serving_engine(spec).server(
            ServerInputs(
                spec, platform.placement(spec), context, weights, None, routes.get(spec.name)
            )
        )
        lists = serve_args_of(list(content.objects))
        if lists:
            found.update(by_role(spec.name, lists))
    return found
