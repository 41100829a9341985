"""Every fenced block of the pages runs, or is checked, as the page shows it.

A block says what it is in a one-line HTML comment right above its fence, which the site does
not show: ``<!-- docs: KIND -->``. A block without one fails
:func:`test_every_block_says_what_it_is`, which names the page, the line and the markers to
choose from, so that no page adds a block nothing checks. The kinds:

``run``
    A shell session of ``eks-inference`` commands that need nothing outside: each ``$ `` line
    (with its ``\\`` continuations) is run by :func:`~tests.helpers.cli.run_cli` in a temporary
    copy of the files the commands read (:data:`COPIED`), never in the checkout; it must exit
    0, and the lines up to the next ``$`` are what it prints (no lines: the page quotes none).
``output of COMMAND`` / ``excerpt of COMMAND``
    What ``COMMAND`` (an ``eks-inference`` command, run as for ``run``) prints: all of it, or
    consecutive lines of it.
``error of FILE with EDITS``
    The error every command reading the platform file ``FILE`` prints (read here in-process
    with their reader, ``eks_inference.cli.inputs.load_platform``) once ``EDITS`` (separated by
    ``; ``) are made to a copy of it: ``PATH=YAML`` sets a field (``deployments.0.kv_cache=
    {offload: cpu}``), ``+LINE`` appends a line of text. The block is the whole line
    (``error: ...``), or one problem of it: the field path, then its message indented by two
    spaces and wrapped; a message ending in ``...`` is compared up to there.
``quoted from FILE``
    Text of ``FILE``, a generated file another test keeps fresh; a ``<name>`` placeholder
    stands for any text without spaces or slashes.
``platform`` / ``platform from FILE``
    YAML that is a platform file, validated as every command reads one: as it is, or completed
    from ``FILE``: what the block sets replaces FILE's, mappings key by key, node pools and
    deployments by name (one of a new name is added); a block that is a list is deployments.
``fragment of a platform`` / ``fragment of a deployment``
    YAML that shows some fields, with placeholders (``<digest>``) and ``...`` lines for fields
    left out: every key it sets is a field of the platform or the deployment at that place (a
    list, of a platform, is its deployments).
``python``
    Python run in a subprocess, in a temporary directory, which must exit 0 within a timeout.
``compile``
    Python too costly or too partial to run (a CDK app, a sketch with ``...``): it compiles,
    and each name it imports from ``eks_inference`` exists (``from eks_inference import`` takes
    only :data:`eks_inference.__all__`).
``make``
    ``$ make TARGET`` lines; each target is one of the Makefile's (what a target runs is
    ``tests/test_readme_commands.py``'s).
``needs aws`` / ``needs cluster`` / ``needs network`` / ``needs docker``
    Not run, for what it needs; still, each ``eks-inference`` command in it parses with the
    CLI's own parser (the command, its flags and their values exist), each ``python -m
    MODULE`` names a module that exists (and an npm package it installs at a version, the
    version ``package.json`` pins), and Python compiles as for ``compile``. What a page quotes
    of ``eks-inference models --url URL`` is what it prints against a loopback server that
    answers as the vLLM server ``k8s_manifests/`` runs for the deployment the URL names.
``checked by TEST``
    A block another test runs (the own CDK app, synthesized from the page), or text only a
    test can cause (an error from a rendered object changed by hand): the test
    ``tests/FILE.py::NAME`` exists, and its module names the page (it reads the block there)
    or quotes the block's first line.
``diagram``
    A mermaid diagram, drawn by the site's build (``tests/test_docs_build.py``).
``include``
    Only ``--8<-- "PATH"``: the file the site includes there exists (and parses, for a
    ``json`` fence).

An ``eks-inference`` command a page names in running text (``eks-inference upload LOCAL_DIR
s3://BUCKET/PREFIX/ [--kind weights|artifacts]``) parses too, with each optional part given
and each alternative once; named alone, the command exists. A platform file a parsed command
names (``--platform examples/lmcache.yaml``, not a placeholder) is one of the checkout's. A
YAML example in the docstring of a spec the API reference documents (``Example (YAML)::``)
validates with that spec.

Printed text is compared line by line after one normalisation: the box-drawing characters of
rich's tables count as spaces, runs of spaces as one, and blank lines are left out.
"""

