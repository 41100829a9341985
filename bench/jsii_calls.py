"""Count the requests Python sends to jsii's Node.js kernel while an app is built and synthesized.

``python -m bench.jsii_calls [--scale N] [-c node_provisioning=karpenter] [--top 25] [--json]``
builds the reference app (``deployments.yaml``, or ``N`` generated deployments of every kind,
as ``bench.scale_app`` does) exactly as ``cdk synth`` builds it, synthesizes it into a
temporary directory and prints the requests by kind, by target (the class created, the method
invoked, the property read or written) and by call site (the innermost frame in this
repository's code that sent the request).

Every request is one JSON round trip over the kernel's pipes: the count is deterministic where
seconds are not, so it is the measure to compare changes with. The counter wraps the one
method every request passes through (``_NodeProcess.send``), so assembly loads, callbacks
into Python (``complete``) and static calls are all counted; it changes nothing it counts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eks_inference.cdk_feature_flags import CDK_FEATURE_FLAGS

ROOT = Path(__file__).resolve().parent.parent
_THIS = str(Path(__file__).resolve())
_PROJECT = tuple(str(ROOT / part) for part in ("eks_inference", "bench", "tests", "app.py"))
# The kernel's request classes, by the name of the API they call.
_KINDS = {
    "LoadRequest": "load",
    "CreateRequest": "create",
    "DeleteRequest": "delete",
    "GetRequest": "get",
    "SetRequest": "set",
    "StaticGetRequest": "sget",
    "StaticSetRequest": "sset",
    "InvokeRequest": "invoke",
    "StaticInvokeRequest": "sinvoke",
    "BeginRequest": "begin",
    "StaticBeginRequest": "sbegin",
    "EndRequest": "end",
    "CallbacksRequest": "callbacks",
    "_CompleteRequest": "complete",
    "CompleteRequest": "complete",
    "StatsRequest": "stats",
    "GetScriptCommandRequest": "script",
}


@dataclass
class Tally:
    """Requests and the seconds spent in their round trips, by one key."""

    requests: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, key: str, seconds: float) -> None:
        self.requests[key] += 1
        self.seconds[key] += seconds

    def top(self, rows: int | None = None) -> dict[str, dict[str, float]]:
        """The ``rows`` keys with the most requests: ``{key: {"requests", "seconds"}}``."""
        return {
            key: {"requests": count, "seconds": round(self.seconds[key], 3)}
            for key, count in self.requests.most_common(rows)
        }


@dataclass
class JsiiCalls:
    """Requests sent to the kernel, by kind, target, call site and phase of the app's life.

    A request's seconds are its round trip as Python sees it: serializing it, the Node.js
    work it asks for (creating a construct, synthesizing the app) and reading the answer.
    """

    phase: str = "build"
    by_kind: Tally = field(default_factory=Tally)
    by_target: Tally = field(default_factory=Tally)
    by_site: Tally = field(default_factory=Tally)
    by_phase: Tally = field(default_factory=Tally)

    @property
    def total(self) -> int:
        return self.by_kind.requests.total()

    def record(self, request: object, seconds: float) -> None:
        kind = _KINDS.get(type(request).__name__, type(request).__name__)
        self.by_kind.add(kind, seconds)
        self.by_target.add(f"{kind} {_target(request)}", seconds)
        self.by_site.add(call_site(), seconds)
        self.by_phase.add(self.phase, seconds)

    def as_dict(self, top: int | None = None) -> dict[str, Any]:
        """Totals, every phase and kind, and the ``top`` targets and call sites."""
        return {
            "total": self.total,
            "round_trip_s": round(sum(self.by_kind.seconds.values()), 3),
            "by_phase": self.by_phase.top(),
            "by_kind": self.by_kind.top(),
            "by_target": self.by_target.top(top),
            "by_site": self.by_site.top(top),
        }


def _type_of_ref(ref: Any) -> str:
    """``aws-cdk-lib.aws_iam.Role@10042`` -> ``aws_iam.Role``: the object's class, short."""
    name = str(getattr(ref, "ref", ref)).split("@", 1)[0]
    return name.removeprefix("aws-cdk-lib.")


def _target(request: Any) -> str:
    if hasattr(request, "fqn") and hasattr(request, "property"):
        return f"{_type_of_ref(request.fqn)}.{request.property}"
    if hasattr(request, "fqn") and hasattr(request, "method"):
        return f"{_type_of_ref(request.fqn)}.{request.method}"
    if hasattr(request, "fqn"):
        return _type_of_ref(request.fqn)
    if hasattr(request, "objref") and hasattr(request, "method"):
        return f"{_type_of_ref(request.objref)}.{request.method}"
    if hasattr(request, "objref") and hasattr(request, "property"):
        return f"{_type_of_ref(request.objref)}.{request.property}"
    if hasattr(request, "name"):
        return str(request.name)
    return ""


def call_site() -> str:
    """``path:line (function)`` of the innermost frame in this repository's code, not this one."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename != _THIS and filename.startswith(_PROJECT):
            relative = Path(filename).relative_to(ROOT)
            return f"{relative}:{frame.f_lineno} ({frame.f_code.co_qualname})"
        frame = frame.f_back  # type: ignore[assignment]
    return "<outside the project>"


@contextmanager
def counting() -> Iterator[JsiiCalls]:
    """Count every kernel request sent while the block runs (and none after)."""
    from jsii._kernel.providers.process import _NodeProcess

    calls = JsiiCalls()
    send = _NodeProcess.send

    def counted_send(process: _NodeProcess, request: Any, response_type: Any) -> Any:
        start = time.perf_counter()
        try:
            return send(process, request, response_type)
        finally:
            calls.record(request, time.perf_counter() - start)

    _NodeProcess.send = counted_send  # type: ignore[method-assign,assignment]
    try:
        yield calls
    finally:
        _NodeProcess.send = send  # type: ignore[method-assign]


def count_app(scale: int | None, context: dict[str, Any], outdir: Path) -> JsiiCalls:
    """The requests of building and synthesizing the reference app (or ``scale`` deployments)."""
    with counting() as calls:
        calls.phase = "import"
        from aws_cdk import App

        from eks_inference.stacks.app import build_app

        if scale is None:
            from eks_inference.cli.inputs import load_platform

            platform = load_platform(ROOT / "deployments.yaml")
        else:
            from bench.platforms import generated_platform

            platform = generated_platform(scale)
        calls.phase = "build"
        app = App(builtin_cloud_formation_validation=False, context=context, outdir=str(outdir))
        build_app(platform, app=app)
        calls.phase = "synth"
        app.synth()
    return calls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, help="N generated deployments instead of the file")
    parser.add_argument("-c", "--context", action="append", default=[], help="KEY=VALUE")
    parser.add_argument("--top", type=int, default=25, help="rows per table (default 25)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    # The context the reference app runs with under `cdk synth`: the library's feature flags,
    # then cdk.json's context, then the -c values.
    context = dict(CDK_FEATURE_FLAGS)
    context.update(json.loads((ROOT / "cdk.json").read_text()).get("context", {}))
    context.update(item.split("=", 1) for item in args.context)
    with tempfile.TemporaryDirectory() as tmp:
        calls = count_app(args.scale, context, Path(tmp))
    report = calls.as_dict(args.top)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['total']} requests, {report['round_trip_s']} s in round trips")
    for title in ("by_phase", "by_kind", "by_target", "by_site"):
        print(f"\n{title.replace('_', ' ')} (requests, seconds in round trips):")
        for key, row in report[title].items():
            print(f"{row['requests']:>7} {row['seconds']:8.3f}  {key}")


if __name__ == "__main__":
    main()
