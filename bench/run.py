"""Synth and rendering benchmarks, measured side by side: ``make bench`` (``python -m bench.run``).

The machine is noisy, so every synth variant runs once per round, interleaved, and the report
gives medians and ratios of medians: a ratio measured within one run is stable where absolute
seconds are not. Results go to ``bench/results.json`` and a table on stdout.
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

from bench.platforms import generated_platform

ROOT = Path(__file__).resolve().parent.parent
CDK = [str(ROOT / "node_modules/.bin/cdk"), "--no-notices", "--no-version-reporting"]
SCALE = 100


def cdk_synth(app: str, out: Path) -> None:
    subprocess.run(
        [*CDK, "synth", "--quiet", "--app", app, "--output", str(out)],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def template_limits(out: Path) -> tuple[int, int]:
    """The largest resource count and template size over every stack, nested ones included."""
    resources = 0
    size = 0
    for template in out.glob("*.template.json"):
        size = max(size, template.stat().st_size)
        resources = max(resources, len(json.loads(template.read_text())["Resources"]))
    return resources, size


def render_manifests_seconds(rounds: int) -> float:
    """Median time to render every manifest of 100 deployments with cdk8s alone (no CDK)."""
    from eks_inference.charts.render import render_files

    platform = generated_platform(SCALE)
    render_files(platform)
    return statistics.median(timed(lambda: render_files(platform)) for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-test-suite", action="store_true")
    args = parser.parse_args()

    python = sys.executable
    apps = {
        "empty": f"{python} -m bench.empty_app",
        "reference": f"{python} app.py",
        "scale": f"{python} -m bench.scale_app {SCALE}",
    }
    times: dict[str, list[float]] = {name: [] for name in apps}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for name, app in apps.items():
                out = Path(tmp) / f"{name}-{round_}"
                times[name].append(timed(lambda app=app, out=out: cdk_synth(app, out)))
        max_resources, max_bytes = template_limits(Path(tmp) / "scale-0")

    empty, reference, scale = (statistics.median(times[n]) for n in apps)
    results: dict[str, float | int | None] = {
        "synth_empty_s": round(empty, 2),
        "synth_reference_s": round(reference, 2),
        "synth_ratio": round(reference / empty, 2),
        "synth_100_s": round(scale, 2),
        "synth_100_ratio": round(scale / empty, 2),
        "max_resources_per_stack_100": max_resources,
        "max_template_bytes_100": max_bytes,
        "manifests_100_s": round(render_manifests_seconds(args.rounds), 3),
        "test_suite_s": None,
        "rounds": args.rounds,
    }
    if not args.skip_test_suite:
        results["test_suite_s"] = round(
            timed(lambda: subprocess.run(["make", "test"], cwd=ROOT, check=True)), 1
        )
    (ROOT / "bench/results.json").write_text(json.dumps(results, indent=2) + "\n")
    width = max(map(len, results))
    for key, value in results.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