from __future__ import annotations

import ast
import http.server
import importlib
import importlib.util
import inspect
import itertools
import json
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import threading
import typing
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

import eks_inference
from eks_inference.cli.inputs import load_platform
from eks_inference.cli.main import app
from eks_inference.ops.errors import BadInput
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.cli import run_cli
from tests.helpers.platforms import REPO
from tests.test_docs import _FENCE
from tests.test_docs_references import PAGES
from tests.test_readme_commands import _TARGET

# What the commands the pages run read, copied into the directory they run in.
COPIED = ("deployments.yaml", "examples")
# Seconds a documented Python block may take; each takes about one.
PYTHON_TIMEOUT_S = 60
_MARKER = re.compile(r"^\s*<!-- docs: (.+?) -->$")
_KINDS = (
    "run",
    "output of COMMAND",
    "excerpt of COMMAND",
    "error of FILE with EDITS",
    "quoted from FILE",
    "platform",
    "platform from FILE",
    "fragment of a platform",
    "fragment of a deployment",
    "python",
    "compile",
    "make",
    "needs aws",
    "needs cluster",
    "needs network",
    "needs docker",
    "checked by TEST",
    "diagram",
    "include",
)
_NEEDS = ("aws", "cluster", "network", "docker")
# rich's table borders (U+2500 to U+257F), which the pages quote as plain columns.
_BOX = re.compile(r"[\u2500-\u257f]")
_PLACEHOLDER = re.compile(r"<[\w -]+>")
_INCLUDE = re.compile(r'^--8<-- "([^"]+)"$')
_TEST = re.compile(r"^(tests/[\w/]+\.py)::(\w+)$")


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: where it starts, its language, its text and its marker."""

    page: str
    line: int  # of the opening fence, counted from 1
    language: str
    text: str
    marker: str | None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def argument(self, prefix: str) -> str:
        marker = self.marker or ""
        assert marker.startswith(prefix), self
        return marker.removeprefix(prefix)


def _blocks(page: str, text: str) -> Iterator[Block]:
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        opening = _FENCE.match(lines[number])
        if opening is None:
            number += 1
            continue
        indent = len(lines[number]) - len(lines[number].lstrip(" "))
        fence = opening.group(1)
        end = next(
            (n for n in range(number + 1, len(lines)) if lines[n].strip().startswith(fence)),
            len(lines),
        )
        above = _MARKER.match(lines[number - 1]) if number else None
        yield Block(
            page,
            number + 1,
            lines[number].strip()[len(fence) :].strip(),
            "\n".join(line[indent:] for line in lines[number + 1 : end]),
            above.group(1) if above else None,
        )
        number = end + 1


BLOCKS = [block for page, text in PAGES.items() for block in _blocks(page, text)]


def _kind(block: Block) -> str | None:
    """The kind of ``_KINDS`` the block's marker is, or ``None``."""
    for kind in _KINDS:
        head = re.match(r"[a-z ]+?(?= [A-Z]|$)", kind)
        assert head is not None
        takes_argument = head.group() != kind
        if block.marker == kind and not takes_argument:
            return kind
        if takes_argument and (block.marker or "").startswith(f"{head.group()} "):
            return kind
    return None


def _of(*kinds: str) -> list[Block]:
    return [block for block in BLOCKS if _kind(block) in kinds]


def _params(blocks: list[Block]) -> list[Any]:
    return [pytest.param(block, id=block.where) for block in blocks]


NEEDS = [f"needs {what}" for what in _NEEDS]
# The languages of a shell block's fence.
_SHELL = ("", "bash", "console", "sh", "shell")


