"""The InferenceExtension add-on: named when a routed deployment's InferencePool has no CRD
installer, and the one installer of that CRD once created."""

from __future__ import annotations

import pytest

from eks_inference import names
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.constructs.addons import InferenceExtension, require
from eks_inference.constructs.addons.inference_extension import inferencepool_crd
from eks_inference.specification.provisioning import NodeProvisioning
from tests.constructs.addons.test_registry import ServingApp

NEEDS = PlatformNeeds(custom_resources=(names.INFERENCEPOOL_CRD,))


def test_a_pool_without_its_crd_names_the_add_on() -> None:
    app = ServingApp(NodeProvisioning.MANAGED)
    with pytest.raises(ValueError, match="needs the CRD") as raised:
        require(app.platform, NEEDS, deployment="llama-routed")
    assert (
        "add InferenceExtension "
        "(eks_inference.constructs.addons.inference_extension.InferenceExtension)"
    ) in str(raised.value)
    addon = InferenceExtension(app.cluster, "InferenceExtension", platform=app.platform)
    require(app.platform, NEEDS, deployment="llama-routed")
    assert app.platform.crd_installers[names.INFERENCEPOOL_CRD] is addon.manifest
    assert inferencepool_crd()["spec"]["group"] == "inference.networking.k8s.io"
