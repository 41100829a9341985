"""The benchmark's counts read from a cloud assembly: the kubectl-handler resources."""

from __future__ import annotations

import json

import pytest

from bench.run import KUBECTL_RESOURCE, kubectl_resources
from tests.helpers.synthesis import Synthesized


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_each_deployment_of_the_reference_app_is_one_kubectl_run(reference: Synthesized) -> None:
    per_deployment, total = kubectl_resources(reference.outdir)
    assert per_deployment == 1
    parent = json.loads((reference.outdir / "InferenceStack.template.json").read_text())
    in_parent = sum(1 for r in parent["Resources"].values() if r["Type"] == KUBECTL_RESOURCE)
    deployments = len(list(reference.outdir.glob("*.nested.template.json")))
    assert deployments == 3
    assert total == in_parent + deployments