def _suggested(block: Block) -> tuple[str, ...]:
    """The markers a block most likely takes, from its language and first line."""
    first = block.text.lstrip().split("\n", 1)[0]
    if block.language == "mermaid":
        return ("diagram",)
    if block.language == "yaml":
        return ("platform from deployments.yaml", "fragment of a platform")
    if block.language == "python":
        return ("python", "compile")
    if first.startswith("$ make"):
        return ("make",)
    if first.startswith("$ eks-inference"):
        return ("run", "needs aws", "needs cluster")
    return ("needs aws", "needs cluster", "output of COMMAND")


def test_every_block_says_what_it_is() -> None:
    assert len(BLOCKS) > 40
    unmarked = [block for block in BLOCKS if _kind(block) is None]
    assert not unmarked, "\n".join(
        [
            "blocks that do not say what they are: put a marker on the line right above each "
            "fence; the kinds, each explained in tests/test_docs_blocks.py:",
            "  " + ", ".join(_KINDS),
            *(
                f"{block.where}: {block.language or 'plain'} block"
                + (f" with an unknown marker {block.marker!r}" if block.marker else "")
                + f"; add above line {block.line} "
                + " or ".join(f"`<!-- docs: {marker} -->`" for marker in _suggested(block))
                for block in unmarked
            ),
        ]
    )


def test_every_marker_is_right_above_a_fence() -> None:
    """A marker anywhere else (a blank line between it and the fence) would mark nothing."""
    misplaced = [
        f"{page}:{number}"
        for page, text in PAGES.items()
        for number, (line, below) in enumerate(itertools.pairwise([*text.splitlines(), ""]), 1)
        if _MARKER.match(line) and not _FENCE.match(below)
    ]
    assert not misplaced, f"markers not on the line right above a fence: {misplaced}"


def test_the_markers_classify_blocks() -> None:
    """The vocabulary is read as written: a marker of no kind is no kind."""

    def kind(marker: str) -> str | None:
        return _kind(Block("page.md", 1, "", "", marker))

    assert kind("error of deployments.yaml with +x") == "error of FILE with EDITS"
    assert kind("platform from examples/lmcache.yaml") == "platform from FILE"
    assert kind("platform") == "platform"
    assert kind("needs aws") == "needs aws"
    assert kind("needs a cluster") is None
    assert kind("python3") is None


# Commands and what they print.


def _normal(text: str) -> list[str]:
    lines = (" ".join(_BOX.sub(" ", line).split()) for line in text.splitlines())
    return [line for line in lines if line]


def _unwrapped(line: str) -> str:
    return line.strip().removesuffix("\\").strip()


def _commands(text: str, *, prompt: bool = True) -> list[tuple[str, list[str]]]:
    """Each command of a session (continuations joined) and the lines after it: the ``$ ``
    lines, or with ``prompt`` false every line."""
    session: list[tuple[str, list[str]]] = []
    continued = False
    for line in text.splitlines():
        if continued:
            command, shown = session.pop()
            session.append((f"{command} {_unwrapped(line)}", shown))
        elif line.startswith("$ ") or (not prompt and line.strip()):
            session.append((_unwrapped(line.removeprefix("$ ")), []))
        else:
            if session:
                session[-1][1].append(line)
            continue
        continued = line.rstrip().endswith("\\")
    return session


def _arguments(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    assert words[0] == "eks-inference", f"not an eks-inference command: {command}"
    return words[1:]


def _run_commands() -> set[str]:
    """Every command a ``run``, ``output of`` or ``excerpt of`` block runs."""
    quoted = {
        (block.marker or "").split(" of ", 1)[1]
        for block in _of("output of COMMAND", "excerpt of COMMAND")
    }
    return quoted | {command for block in _of("run") for command, _ in _commands(block.text)}


@pytest.fixture(scope="module")
def printed(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, subprocess.CompletedProcess[str]]:
    """What each command the pages run prints, run at once in one copy of the files they read."""
    where = tmp_path_factory.mktemp("docs-commands")
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, where / name)
        else:
            shutil.copy(source, where / name)
    commands = sorted(_run_commands())
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        results = pool.map(lambda c: run_cli(*_arguments(c), cwd=where), commands)
        return dict(zip(commands, results, strict=True))


