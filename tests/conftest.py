"""Shared fixtures: each app is synthesized once per session, as `cdk synth` would.

A synth renders the whole stack in the Node.js kernel, and cfn-lint takes seconds on each
template, so tests share both: the reference app (``reference``, ``reference_karpenter``),
every other platform through :func:`synthesized_platform`, and each template's lint through
:func:`lint_all` and :func:`cfn_lint_errors`. Tests read what they share and never change it.
Tests that synthesize are marked ``synth``; those sharing an app are grouped on one xdist
worker (``xdist_group``: ``synth`` for the reference app, :func:`example_group` for an example
platform), and the groups run side by side. Apps are built with the context the CDK CLI
passes, so feature flags and template metadata (and with them template sizes) are those of
``cdk synth``.
"""

from __future__ import annotations

import functools
import json
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from eks_inference.specification.platform import PlatformSpec

# On CI the property tests draw the same examples every run, so that its verdict depends on the
# change and not on the draw; elsewhere each run draws new ones and may find a new case.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parents[1]
REFERENCE_PLATFORM = REPO / "deployments.yaml"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
STACK_NAME = "InferenceStack"
# Variables that would give a synth AWS credentials: none is set while an app synthesizes.
CREDENTIAL_VARIABLES = ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


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


def cdk_context() -> dict[str, Any]:
    """The context `cdk synth` gives the app, read from cdk.json (and cdk.context.json).

    An in-process ``App()`` reads neither file: the CLI passes their context (feature flags and
    cached lookups) and adds keys derived from cdk.json's settings, mirrored here: path and
    asset metadata on every resource (part of the template bytes CloudFormation limits),
    version reporting, and the stacks to bundle. The CLI also turns off failing synth on
    validation errors and reports them itself; tests keep the default, so an unacknowledged
    cdk-nag finding fails the fixture at once.
    """
    settings: dict[str, Any] = json.loads((REPO / "cdk.json").read_text())
    context: dict[str, Any] = {}
    cached = REPO / "cdk.context.json"
    if cached.is_file():
        context.update(json.loads(cached.read_text()))
    context.update(settings.get("context", {}))
    if settings.get("pathMetadata", True):
        context["aws:cdk:enable-path-metadata"] = True
    if settings.get("assetMetadata", True):
        context["aws:cdk:enable-asset-metadata"] = True
    if settings.get("versionReporting", True):
        context["aws:cdk:version-reporting"] = True
    else:
        context["aws:cdk:disable-version-reporting"] = True
    context["aws:cdk:bundling-stacks"] = settings.get("bundlingStacks", ["**"])
    return context


@dataclass(frozen=True)
class Synthesized:
    """A synthesized app: its output folder and every template, nested stacks included.

    ``templates``, ``template_files`` and ``template_bytes`` are keyed by stack name for
    deployed stacks and by construct path (``InferenceStack/Deployment-<name>``) for nested
    stacks; ``template_bytes`` is the size of each file CloudFormation receives.
    """

    outdir: Path
    templates: dict[str, dict[str, Any]]
    template_files: dict[str, Path]
    template_bytes: dict[str, int]
    stack: Any
    template: Any

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        """Resources of one type in the main stack, by logical id."""
        return {
            logical_id: resource
            for logical_id, resource in self.templates[STACK_NAME]["Resources"].items()
            if resource["Type"] == resource_type
        }

    def all_resources(self, resource_type: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """``(template key, logical id, resource)`` of one type across every template."""
        for key, template in self.templates.items():
            for logical_id, resource in template["Resources"].items():
                if resource["Type"] == resource_type:
                    yield key, logical_id, resource

    def nested(self, path: str) -> dict[str, Any]:
        """The template of the nested stack at construct path ``path``."""
        return self.templates[path]


def synthesize(app: Any, stack: Any, outdir: Path) -> Synthesized:
    """Synthesize ``app`` (which writes to ``outdir``) and read back every template."""
    from aws_cdk import NestedStack
    from aws_cdk.assertions import Template

    assembly = app.synth()
    files = {s.stack_name: outdir / s.template_file for s in assembly.stacks}
    for construct in app.node.find_all():
        if isinstance(construct, NestedStack):
            files[construct.node.path] = outdir / construct.template_file
    templates = {key: json.loads(path.read_text()) for key, path in files.items()}
    return Synthesized(
        outdir=outdir,
        templates=templates,
        template_files=files,
        template_bytes={key: path.stat().st_size for key, path in files.items()},
        stack=stack,
        template=Template.from_json(templates[STACK_NAME]),
    )


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


def example_group(example: Path) -> pytest.MarkDecorator:
    """The xdist group of the tests of the example platform ``example`` (a file of
    :data:`EXAMPLES`): they run on one worker, which synthesizes and lints it once."""
    return pytest.mark.xdist_group(f"example-{example.stem}")


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


@functools.cache
def _lint(text: str, regions: tuple[str, ...]) -> tuple[Any, ...]:
    """cfn-lint's matches on the template ``text`` in ``regions``, with every rule (as
    ``cfnlint.api.lint_all``). Cached per test process: the matches depend on the text and
    the regions alone, and modules that check the same app lint the same templates (the two
    provisioning modes share their nested stacks; an example is checked by two modules)."""
    from cfnlint.api import ManualArgs, lint

    args = ManualArgs(include_checks=["I"], include_experimental=True, regions=list(regions))
    return tuple(lint(text, config=args))


def lint_all(text: str) -> tuple[Any, ...]:
    """``cfnlint.api.lint_all(text)``: every rule, in every region (linted once per text)."""
    from cfnlint.api import REGIONS

    return _lint(text, tuple(REGIONS))


def cfn_lint_errors(template: dict[str, Any]) -> list[str]:
    """cfn-lint's errors on ``template``: every rule, in every region (as ``lint_all``), or in
    the regions the template's own cfn-lint configuration names, as the cfn-lint command reads
    it (a nested stack of FSx for Lustre names its bucket's region, since FSx is not offered
    in every one)."""
    from cfnlint.api import REGIONS

    regions = template.get("Metadata", {}).get("cfn-lint", {}).get("config", {}).get("regions")
    return [
        f"{m.rule.id} {m.message} at {'/'.join(map(str, m.path))}"
        for m in _lint(json.dumps(template), tuple(regions or REGIONS))
        if m.rule.severity == "error"
    ]
