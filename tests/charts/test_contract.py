"""The contract from charts to constructs: each chart's record of needs matches its objects.

The constructs read only :class:`PlatformNeeds`; these tests hold the record against the
objects each chart actually renders, for every deployment of both platforms, so a chart
cannot add a PersistentVolume, a custom resource or an identity without recording it.
"""

from __future__ import annotations

from typing import Any

import pytest

from eks_inference import names
from eks_inference.charts.contract import MountedPrefix, PlatformNeeds, ServiceAccountNeed
from eks_inference.charts.deployment import compile_job_charts, deployment_charts, needs_of
from eks_inference.charts.metadata import MAX_OBJECT_BYTES
from eks_inference.charts.record import ChartRecord
from eks_inference.specification.artifacts import artifact_prefix
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.rendered import CONTEXT

# Kinds that are not built into Kubernetes, and the CRD that defines each.
CUSTOM_RESOURCE_CRDS = {("ray.io/v1", "RayService"): names.RAYSERVICE_CRD}


def _charts(platform: PlatformSpec) -> list[tuple[ModelDeploymentSpec, ChartRecord]]:
    charts = []
    for spec in platform.deployments:
        placement = platform.placement(spec)
        rendered = deployment_charts(spec, placement, CONTEXT)
        for chart in [*rendered.charts, *compile_job_charts(rendered)]:
            charts.append((spec, chart))
    return charts


@pytest.fixture(scope="module", params=["reference_platform", "variants_platform"])
def charts(request: pytest.FixtureRequest) -> list[tuple[ModelDeploymentSpec, ChartRecord]]:
    return _charts(request.getfixturevalue(request.param))


def _is_custom(api_version: str) -> bool:
    """Built-in API groups are the core group, unqualified names and ``*.k8s.io``."""
    group = api_version.rpartition("/")[0]
    return "." in group and not group.endswith(".k8s.io")


def _kind(objects: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_every_namespace_used_is_recorded(
    charts: list[tuple[ModelDeploymentSpec, ChartRecord]],
) -> None:
    for _, chart in charts:
        used = {o["metadata"]["namespace"] for o in chart.objects if "namespace" in o["metadata"]}
        assert used == set(chart.needs.namespaces), chart.chart_id


def test_custom_resources_are_recorded_with_their_crds(
    charts: list[tuple[ModelDeploymentSpec, ChartRecord]],
) -> None:
    for _, chart in charts:
        custom = {
            CUSTOM_RESOURCE_CRDS[(o["apiVersion"], o["kind"])]
            for o in chart.objects
            if _is_custom(o["apiVersion"])
        }
        assert custom == set(chart.needs.custom_resources), chart.chart_id


def test_mounted_prefixes_are_the_persistent_volumes(
    charts: list[tuple[ModelDeploymentSpec, ChartRecord]],
) -> None:
    for _, chart in charts:
        recorded = {
            MountedPrefix(
                prefix=next(
                    o.removeprefix("prefix ")
                    for o in pv["spec"]["mountOptions"]
                    if o.startswith("prefix ")
                ),
                volume_name=pv["metadata"]["name"],
                claim_name=pv["spec"]["claimRef"]["name"],
                read_only=pv["spec"]["accessModes"] == ["ReadOnlyMany"],
            )
            for pv in _kind(chart.objects, "PersistentVolume")
        }
        assert recorded == set(chart.needs.mounted_prefixes), chart.chart_id
        claims = {c["metadata"]["name"] for c in _kind(chart.objects, "PersistentVolumeClaim")}
        assert claims == {m.claim_name for m in chart.needs.mounted_prefixes}


def test_identities_are_the_service_accounts_that_call_aws(
    charts: list[tuple[ModelDeploymentSpec, ChartRecord]],
) -> None:
    seen: dict[str, set[str]] = {}
    for spec, chart in charts:
        accounts = {a["metadata"]["name"] for a in _kind(chart.objects, "ServiceAccount")}
        for need in chart.needs.service_accounts:
            assert need.name in accounts, chart.chart_id
            assert need.namespace == names.INFERENCE_NAMESPACE
            seen.setdefault(spec.name, set()).add(need.role)
            if need.role == names.SERVER_IDENTITY:
                # Only streamed weights are read with the pods' own identity.
                assert spec.weights.loader == "runai_streamer"
                assert need == ServiceAccountNeed(
                    role=names.SERVER_IDENTITY,
                    name=names.service_account_name(spec.name),
                    namespace=names.INFERENCE_NAMESPACE,
                    pods="Model servers",
                    purpose=f"stream the weights under {spec.weights.prefix}",
                    reads=(spec.weights.prefix,),
                )
            else:
                assert need.role == names.COMPILE_IDENTITY
                assert need.reads == ()
                assert need.writes == (artifact_prefix(spec),)
        if spec.weights.loader == "mountpoint":
            assert not any(n.reads for n in chart.needs.service_accounts), chart.chart_id
    for spec, _ in charts:
        expected = {names.SERVER_IDENTITY} if spec.weights.loader == "runai_streamer" else set()
        if spec.has_compiled_artifacts:
            expected.add(names.COMPILE_IDENTITY)
        assert seen.get(spec.name, set()) == expected, spec.name


def test_needs_combine_without_repeats(
    charts: list[tuple[ModelDeploymentSpec, ChartRecord]],
) -> None:
    total = needs_of(chart for _, chart in charts)
    assert total.namespaces == (names.INFERENCE_NAMESPACE,)
    assert len(set(total.mounted_prefixes)) == len(total.mounted_prefixes)
    assert total + total == total
    assert PlatformNeeds() + total == total


def test_an_object_beyond_the_kubernetes_limit_is_refused_naming_it() -> None:
    big = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "huge", "namespace": names.INFERENCE_NAMESPACE},
        "data": {"blob": "x" * MAX_OBJECT_BYTES},
    }
    with pytest.raises(ValueError, match=r"ConfigMap inference/huge renders to 1,048,6\d\d bytes"):
        ChartRecord("too-big", "test", (big,), PlatformNeeds())
    small = {**big, "data": {"blob": "x" * 1000}}
    assert ChartRecord("fine", "test", (small,), PlatformNeeds()).to_json() == [small]
