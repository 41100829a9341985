"""Shared fixtures: each app is synthesized once per session, as `cdk synth` would.

A synth renders the whole stack in the Node.js kernel, and cfn-lint takes seconds on each
template, so tests share both: the reference app (``reference``, ``reference_karpenter``),
every other platform through :func:`synthesized_platform`, and each template's lint through
the cached readers of :mod:`tests.helpers.synthesis`. Tests read what they share and never
change it. Tests that synthesize are marked ``synth``; those sharing an app are grouped on one
xdist worker (``xdist_group``: ``synth`` for the reference app,
:func:`~tests.helpers.synthesis.example_group` for an example platform), and the groups run
side by side.
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from tests.helpers.platforms import REFERENCE_PLATFORM
from tests.helpers.synthesis import Synthesized, cdk_context, synthesize

if TYPE_CHECKING:
    from eks_inference.specification.platform import PlatformSpec

# On CI the property tests draw the same examples every run, so that its verdict depends on the
# change and not on the draw; elsewhere each run draws new ones and may find a new case.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Variables that would give a synth AWS credentials: none is set while an app synthesizes.
CREDENTIAL_VARIABLES = ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


_GROUPING_LOST = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``long`` first; and, on an xdist worker under ``--dist loadgroup``, notice
    when the groups are lost.

    xdist hands out tests in collection order, so a test that runs for seconds on its own (a
    teardown it waits out, a process of its own) collected last would end the run alone on
    one worker while the other has nothing left to do. Run first, the other worker's tests run
    beside it.

    xdist sends a group to one worker by suffixing its tests' node ids with ``@<group>``;
    where pytest no longer takes that suffix (pytest 9.2.0 with xdist 3.8.0,
    pytest-dev/pytest-xdist issue 1386), every test runs anywhere, each worker synthesizes
    every app its tests read, and the run only gets slower. :func:`_tests_are_grouped` then
    fails every test with the reason, rather than leaving it to the timings.
    """
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
    if not getattr(config.option, "loadgroup", False):
        return
    lost = [
        item.nodeid
        for item in items
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid
    ]
    if lost:
        config.stash[_GROUPING_LOST] = (
            f"--dist loadgroup: {len(lost)} grouped tests lost their group (e.g. {lost[0]}): "
            "this pytest and pytest-xdist do not group tests; install the versions "
            "requirements-dev.txt pins"
        )


@pytest.fixture(scope="session", autouse=True)
def _tests_are_grouped(request: pytest.FixtureRequest) -> None:
    """Fail the run when xdist lost the tests' groups (:func:`pytest_collection_modifyitems`)."""
    lost = request.config.stash.get(_GROUPING_LOST, None)
    if lost is not None:
        pytest.fail(lost)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker, ignore SIGINT from the end of the session, when its results go out.

    When the controller has every result it shuts its workers down, and execnet sends a
    worker that is still tearing down after 5 s a SIGINT to stop it. A worker's last teardown
    is mostly garbage collection of a large heap (pytest collects at unconfigure, to report
    unraisable exceptions), so the interrupt lands in the first Python code a collection runs:
    the gc callback Hypothesis registers (``gc_cumulative_time`` in
    ``hypothesis.internal.conjecture.junkdrawer``). An exception there cannot propagate, so a
    passing run ended with a stray ``KeyboardInterrupt`` traceback. Nothing is left to
    interrupt: the results are reported, and execnet still ends a worker that has not
    finished 10 s later.
    """
    if hasattr(session.config, "workerinput"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture(scope="session", autouse=True)
def _kubernetes_schemas_parsed_once() -> Iterator[None]:
    """kubernetes-validate reads and parses a kind's schema and its version's definitions
    (megabytes of JSON) from its package on every ``validate``: most of a validation's time.
    The files never change during a run, so each is parsed once per test process and the same
    (never modified) schema serves every validation against it."""
    from kubernetes_validate import utils

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(utils, "schema_contents", functools.cache(utils.schema_contents))
        yield


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The reference app (deployments.yaml) synthesized once, with cdk-nag on."""
    from aws_cdk import App

    from eks_inference.specification.platform import PlatformSpec
    from eks_inference.stacks import build_app

    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stack = build_app(
        PlatformSpec.from_yaml(REFERENCE_PLATFORM),
        app=App(context=cdk_context(), outdir=str(outdir)),
    )
    return synthesize(app, stack, outdir)


@pytest.fixture(scope="session")
def reference_karpenter(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The reference app in Karpenter mode (`cdk synth -c node_provisioning=karpenter`),
    synthesized once, with cdk-nag on."""
    from aws_cdk import App

    from eks_inference.specification.platform import PlatformSpec
    from eks_inference.stacks import build_app

    outdir = tmp_path_factory.mktemp("cdk.out.karpenter")
    app, stack = build_app(
        PlatformSpec.from_yaml(REFERENCE_PLATFORM),
        app=App(context={**cdk_context(), "node_provisioning": "karpenter"}, outdir=str(outdir)),
    )
    return synthesize(app, stack, outdir)


@pytest.fixture(scope="session")
def synthesized_platform(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[PlatformSpec], Synthesized]:
    """Synthesize a platform with `cdk synth`'s context, with cdk-nag on and no AWS credentials
    in the environment, once per session for each platform value: every module that checks the
    same platform reads the same cloud assembly."""
    apps: dict[str, Synthesized] = {}

    def synthesized(platform: PlatformSpec) -> Synthesized:
        from aws_cdk import App

        from eks_inference.stacks import build_app

        key = platform.model_dump_json()
        if key not in apps:
            outdir = tmp_path_factory.mktemp("cdk.out.platform")
            with pytest.MonkeyPatch.context() as environment:
                for variable in CREDENTIAL_VARIABLES:
                    environment.delenv(variable, raising=False)
                app, stack = build_app(platform, app=App(context=cdk_context(), outdir=str(outdir)))
                apps[key] = synthesize(app, stack, outdir)
        return apps[key]

    return synthesized
