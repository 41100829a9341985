"""Bad platform files through the real ``eks-inference`` console script (issue 13, items 6-10).

Each file gets one ``error:`` line on stderr and exit code 2, never a traceback, in bounded
time: the subprocess runs as a shell would run it, with a timeout.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.cli import run_cli
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REFERENCE_PLATFORM

REFERENCE_TEXT = REFERENCE_PLATFORM.read_text()


def _reference_with(edit: Callable[[dict[str, Any]], None]) -> str:
    data = yaml.safe_load(REFERENCE_TEXT)
    edit(data)
    return yaml.safe_dump(data, sort_keys=False)


def _laughs() -> str:
    lines = ["      l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        lines.append(f"      l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 10)}]")
    return REFERENCE_TEXT.replace(
        "      sequence_buckets: [128, 512, 1024, 2048, 4096]\n",
        "      sequence_buckets: [128, 512, 1024, 2048, 4096]\n      overrides:\n"
        + "\n".join(lines)
        + "\n",
    )


def _set(path: tuple[str | int, ...], value: object) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


def _every_problem(data: dict[str, Any]) -> None:
    _set(("model_bucket_name",), "Bad_Bucket")(data)
    _set(("deployments", 0, "name"), "Llama_3")(data)
    _set(("deployments", 0, "tensor_parallel_size"), 3)(data)


CONTENTS: list[object] = [
    # Item 6: a repeated key.
    pytest.param(
        REFERENCE_TEXT + "deployments: []\n",
        ("duplicate key 'deployments'", f"line {REFERENCE_TEXT.count(chr(10)) + 1}"),
        id="6-duplicate-key",
    ),
    # Item 7: alias expansion, and overrides NeuronConfig does not take.
    pytest.param(_laughs(), ("aliases expand the file beyond",), id="7-billion-laughs"),
    pytest.param(
        _reference_with(_set(("deployments", 0, "neuron", "overrides"), {"fuzed_qkv": True})),
        ("deployments.0.neuron.overrides.fuzed_qkv: 'fuzed_qkv' is not an override",),
        id="7-unknown-override",
    ),
    # Item 8: inputs that used to end in a traceback.
    pytest.param("a: " + "[" * 5000 + "]" * 5000 + "\n", ("nest",), id="8-deep-nesting"),
    pytest.param(b"model_bucket_name: caf\xe9\n", ("not UTF-8 text",), id="8-not-utf-8"),
    pytest.param(
        REFERENCE_TEXT.replace("max_size: 3", "max_size: " + "9" * 5000),
        ("of 5000 characters is out of range",),
        id="8-thousands-of-digits",
    ),
    # Item 9: field errors and rule errors in one line.
    pytest.param(
        _reference_with(_every_problem),
        (
            "model_bucket_name: 'Bad_Bucket' is not a valid bucket name",
            "deployments.0.name:",
            "deployments.0.tensor_parallel_size: tensor_parallel_size 3 is not supported",
        ),
        id="9-every-problem-at-once",
    ),
    # Item 10: fixes that work.
    pytest.param(
        _reference_with(_set(("deployments", 1, "weights", "prefix"), "models/mistral-7b")),
        ("deployments.1.weights.prefix:", "e.g. models/mistral-7b/"),
        id="10-prefix-suggestion",
    ),
    pytest.param(
        _reference_with(_set(("model_bucket_name",), "192.168.0.1")),
        ("model_bucket_name: '192.168.0.1' is formatted as an IP address",),
        id="10-ip-address-bucket",
    ),
    pytest.param(
        _reference_with(_set(("deployments", 1, "model"), "llama-3.1-70b")),
        ("deployments.1.tensor_parallel_size:", "a larger instance type where it fits: "),
        id="10-where-it-fits",
    ),
    pytest.param(
        _reference_with(_set(("deployments", 0, "limits", "gpu_memory_utilization"), 0.8)),
        ("deployments.0.limits.gpu_memory_utilization: gpu_memory_utilization applies to GPUs",),
        id="10-gpu-option-on-neuron",
    ),
]


@pytest.mark.parametrize(("content", "expected"), CONTENTS)
def test_bad_platform_file(tmp_path: Path, content: str | bytes, expected: tuple[str, ...]) -> None:
    path = tmp_path / "platform.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    line = one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2, *expected)
    assert line.startswith(f"error: invalid platform file {path}")


def test_a_fifty_megabyte_file(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    with path.open("wb") as stream:
        stream.truncate(50 * 1024 * 1024)
    completed = run_cli("plan", "--platform", path, cwd=tmp_path)
    one_line_error(completed, 2, f"invalid platform file {path}: larger than")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_dev_zero_as_the_platform_file(tmp_path: Path) -> None:
    completed = run_cli("plan", "--platform", "/dev/zero", cwd=tmp_path)
    one_line_error(completed, 2, "invalid platform file /dev/zero: not a regular file")


@pytest.mark.parametrize(
    "command", [("plan",), ("preflight",), ("manifests", "--out", "manifests")]
)
def test_every_command_reading_the_platform_file_refuses_it(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(REFERENCE_TEXT + "model_bucket_name: another-bucket\n")
    completed = run_cli(*command, "--platform", path, cwd=tmp_path)
    one_line_error(completed, 2, "duplicate key 'model_bucket_name'")
    assert not (tmp_path / "manifests").exists()


def test_a_platform_file_that_cannot_be_opened(tmp_path: Path) -> None:
    # Any OSError besides "not found" and "a directory": here a path through a regular file.
    (tmp_path / "file").write_text("")
    path = tmp_path / "file" / "platform.yaml"
    completed = run_cli("plan", "--platform", path, cwd=tmp_path)
    one_line_error(completed, 2, f"cannot read platform file {path}: Not a directory")


# Issue 17, item 5: a named pipe hung every command that reads the platform file.


@pytest.mark.parametrize(
    "command", [("plan",), ("preflight",), ("manifests", "--out", "manifests")]
)
def test_a_named_pipe_as_the_platform_file_is_refused_at_once(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    fifo = tmp_path / "platform.yaml"
    os.mkfifo(fifo)
    try:
        completed = run_cli(*command, "--platform", fifo, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        # subprocess.run has killed the command by now.
        pytest.fail(f"{command[0]} waited for a writer to the named pipe")
    one_line_error(completed, 2, f"invalid platform file {fifo}: not a regular file (a named pipe)")


# Issue 17, item 12: files that are no platform at all are said to be none.


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(
            "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n",
            "is not a platform file: it holds text, not a mapping of platform fields (it needs "
            "model_bucket_name, node_pools)",
            id="password-file",
        ),
        pytest.param(
            "".join(f"KEY_{i}: value {i}\n" for i in range(400)),
            "is not a platform file: none of its 400 keys ('KEY_0', 'KEY_1', 'KEY_2', ...) is a "
            "PlatformSpec field; it needs model_bucket_name, node_pools",
            id="key-value-listing",
        ),
        pytest.param("", "is not a platform file: it is empty", id="empty"),
        pytest.param("- a\n- b\n", "is not a platform file: it holds a list", id="list"),
    ],
)
def test_a_file_that_is_no_platform_is_said_to_be_none(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(content)
    line = one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2, expected)
    assert line.startswith(f"error: {path} is not a platform file: ")


def test_a_misspelt_field_gets_one_line_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(REFERENCE_TEXT.replace("tensor_parallel_size: 8", "tensor_paralel_size: 8"))
    line = one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2)
    assert line == (
        f"error: invalid platform file {path}: deployments.0.tensor_paralel_size: unknown field; "
        "did you mean tensor_parallel_size?"
    )


def test_a_five_thousand_character_name_is_not_echoed_whole(tmp_path: Path) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(_reference_with(_set(("model_bucket_name",), "b" * 5000)))
    line = one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2, "(5000 characters)")
    assert len(line) < 300 + len(str(path))


def test_a_key_with_a_newline_and_terminal_escapes_stays_one_escaped_line(tmp_path: Path) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(REFERENCE_TEXT + '"\\e[31mred\\nnext": 1\n')
    line = one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2)
    assert line == f"error: invalid platform file {path}: \\x1b[31mred next: unknown field"


def test_a_hundred_thousand_character_key_is_not_echoed_whole(tmp_path: Path) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(REFERENCE_TEXT + "? " + "k" * 100_000 + "\n: 1\n")
    line = one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2, "unknown field")
    assert len(line) < 300 + len(str(path))


def test_a_platform_path_with_a_newline_is_named_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "two\nlines.yaml"
    line = one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2, "not found")
    assert "two\\nlines.yaml" in line


def test_thousands_of_broken_deployments_are_refused_by_their_count_at_once(
    tmp_path: Path,
) -> None:
    """6,000 deployments that would each fail validation: refused by their number before any
    is validated (validating them all took about 2.8 s of CPU). Measured beyond the start-up
    every command pays (the interpreter and the imports, as ``--help`` costs them), so the
    bound is on the work the file causes, not on how busy the machine is."""
    data = yaml.safe_load(REFERENCE_TEXT)
    data["deployments"] = [{}] * 6000
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))

    def cpu_of(*args: str | Path) -> tuple[float, subprocess.CompletedProcess[str]]:
        started = os.times()
        completed = run_cli(*args, cwd=tmp_path)
        finished = os.times()
        cpu = (finished.children_user - started.children_user) + (
            finished.children_system - started.children_system
        )
        return cpu, completed

    start_up, _ = cpu_of("plan", "--help")
    cpu, completed = cpu_of("plan", "--platform", path)
    line = one_line_error(completed, 2, "6000 deployments")
    assert "one stack holds at most 500" in line
    assert cpu - start_up < 0.5, (cpu, start_up)
