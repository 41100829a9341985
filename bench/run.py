"""Synth and rendering benchmarks, measured side by side: ``make bench`` (``python -m bench.run``).

The machine is noisy, so every synth variant runs once per round, interleaved, and the report
gives medians and ratios of medians: a ratio measured within one run is stable where absolute
seconds are not. The variants are ours (an empty app, the reference app, 100 generated
deployments) and the peer's (the same cluster with eks-blueprints, and its empty app; see
``bench/peer/README.md``), each through its own pinned CDK CLI. Results go to
``bench/results.json`` and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.peer import peer_setup, peer_synth
from bench.platforms import generated_platform
from bench.timing import Timing, timed

ROOT = Path(__file__).resolve().parent.parent
CDK = [str(ROOT / "node_modules/.bin/cdk"), "--no-notices", "--no-version-reporting"]
SCALE = 100


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


def template_limits(out: Path) -> tuple[int, int]:
    """The largest resource count and template size over every stack, nested ones included."""
    resources = 0
    size = 0
    for template in out.glob("*.template.json"):
        size = max(size, template.stat().st_size)
        resources = max(resources, len(json.loads(template.read_text())["Resources"]))
    return resources, size


def render_manifests_seconds(rounds: int) -> float:
    """Median time to render every manifest of 100 deployments (charts alone, no CDK)."""
    from eks_inference.charts.render import render_files

    platform = generated_platform(SCALE)
    render_files(platform)

    def once() -> float:
        start = time.perf_counter()
        render_files(platform)
        return time.perf_counter() - start

    return statistics.median(once() for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-test-suite", action="store_true")
    args = parser.parse_args()

    peer_setup()
    python = sys.executable
    variants: dict[str, Callable[[Path], Timing]] = {
        "empty": lambda out: cdk_synth(f"{python} -m bench.empty_app", out),
        "reference": lambda out: cdk_synth(f"{python} app.py", out),
        "scale": lambda out: cdk_synth(f"{python} -m bench.scale_app {SCALE}", out),
        "peer_empty": lambda out: peer_synth(out, empty=True),
        "peer": lambda out: peer_synth(out),
    }
    timings: dict[str, list[Timing]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for name, synth in variants.items():
                timings[name].append(synth(Path(tmp) / f"{name}-{round_}"))
        max_resources, max_bytes = template_limits(Path(tmp) / "scale-0")

    def wall(name: str) -> float:
        return statistics.median(t.wall_s for t in timings[name])

    def cpu(name: str) -> float:
        return statistics.median(t.cpu_s for t in timings[name])

    results: dict[str, float | int | None] = {
        "synth_empty_s": round(wall("empty"), 2),
        "synth_reference_s": round(wall("reference"), 2),
        "synth_ratio": round(wall("reference") / wall("empty"), 2),
        "synth_100_s": round(wall("scale"), 2),
        "synth_100_ratio": round(wall("scale") / wall("empty"), 2),
        "synth_empty_cpu_s": round(cpu("empty"), 2),
        "synth_reference_cpu_s": round(cpu("reference"), 2),
        "peer_synth_empty_cpu_s": round(cpu("peer_empty"), 2),
        "peer_synth_cpu_s": round(cpu("peer"), 2),
        "synth_cpu_ratio_vs_peer": round(cpu("reference") / cpu("peer"), 2),
        "synth_cpu_above_floor_s": round(cpu("reference") - cpu("empty"), 2),
        "peer_synth_cpu_above_floor_s": round(cpu("peer") - cpu("peer_empty"), 2),
        "max_resources_per_stack_100": max_resources,
        "max_template_bytes_100": max_bytes,
        "manifests_100_s": round(render_manifests_seconds(args.rounds), 3),
        "test_suite_s": None,
        "rounds": args.rounds,
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
