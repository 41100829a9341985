"""Run CLI commands on many platform files in one process, measuring each run.

``python -m tests.cli.hostile_runner RESULTS OUT_DIR COMMAND... -- FILE...`` runs
``eks-inference COMMAND --platform FILE`` for every command and file through the CLI's own
entry point (the click group, in standalone mode, exactly as the console script runs it), and
writes one JSON object per run to RESULTS: exit code, stderr, exception, CPU and wall seconds,
and the process's peak resident memory during the run.

One process for all runs keeps a corpus of hundreds of files to seconds: the interpreter and
the imports are paid once, and measured separately by running the console script itself.
Each command first runs once on the reference platform, so that no run is charged for
importing what its command needs (boto3 for ``preflight``, the chart renderer for
``manifests``).
"""

from __future__ import annotations

import json
import resource
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import typer
from typer.testing import CliRunner

from eks_inference.cli.main import app
from tests.helpers.platforms import REFERENCE_PLATFORM

# Seconds after which a run is stopped and recorded as hung, so that one file that blocks
# (a named pipe once did) fails its own record instead of the whole corpus.
HANG_S = 10
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _reset_peak_memory() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux); whether it could."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def _peak_memory_mib(reset: bool) -> float:
    """Peak resident memory since the last reset, or of the whole process where none is."""
    if reset:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _arguments(command: str, platform: Path, out_dir: Path, index: int) -> list[str]:
    extra = ["--out", str(out_dir / f"{index}-{command}")] if command == "manifests" else []
    return [command, "--platform", str(platform), *extra]


class HungError(Exception):
    """A run took longer than :data:`HANG_S`."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise HungError(f"still running after {HANG_S} s")


def bounded_call(run: Callable[[], object]) -> tuple[int, str | None]:
    """Call ``run`` as a console script's process would end: its exit code (0 when it returns,
    1 for an exception it lets out, which is returned too), stopped after :data:`HANG_S`."""
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        run()
        return 0, None
    except SystemExit as exit_:
        return (exit_.code if isinstance(exit_.code, int) else 1), None
    except Exception as error:
        return 1, repr(error)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _invoke(runner: CliRunner, cli: Any, args: list[str]) -> tuple[int, str, str | None]:
    """Run ``cli`` as the console script does: exit code, stderr, and any exception it let out.

    ``CliRunner.invoke`` would build the click command again for every run, a cost of the
    console script's start-up that is measured elsewhere, not of reading a file.
    """
    with runner.isolation() as (_, stderr, _):
        code, exception = bounded_call(lambda: cli.main(args=args, prog_name="eks-inference"))
        return code, stderr.getvalue().decode(errors="replace"), exception


def run(commands: list[str], files: list[Path], out_dir: Path) -> list[dict[str, Any]]:
    """Every command on every file; one record per run."""
    runner = CliRunner()
    # The click command the console script builds on each start, built once here.
    cli = typer.main.get_command(app)
    signal.signal(signal.SIGALRM, _stop)
    for command in commands:
        _invoke(runner, cli, _arguments(command, REFERENCE_PLATFORM, out_dir, -1))
    records = []
    for index, platform in enumerate(files):
        for command in commands:
            reset = _reset_peak_memory()
            cpu, wall = time.process_time(), time.monotonic()
            code, stderr, exception = _invoke(
                runner, cli, _arguments(command, platform, out_dir, index)
            )
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            records.append(
                {
                    "file": platform.name,
                    "command": command,
                    "exit_code": code,
                    "stderr": stderr,
                    "exception": exception,
                    "cpu_s": cpu,
                    "wall_s": wall,
                    "peak_rss_mib": _peak_memory_mib(reset),
                }
            )
    return records


def main(argv: list[str]) -> None:
    results, out_dir, *rest = argv
    split = rest.index("--")
    records = run(rest[:split], [Path(f) for f in rest[split + 1 :]], Path(out_dir))
    Path(results).write_text("\n".join(json.dumps(r) for r in records) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
