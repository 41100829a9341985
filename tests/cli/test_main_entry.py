"""The console script's entry point builds the app with only the command a run names, and
reads exactly as the app with every command: help, usage errors, a mistyped command."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Sequence

import pytest

from eks_inference.cli import main as entry

COMMANDS = ("plan", "upload", "preflight", "leftovers", "models", "manifests", "schema")
RUNS = (
    *((command, "--help") for command in COMMANDS),
    ("manifests", "--bogus"),
    ("manifests",),
    ("manifest",),
    ("--help",),
    (),
)


def _exit_code(
    run: Callable[[], None], args: Sequence[str], monkeypatch: pytest.MonkeyPatch
) -> object:
    """``run``'s exit code with ``args`` as the command line."""
    monkeypatch.setattr(sys, "argv", ["eks-inference", *args])
    with pytest.raises(SystemExit) as exited:
        run()
    return exited.value.code


@pytest.mark.parametrize("args", RUNS, ids=" ".join)
def test_a_run_reads_as_with_every_command(
    args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Freezing the test process's objects out of the collector would outlive the test.
    monkeypatch.setattr(gc, "freeze", lambda: None)
    built: list[tuple[str, ...]] = []
    make = entry._typer_app

    def recorded(commands: Sequence[Callable[..., None]]) -> object:
        built.append(tuple(command.__name__ for command in commands))
        return make(commands)

    monkeypatch.setattr(entry, "_typer_app", recorded)
    outputs = []
    for run in (entry.main, lambda: entry.app(prog_name="eks-inference")):
        code = _exit_code(run, args, monkeypatch)
        captured = capsys.readouterr()
        outputs.append((code, captured.out, captured.err))
    assert outputs[0] == outputs[1]
    # Every run says something: the help, or the error.
    assert outputs[0][1] or outputs[0][2]
    named = args[0] if args and args[0] in COMMANDS else None
    assert built == ([(named,)] if named else [])


def test_every_command_is_listed() -> None:
    assert tuple(command.__name__ for command in entry._COMMANDS) == COMMANDS
