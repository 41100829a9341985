"""Run the CDK app's entry point on many platform files in one process, measuring each run.

``python -m tests.stacks.app_entry_runner RESULTS FILE...`` runs what ``python app.py`` runs
(:func:`eks_inference.stacks.entry.main`) once per file, with the file as the ``platform``
context value in ``CDK_CONTEXT_JSON`` as the CDK CLI passes it, and writes one JSON object per
run to RESULTS: exit code, stderr, exception, CPU and wall seconds, the process's peak
resident memory during the run, and whether aws-cdk-lib had been imported by its end.

A file refused by its reading never gets as far as aws-cdk-lib, so what a run costs beyond the
interpreter's start-up is the same in one process as in its own; the start-up itself is
measured by running ``app.py`` as its own process (``tests/stacks/test_entry.py``).
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

from eks_inference.stacks.entry import main as app_main
from tests.cli.hostile_runner import (
    _peak_memory_mib,
    _reset_peak_memory,
    _stop,
    bounded_call,
)
from tests.helpers.platforms import REFERENCE_PLATFORM


def _run(platform: Path) -> dict[str, Any]:
    os.environ["CDK_CONTEXT_JSON"] = json.dumps({"platform": str(platform)})
    stderr = io.StringIO()
    reset = _reset_peak_memory()
    cpu, wall = time.process_time(), time.monotonic()
    with redirect_stderr(stderr):
        code, exception = bounded_call(lambda: app_main(default_platform=REFERENCE_PLATFORM))
    return {
        "file": str(platform),
        "exit_code": code,
        "stderr": stderr.getvalue(),
        "exception": exception,
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.monotonic() - wall,
        "peak_rss_mib": _peak_memory_mib(reset),
        "loaded_aws_cdk": "aws_cdk" in sys.modules,
    }


def main(argv: list[str]) -> None:
    results, *files = argv
    signal.signal(signal.SIGALRM, _stop)
    records = [_run(Path(f)) for f in files]
    Path(results).write_text("\n".join(json.dumps(r) for r in records) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
