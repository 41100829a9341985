"""The hostile corpus (issue 17): every command that reads a platform file, on 300 bad ones.

Each of ``plan``, ``manifests`` and ``preflight`` runs on every file of
:func:`tests.hostile_platforms.write_hostile_platforms` and must exit 2 (bad input) or 1 (a
failed check), or 0 for the few files that are odd but valid, with exactly one ``error:`` line
on stderr and never a traceback, in under a second and 300 MB each (a file that validates
and goes on to ``preflight``'s calls to the emulator has a second and a half).

Three commands on 300 files as 900 processes would take many minutes on two cores, nearly all
of it interpreter start-up and imports, which do not depend on the file. So every run happens
in one process (:mod:`tests.cli.hostile_runner`), through the CLI's own entry point, each
measured there (CPU seconds, peak memory); and a sample of files runs through the console
script as separate processes, measured by the kernel (``wait4``), to show that what one
process measures is what a user's command costs. CPU seconds rather than wall-clock seconds
are compared with the budget: they do not grow when other work shares the machine.

``preflight`` talks to the local S3/EC2 emulator, never to AWS: the files that validate are
checked against an empty account and fail those checks (exit 1).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.hostile_runner import HANG_S
from tests.helpers.hostile_platforms import Measured, run_measured, write_hostile_platforms
from tests.helpers.platforms import REPO

CORPUS_SIZE = 300
COMMANDS = ("plan", "manifests", "preflight")
# The budget for one run on one file: a second of CPU. The slowest to refuse, 9,000 unknown
# keys, takes about 0.35 s alone; a file whose cost grows with its size fails it by far.
MAX_SECONDS = 1.0
# A file that validates goes on to preflight's checks, which call the emulator's S3 and EC2
# APIs through boto3 (about 0.6 s alone, whatever the file): their own budget, with a margin
# for a machine shared with a synth.
MAX_CHECKING_SECONDS = 1.5
MAX_RSS_MIB = 300
# Seconds after which a command run as its own process counts as hung: start-up included,
# far beyond any run on a loaded machine.
_HANG_S = 60
# Files run as separate processes: one in this many of the corpus, plus the kinds that once
# hung or took long.
_SAMPLE_EVERY = 30
_SAMPLE_NAMED = ("fifo", "dev-zero", "directory", "laughs-9x10", "wide-mapping", "passwd")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_hostile_platforms(tmp_path_factory.mktemp("hostile"), CORPUS_SIZE)


def _console_script(args: list[str], cwd: Path) -> Measured:
    """``eks-inference ARGS`` as a shell runs it, measured."""
    script = Path(sys.executable).with_name("eks-inference")
    return run_measured([str(script), *args], cwd=cwd, hang_seconds=_HANG_S)


def _problems(code: int, stderr: str, exception: str | None = None) -> list[str]:
    """What is wrong with how a run ended (nothing for a good one)."""
    found = []
    if exception is not None:
        found.append(f"raised {exception}")
    if "Traceback" in stderr:
        found.append("printed a traceback")
    if code not in (0, 1, 2):
        found.append(f"exit code {code}")
    lines = stderr.splitlines()
    if code and (len(lines) != 1 or not lines[0].startswith("error: ")):
        found.append(f"stderr is not one error line: {stderr[:300]!r}")
    return found


@pytest.mark.long
def test_every_command_refuses_every_hostile_file_with_one_line_fast_and_small(
    corpus: list[Path], aws_env: str, tmp_path: Path
) -> None:
    results = tmp_path / "results.jsonl"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.cli.hostile_runner",
            str(results),
            str(tmp_path / "out"),
            *COMMANDS,
            "--",
            *map(str, corpus),
        ],
        cwd=REPO,
        check=True,
        # Every run is stopped after HANG_S by the runner itself; this only bounds the whole.
        timeout=len(corpus) * len(COMMANDS) * HANG_S,
    )
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(records) == len(corpus) * len(COMMANDS)
    failures = []
    for record in records:
        found = _problems(record["exit_code"], record["stderr"], record["exception"])
        checked = record["command"] == "preflight" and record["exit_code"] == 1
        if record["cpu_s"] >= (MAX_CHECKING_SECONDS if checked else MAX_SECONDS):
            found.append(f"took {record['cpu_s']:.2f} s of CPU")
        if record["peak_rss_mib"] >= MAX_RSS_MIB:
            found.append(f"peaked at {record['peak_rss_mib']:.0f} MiB")
        failures += [f"{record['command']} {record['file']}: {p}" for p in found]
    assert not failures, "\n".join(failures)
    # The corpus is hostile: nearly every file is refused, by every command alike.
    refused = [r for r in records if r["exit_code"] == 2]
    assert len(refused) >= 0.9 * len(records)
    lines_of: dict[str, set[str]] = {}
    for record in refused:
        lines_of.setdefault(record["file"], set()).add(record["stderr"])
    different = {name: lines for name, lines in lines_of.items() if len(lines) > 1}
    assert not different


@pytest.mark.long
def test_a_sample_of_hostile_files_as_separate_commands(
    corpus: list[Path], aws_env: str, tmp_path: Path
) -> None:
    sample = corpus[::_SAMPLE_EVERY] + [
        path for path in corpus if path.name.split("-", 1)[1].removesuffix(".yaml") in _SAMPLE_NAMED
    ]
    assert len(sample) >= len(_SAMPLE_NAMED) + CORPUS_SIZE // _SAMPLE_EVERY
    # What every command costs before it reads a file: the interpreter and the imports.
    start_up_cpu = _console_script(["--help"], tmp_path).cpu_seconds
    failures = []
    for index, path in enumerate(sample):
        # Each file through one command, the commands in turn: every command meets a third.
        command = COMMANDS[index % len(COMMANDS)]
        extra = ["--out", str(tmp_path / f"out-{index}")] if command == "manifests" else []
        run = _console_script([command, "--platform", str(path), *extra], tmp_path)
        found = _problems(run.code, run.stderr)
        cpu = run.cpu_seconds - start_up_cpu
        checked = command == "preflight" and run.code == 1
        if cpu >= (MAX_CHECKING_SECONDS if checked else MAX_SECONDS):
            found.append(f"took {cpu:.2f} s of CPU beyond start-up")
        if run.peak_mib >= MAX_RSS_MIB:
            found.append(f"peaked at {run.peak_mib:.0f} MiB")
        failures += [f"{command} {path.name}: {p}" for p in found]
    assert not failures, "\n".join(failures)
