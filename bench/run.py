"""Synth and rendering benchmarks, measured side by side: ``make bench`` (``python -m bench.run``).

The machine is noisy, so every variant runs once per round, interleaved, and the report gives
medians and ratios of medians: a ratio measured within one run is stable where absolute
seconds are not. The variants are ours (an empty app, the reference app with and without
cdk-nag, 100 generated deployments, and ``eks-inference manifests`` for those 100) and the
peer's (the reference platform built with eks-blueprints, with and without cdk-nag, and its
empty app; see ``bench/peer/README.md``), each synth through its own pinned CDK CLI. Every
time is of the whole process tree (:mod:`bench.timing`). Results go to ``bench/results.json``
and a table on stdout, with the load average before and after: numbers taken on a busy
machine say so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import yaml

from bench.peer import PEER, peer_setup, peer_synth
from bench.platforms import generated_platform
from bench.timing import Timing, timed

ROOT = Path(__file__).resolve().parent.parent
CDK = [str(ROOT / "node_modules/.bin/cdk"), "--no-notices", "--no-version-reporting"]
SCALE = 100
# `eks-inference manifests` as the installed console script runs it, from this checkout.
_MANIFESTS_CLI = "from eks_inference.cli.main import main; main()"

Results = dict[str, object]


def cdk_synth(app: str, out: Path) -> Timing:
    """One ``cdk synth`` of ``app`` into ``out`` with the project's pinned CLI."""
    return timed(
        lambda: subprocess.run(
            [*CDK, "synth", "--quiet", "--app", app, "--output", str(out)],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )


def manifests(platform_file: Path, out: Path) -> Timing:
    """One ``eks-inference manifests --platform platform_file --out out``, a new directory."""
    command = [sys.executable, "-c", _MANIFESTS_CLI, "manifests"]
    return timed(
        lambda: subprocess.run(
            [*command, "--platform", str(platform_file), "--out", str(out)],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )


def template_limits(out: Path) -> tuple[int, int]:
    """The largest resource count and template size over every stack, nested ones included."""
    resources = 0
    size = 0
    for template in out.glob("*.template.json"):
        size = max(size, template.stat().st_size)
        resources = max(resources, len(json.loads(template.read_text())["Resources"]))
    return resources, size


def resource_total(out: Path) -> int:
    """The resources of every stack of the cloud assembly in ``out``, nested ones included."""
    return sum(
        len(json.loads(template.read_text())["Resources"])
        for template in out.glob("*.template.json")
    )


# A Kubernetes manifest applied by aws-cdk-lib's kubectl handler: one run of it on create,
# update and delete.
KUBECTL_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"


def kubectl_resources(out: Path) -> tuple[int, int]:
    """The most kubectl-handler resources one deployment's nested stack holds, and how many the
    whole cloud assembly in ``out`` holds."""

    def count(template: Path) -> int:
        resources = json.loads(template.read_text())["Resources"].values()
        return sum(1 for r in resources if r["Type"] == KUBECTL_RESOURCE)

    nested = [count(t) for t in out.glob("*.nested.template.json")]
    return max(nested, default=0), sum(count(t) for t in out.glob("*.template.json"))


def peer_versions() -> dict[str, str]:
    """The peer's pinned npm packages (``bench/peer/package.json``), name -> exact version."""
    package = json.loads((PEER / "package.json").read_text())
    return {**package["dependencies"], **package["devDependencies"]}


def _load_average() -> list[float]:
    return [round(load, 2) for load in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-test-suite", action="store_true")
    args = parser.parse_args()

    load_at_start = _load_average()
    peer_setup()
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        platform_file = work / f"platform-{SCALE}.yaml"
        platform = generated_platform(SCALE).model_dump(mode="json", exclude_unset=True)
        platform_file.write_text(yaml.safe_dump(platform, sort_keys=False))
        variants: dict[str, Callable[[Path], Timing]] = {
            "empty": lambda out: cdk_synth(f"{python} -m bench.empty_app", out),
            "reference": lambda out: cdk_synth(f"{python} app.py", out),
            "reference_no_nag": lambda out: cdk_synth(f"{python} -m bench.no_nag_app", out),
            "scale": lambda out: cdk_synth(f"{python} -m bench.scale_app {SCALE}", out),
            "manifests": lambda out: manifests(platform_file, out),
            "peer_empty": lambda out: peer_synth(out, "empty"),
            "peer": lambda out: peer_synth(out, "peer"),
            "peer_nag": lambda out: peer_synth(out, "peer-nag"),
        }
        # A checkout's first run compiles the bytecode of everything it imports, which every
        # later run reads (the Makefile keeps it in the virtual environment); the rounds time
        # the later runs, as the peer's are timed after its TypeScript is compiled.
        for name in ("reference", "manifests"):
            variants[name](work / f"{name}-compile")
        timings: dict[str, list[Timing]] = {name: [] for name in variants}
        for round_ in range(args.rounds):
            for name, run in variants.items():
                timings[name].append(run(work / f"{name}-{round_}"))
        max_resources, max_bytes = template_limits(work / "scale-0")
        reference_resources, reference_bytes = template_limits(work / "reference-0")
        peer_resources, peer_bytes = template_limits(work / "peer-0")
        totals = {name: resource_total(work / f"{name}-0") for name in ("reference", "peer")}
        kubectl_per_deployment, kubectl_100 = kubectl_resources(work / "scale-0")
    load_at_end = _load_average()

    def wall(name: str) -> float:
        return statistics.median(t.wall_s for t in timings[name])

    def cpu(name: str) -> float:
        return statistics.median(t.cpu_s for t in timings[name])

    results: Results = {
        "synth_empty_s": round(wall("empty"), 2),
        "synth_reference_s": round(wall("reference"), 2),
        "synth_ratio": round(wall("reference") / wall("empty"), 2),
        "synth_100_s": round(wall("scale"), 2),
        "synth_100_cpu_s": round(cpu("scale"), 2),
        "synth_100_ratio": round(cpu("scale") / cpu("empty"), 2),
        "synth_empty_cpu_s": round(cpu("empty"), 2),
        "synth_reference_cpu_s": round(cpu("reference"), 2),
        "synth_reference_without_nag_cpu_s": round(cpu("reference_no_nag"), 2),
        "nag_cpu_s": round(cpu("reference") - cpu("reference_no_nag"), 2),
        "peer_nag_cpu_s": round(cpu("peer_nag") - cpu("peer"), 2),
        "peer_synth_empty_cpu_s": round(cpu("peer_empty"), 2),
        "peer_synth_cpu_s": round(cpu("peer"), 2),
        "peer_with_nag_cpu_s": round(cpu("peer_nag"), 2),
        "synth_cpu_ratio_vs_peer": round(cpu("reference") / cpu("peer_nag"), 2),
        "synth_cpu_ratio_vs_peer_without_nag": round(cpu("reference") / cpu("peer"), 2),
        "synth_cpu_above_floor_s": round(cpu("reference") - cpu("empty"), 2),
        "peer_synth_cpu_above_floor_s": round(cpu("peer") - cpu("peer_empty"), 2),
        "reference_resources": reference_resources,
        "reference_template_bytes": reference_bytes,
        "peer_resources": peer_resources,
        "peer_template_bytes": peer_bytes,
        "reference_resources_total": totals["reference"],
        "peer_resources_total": totals["peer"],
        "max_resources_per_stack_100": max_resources,
        "max_template_bytes_100": max_bytes,
        "manifests_100_s": round(cpu("manifests"), 2),
        "kubectl_resources_per_deployment": kubectl_per_deployment,
        "kubectl_resources_100": kubectl_100,
        "test_suite_s": None,
        "rounds": args.rounds,
        "cpu_s_by_round": {
            name: [round(t.cpu_s, 2) for t in runs] for name, runs in timings.items()
        },
        "load_average": {"start": load_at_start, "end": load_at_end},
        "cpus": os.cpu_count(),
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "peer_versions": peer_versions(),
    }
    if not args.skip_test_suite:
        results["test_suite_s"] = round(
            timed(lambda: subprocess.run(["make", "test"], cwd=ROOT, check=True)).wall_s, 1
        )
    (ROOT / "bench/results.json").write_text(json.dumps(results, indent=2) + "\n")
    width = max(map(len, results))
    for key, value in results.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
