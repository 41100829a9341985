"""Shared fixtures: the reference app is synthesized once per test session.

A synth starts a Node.js process and renders the whole stack, so every test that needs the
reference templates shares one synthesis (tests that use it are marked ``synth`` and grouped
on one xdist worker).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE_PLATFORM = REPO / "deployments.yaml"
STACK_NAME = "InferenceStack"


def cdk_context() -> dict[str, Any]:
    """The context `cdk synth` passes from cdk.json, so tests synthesize what the CLI does."""
    context: dict[str, Any] = json.loads((REPO / "cdk.json").read_text())["context"]
    return context


@dataclass(frozen=True)
class Synthesized:
    """A synthesized app: its output folder, every stack's template, and the main stack's."""

    outdir: Path
    templates: dict[str, dict[str, Any]]
    stack: Any
    template: Any

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        """Resources of one type in the main stack, by logical id."""
        return {
            logical_id: resource
            for logical_id, resource in self.templates[STACK_NAME]["Resources"].items()
            if resource["Type"] == resource_type
        }


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The reference app (deployments.yaml) synthesized once, with cdk-nag on."""
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from eks_inference.platform import PlatformSpec
    from eks_inference.stacks import build_app

    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stack = build_app(
        PlatformSpec.from_yaml(REFERENCE_PLATFORM),
        app=App(context=cdk_context(), outdir=str(outdir)),
    )
    assembly = app.synth()
    templates = {s.stack_name: s.template for s in assembly.stacks}
    return Synthesized(
        outdir=outdir,
        templates=templates,
        stack=stack,
        template=Template.from_json(templates[STACK_NAME]),
    )