def _succeeded(command: str, result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{command}: exit {result.returncode}: {result.stderr}"
    return result.stdout


@pytest.mark.parametrize("block", _params(_of("run")))
def test_a_session_prints_what_the_page_shows(
    block: Block, printed: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    session = _commands(block.text)
    assert session, f"{block.where}: a run block without a $ command"
    for command, shown in session:
        output = _succeeded(command, printed[command])
        if _normal("\n".join(shown)):
            assert _normal("\n".join(shown)) == _normal(output), (
                f"{block.where}: `{command}` prints\n{output}"
            )


@pytest.mark.parametrize("block", _params(_of("output of COMMAND", "excerpt of COMMAND")))
def test_a_quoted_output_is_what_the_command_prints(
    block: Block, printed: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    excerpt = block.marker is not None and block.marker.startswith("excerpt of ")
    command = block.argument("excerpt of " if excerpt else "output of ")
    output = _normal(_succeeded(command, printed[command]))
    shown = _normal(block.text)
    assert shown
    if excerpt:
        starts = [n for n in range(len(output)) if output[n : n + len(shown)] == shown]
        assert starts, f"{block.where}: `{command}` prints no such lines; it prints\n" + "\n".join(
            output
        )
    else:
        assert shown == output, f"{block.where}: `{command}` prints\n" + "\n".join(output)


# Platform files, whole, completed and in fragments.


def _set(data: Any, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        data = data[int(part)] if isinstance(data, list) else data[part]
    if isinstance(data, list):
        data[int(last)] = value
    else:
        data[last] = value


def _edited(source: str, edits: str, where: Path) -> Path:
    """A copy of the checkout's ``source`` under ``where`` with ``edits`` made to it."""
    text = (REPO / source).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    appended: list[str] = []
    for edit in edits.split("; "):
        if edit.startswith("+"):
            appended.append(edit[1:])
        else:
            path, value = edit.split("=", 1)
            _set(data, path, yaml.safe_load(value))
            text = yaml.safe_dump(data, sort_keys=False)
    target = where / source
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text + "".join(f"{line}\n" for line in appended), encoding="utf-8")
    return target


def _error_line(path: Path, shown_as: str) -> str:
    """What the CLI prints reading the platform file at ``path``, naming it ``shown_as``."""
    with pytest.raises(BadInput) as raised:
        load_platform(path)
    return f"error: {raised.value}".replace(str(path), shown_as)


@pytest.mark.parametrize("block", _params(_of("error of FILE with EDITS")))
def test_a_quoted_error_is_what_the_edited_file_gets(block: Block, tmp_path: Path) -> None:
    source, edits = block.argument("error of ").split(" with ", 1)
    line = _error_line(_edited(source, edits, tmp_path), source)
    first, *rest = block.text.splitlines()
    if not rest:
        assert block.text == line, f"{block.where}: the file gets\n{line}"
        return
    assert all(part.startswith("  ") for part in rest), f"{block.where}: message not indented"
    problem = f"{first}: {' '.join(part.strip() for part in rest)}"
    if problem.endswith("..."):
        problem = problem.removesuffix("...").rstrip("; ")
    assert problem in line, f"{block.where}: the file gets\n{line}"


def _yaml(block: Block) -> Any:
    assert block.language == "yaml", f"{block.where}: not a yaml block"
    return yaml.safe_load(block.text)


def _completed(given: Any, base: Any) -> Any:
    """``base`` with what ``given`` sets: mappings key by key, lists of named items (node
    pools, deployments) item by item by name (an item of a new name added), else replaced."""
    if isinstance(given, dict) and isinstance(base, dict):
        return {**base, **{key: _completed(value, base.get(key)) for key, value in given.items()}}
    items = [*given, *base] if isinstance(given, list) and isinstance(base, list) else None
    if items and all(isinstance(item, dict) and "name" in item for item in items):
        by_name = {item["name"]: item for item in given}
        kept = [_completed(by_name.pop(item["name"], item), item) for item in base]
        return [*kept, *by_name.values()]
    return given


def test_a_block_completes_the_items_of_its_name() -> None:
    base = {"region": "r", "deployments": [{"name": "a", "options": {"image": 1, "models": [1]}}]}
    given = {"deployments": [{"name": "a", "options": {"models": [2]}}, {"name": "b"}]}
    assert _completed(given, base) == {
        "region": "r",
        "deployments": [{"name": "a", "options": {"image": 1, "models": [2]}}, {"name": "b"}],
    }


@pytest.mark.parametrize("block", _params(_of("platform", "platform from FILE")))
def test_a_platform_block_is_a_valid_platform(block: Block, tmp_path: Path) -> None:
    data = _yaml(block)
    if block.marker != "platform":
        source = yaml.safe_load((REPO / block.argument("platform from ")).read_text("utf-8"))
        data = _completed({"deployments": data} if isinstance(data, list) else data, source)
    file = tmp_path / "platform.yaml"
    file.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    try:
        load_platform(file)
    except BadInput as error:
        pytest.fail(f"{block.where}: {error}")


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's type holds (in unions, lists, tuples, ``Annotated``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation] if annotation is not BaseModel else []
    return [model for arg in typing.get_args(annotation) for model in _models(arg)]


def _unknown_keys(models: list[type[BaseModel]], data: Any, at: str) -> list[str]:
    """Keys of ``data`` that no field of one of ``models`` takes (the fewest of any model)."""
    if isinstance(data, list):
        return [
            key for n, item in enumerate(data) for key in _unknown_keys(models, item, f"{at}{n}.")
        ]
    if not isinstance(data, dict) or not models:
        return []
    found = []
    for model in models:
        fields = {field.alias or name: field for name, field in model.model_fields.items()}
        unknown = []
        for key, value in data.items():
            if key not in fields:
                unknown.append(f"{at}{key}")
            else:
                unknown += _unknown_keys(_models(fields[key].annotation), value, f"{at}{key}.")
        found.append(unknown)
    return min(found, key=len)


@pytest.mark.parametrize(
    "block", _params(_of("fragment of a platform", "fragment of a deployment"))
)
def test_a_fragment_sets_only_fields_of_the_spec(block: Block) -> None:
    model = PlatformSpec if block.marker == "fragment of a platform" else ModelDeploymentSpec
    kept = "\n".join(line for line in block.text.splitlines() if line.strip() != "...")
    data = yaml.safe_load(kept)
    if isinstance(data, list) and model is PlatformSpec:
        data = {"deployments": data}
    assert isinstance(data, dict), f"{block.where}: not a mapping of fields"
    assert data, f"{block.where}: no fields"
    unknown = _unknown_keys([model], data, "")
    assert not unknown, f"{block.where}: no field of {model.__name__} is {unknown}"


def test_the_fragment_check_sees_a_key_no_field_takes() -> None:
    data = {"node_pools": [{"name": "a", "instance_type": "x"}], "deployments": [{"wieghts": {}}]}
    assert _unknown_keys([PlatformSpec], data, "") == [
        "node_pools.0.instance_type",
        "deployments.0.wieghts",
    ]


# Python.


def _eks_inference_imports(block: Block) -> list[str]:
    """What the block imports from the package that is not there."""
    missing = []
    for node in ast.walk(ast.parse(block.text)):
        if (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == "eks_inference"
        ):
            assert node.module is not None
            names = [alias.name for alias in node.names]
            if node.module == "eks_inference":
                missing += [name for name in names if name not in eks_inference.__all__]
            else:
                module = importlib.import_module(node.module)
                missing += [f"{node.module}.{name}" for name in names if not hasattr(module, name)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                ours = alias.name.split(".")[0] == "eks_inference"
                if ours and importlib.util.find_spec(alias.name) is None:
                    missing.append(alias.name)
    return missing


@pytest.mark.parametrize("block", _params(_of("python")))
def test_a_python_block_runs(block: Block, tmp_path: Path) -> None:
    assert block.language == "python", f"{block.where}: not a python block"
    script = tmp_path / "block.py"
    script.write_text(block.text, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        check=False,
        timeout=PYTHON_TIMEOUT_S,
        cwd=tmp_path,
    )
    assert result.returncode == 0, f"{block.where}: {result.stderr}"


@pytest.mark.parametrize(
    "block", _params([b for b in _of("compile", *NEEDS) if b.language == "python"])
)
def test_a_python_block_compiles_and_imports_what_exists(block: Block) -> None:
    assert block.language == "python", f"{block.where}: not a python block"
    compile(block.text, block.where, "exec")
    missing = _eks_inference_imports(block)
    assert not missing, f"{block.where} imports what the package does not have: {missing}"


# Commands that are not run, and everything else.


@cache
def _cli() -> Any:
    return typer.main.get_command(app)


def _parse(arguments: list[str]) -> None:
    """Parse ``eks-inference ARGUMENTS`` as the CLI would, without running the command; a
    platform file it names (not a placeholder such as ``FILE``) is one of the checkout's."""
    group = _cli()
    context = group.make_context("eks-inference", list(arguments))
    words = [*context._protected_args, *context.args]
    name, command, rest = group.resolve_command(context, words)
    assert command is not None, f"no command {words[0]}"
    platform = command.make_context(name, rest, parent=context).params.get("platform")
    if platform is not None and not str(platform).isupper():
        assert (REPO / platform).is_file(), f"no platform file {platform} in the checkout"


def test_the_parse_check_sees_a_flag_the_command_does_not_have() -> None:
    _parse(["upload", "--kind", "artifacts", "./embed-onnx/1", "s3://<bucket>/triton/"])
    with pytest.raises(typer.TyperException, match="--knd"):
        _parse(["upload", "--knd", "artifacts", "./embed-onnx/1", "s3://<bucket>/triton/"])


def _pinned_packages() -> dict[str, str]:
    """The npm packages ``package.json`` pins, by name."""
    pins: dict[str, str] = json.loads((REPO / "package.json").read_text("utf-8"))["devDependencies"]
    return pins


@pytest.mark.parametrize("block", _params([b for b in _of(*NEEDS) if b.language in _SHELL]))
def test_a_command_that_is_not_run_parses(block: Block) -> None:
    prompted = any(line.startswith("$ ") for line in block.text.splitlines())
    for command, _ in _commands(block.text, prompt=prompted):
        if command.split()[0] not in ("eks-inference", "python"):
            continue  # aws, curl, docker, export: other tools' commands
        words = shlex.split(command, comments=True)
        if words[:1] == ["eks-inference"]:
            try:
                _parse(words[1:])
            except typer.TyperException as error:
                pytest.fail(f"{block.where}: `{command}`: {error.format_message()}")
        elif words[:2] == ["python", "-m"]:
            assert importlib.util.find_spec(words[2]) is not None, f"{block.where}: {command}"
            # An npm package installed at a version: the version the project pins.
            for word in words[3:] if words[3:5] == ["npm", "install"] else []:
                name, at, version = word.rpartition("@")
                if at and name and not word.startswith("-"):
                    assert _pinned_packages().get(name) == version, (
                        f"{block.where}: {word}; package.json pins {_pinned_packages().get(name)}"
                    )


# `eks-inference CMD`, or its synopsis with [optional parts] and alternatives (a|b).
_INLINE_COMMAND = re.compile(r"`(eks-inference [^`]+)`")


def _inline_commands() -> list[tuple[str, str]]:
    return sorted(
        {(page, span) for page, text in PAGES.items() for span in _INLINE_COMMAND.findall(text)}
    )


def _invocations(synopsis: str) -> list[list[str]]:
    """The argument lists a synopsis stands for: each optional part given, each alternative
    of ``a|b`` once."""
    words = synopsis.replace("[", " ").replace("]", " ").split()[1:]
    invocations: list[list[str]] = [[]]
    for word in words:
        invocations = [[*given, choice] for given in invocations for choice in word.split("|")]
    return invocations


def test_the_pages_show_commands_inline() -> None:
    assert ("docs/cli.md", "eks-inference preflight [--deployment NAME]") in _inline_commands()
    assert _invocations("eks-inference schema [deployment|platform]") == [
        ["schema", "deployment"],
        ["schema", "platform"],
    ]


@pytest.mark.parametrize(("page", "synopsis"), _inline_commands())
def test_a_command_a_page_names_inline_parses(page: str, synopsis: str) -> None:
    """A command named alone exists; one with arguments parses, in each form it shows."""
    for arguments in _invocations(synopsis):
        if len(arguments) == 1:
            assert arguments[0] in _cli().commands, f"{page}: no command {arguments[0]}"
            continue
        try:
            _parse(arguments)
        except typer.TyperException as error:
            pytest.fail(f"{page}: `{synopsis}` as {arguments}: {error.format_message()}")


def _server_arguments(deployment: str) -> dict[str, str]:
    """The vLLM server arguments of ``deployment``'s rendered manifests (``--flag value``)."""
    for path in sorted((REPO / "k8s_manifests" / deployment).glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            pods = (document or {}).get("spec", {}).get("template", {}).get("spec", {})
            for container in pods.get("containers", []):
                arguments = [str(word) for word in container.get("args", [])]
                if "--served-model-name" in arguments:
                    return dict(itertools.pairwise(arguments))
    pytest.fail(f"k8s_manifests/{deployment} runs no vLLM server")


class _VllmModels(http.server.BaseHTTPRequestHandler):
    """Answers ``GET .../v1/models`` as vLLM's OpenAI server does for one served model."""

    answer: typing.ClassVar[bytes] = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.answer)))
        self.end_headers()
        self.wfile.write(self.answer)

    def log_message(self, format: str, *args: Any) -> None:
        """Nothing on stderr: the test reads what the command prints."""


@pytest.mark.parametrize(
    "block",
    _params(
        [
            block
            for block in _of(*NEEDS)
            if any(
                command.startswith("eks-inference models ") for command, _ in _commands(block.text)
            )
        ]
    ),
)
def test_the_models_a_page_lists_are_what_its_deployment_serves(block: Block) -> None:
    """``eks-inference models --url URL`` against a loopback server answering as the vLLM
    server the reference platform renders for the deployment URL's path names: its served
    model name and maximum length, ``owned_by: vllm``."""
    for command, shown in _commands(block.text):
        if not command.startswith("eks-inference models ") or not _normal("\n".join(shown)):
            continue
        words = _arguments(command)
        url = words[words.index("--url") + 1]
        served = _server_arguments(urllib.parse.urlsplit(url).path.split("/")[1])
        model = {
            "id": served["--served-model-name"],
            "object": "model",
            "owned_by": "vllm",
            "max_model_len": int(served["--max-model-len"]),
        }
        _VllmModels.answer = json.dumps({"object": "list", "data": [model]}).encode()
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _VllmModels)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            loopback = (
                f"http://127.0.0.1:{server.server_address[1]}{urllib.parse.urlsplit(url).path}"
            )
            words[words.index("--url") + 1] = loopback
            result = CliRunner().invoke(app, words, env={"OPENAI_API_KEY": "key"})
        finally:
            server.shutdown()
            server.server_close()
        assert result.exit_code == 0, f"{block.where}: {result.output}"
        output, quoted = _normal(result.stdout), _normal("\n".join(shown))
        assert any(output[n : n + len(quoted)] == quoted for n in range(len(output))), (
            f"{block.where}: `{command}` prints\n{result.stdout}"
        )


@pytest.mark.parametrize("block", _params(_of("make")))
def test_a_make_command_names_a_target(block: Block) -> None:
    targets = set(_TARGET.findall((REPO / "Makefile").read_text(encoding="utf-8")))
    session = _commands(block.text)
    assert session
    for command, _ in session:
        words = shlex.split(command, comments=True)
        assert words[0] == "make", f"{block.where}: {command}"
        assert words[1] in targets, f"{block.where}: {command} names no target of the Makefile"


@pytest.mark.parametrize("block", _params(_of("quoted from FILE")))
def test_a_quoted_text_is_in_its_file(block: Block) -> None:
    text = (REPO / block.argument("quoted from ")).read_text(encoding="utf-8")
    pattern = r"[^\s/]+".join(map(re.escape, _PLACEHOLDER.split(block.text.strip())))
    assert re.search(pattern, text), f"{block.where}: not in {block.argument('quoted from ')}"


@pytest.mark.parametrize("block", _params(_of("checked by TEST")))
def test_a_block_another_test_checks_is_read_by_it(block: Block) -> None:
    named = _TEST.match(block.argument("checked by "))
    assert named, f"{block.where}: name the test as tests/FILE.py::NAME"
    source = (REPO / named.group(1)).read_text(encoding="utf-8")
    functions = {node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
    assert named.group(2) in functions, f"{block.where}: no test {block.marker}"
    reads_the_page = Path(block.page).as_posix() in source
    assert reads_the_page or block.text.splitlines()[0] in source, (
        f"{block.where}: {named.group(1)} neither reads {block.page} nor quotes the block"
    )


@pytest.mark.parametrize("block", _params(_of("diagram")))
def test_a_diagram_is_drawn_by_the_site(block: Block) -> None:
    assert block.language == "mermaid", f"{block.where}: the site draws only mermaid"


@pytest.mark.parametrize("block", _params(_of("include")))
def test_an_included_file_exists(block: Block) -> None:
    included = _INCLUDE.fullmatch(block.text.strip())
    assert included, f"{block.where}: not one --8<-- line"
    path = REPO / included.group(1)
    assert path.is_file(), f"{block.where}: {included.group(1)} is not a file"
    if block.language == "json":
        json.loads(path.read_text(encoding="utf-8"))


# The API reference shows the docstrings of the package's names; a YAML example there is
# introduced by "(YAML)::" (reStructuredText's literal block) and is what the spec validates.
_DOCSTRING_YAML = re.compile(r"\(YAML\)::\n\n((?:(?: {4}.*)?\n)+)")


def _docstring_examples() -> list[tuple[str, str]]:
    """The YAML examples of the docstrings of the public specs (loaded at import, so that
    nothing here starts aws-cdk-lib)."""
    loaded = vars(eks_inference)
    return [
        (name, textwrap.dedent(example))
        for name in eks_inference.__all__
        if isinstance(loaded.get(name), type) and issubclass(loaded[name], BaseModel)
        for example in _DOCSTRING_YAML.findall(f"{inspect.getdoc(loaded[name])}\n")
    ]


def test_the_api_reference_shows_yaml_examples() -> None:
    assert "ModelDeploymentSpec" in {name for name, _ in _docstring_examples()}


@pytest.mark.parametrize(("name", "example"), _docstring_examples())
def test_a_yaml_example_of_a_docstring_is_valid(name: str, example: str) -> None:
    model: type[BaseModel] = vars(eks_inference)[name]
    model.model_validate(yaml.safe_load(example))
