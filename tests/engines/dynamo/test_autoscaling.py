"""An autoscaled Dynamo graph: KEDA scales each worker group's scaling adapter on its own load.

The ScaledObjects are checked against KEDA's pinned CRD, the graph against Dynamo's, and the
adapters the operator creates for the graph (by its own rule, ``generateAdapterName`` in
``deploy/operator/internal/controller/dgd_scaling_adapters_reconciler.go``) against the
adapter's CRD, so that each ScaledObject names an adapter that will exist and can be scaled.
"""

from __future__ import annotations

import copy
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from eks_inference import names
from eks_inference.charts.render import render_platform
from eks_inference.engines.dynamo import graph as dgd
from eks_inference.engines.dynamo.autoscaling import GROUP_SERIES_LABEL
from eks_inference.metrics import (
    VLLM_KV_CACHE_USAGE,
    VLLM_REQUESTS_RUNNING,
    VLLM_REQUESTS_WAITING,
    unknown_metrics,
)
from eks_inference.specification.capabilities import DerivesServiceNames
from eks_inference.specification.engines import engine_of
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.cli import run_cli
from tests.helpers.errors import one_line_error
from tests.helpers.objects import crd_validator, of_kind, one, schema_errors
from tests.helpers.platforms import CRDS, REPO
from tests.helpers.rendered import CONTEXT

EXAMPLE = REPO / "examples" / "dynamo.yaml"
ADAPTER_CRD = CRDS / "nvidia.com_dynamographdeploymentscalingadapters.yaml"
DGD_CRD = CRDS / "nvidia.com_dynamographdeployments.yaml"
SCALEDOBJECT_CRD = CRDS / "keda.sh_scaledobjects.yaml"
# A disaggregated graph of single-GPU groups that can grow within one g6e.48xlarge (8 GPUs),
# and the example's aggregated graph on g6e.2xlarge, both autoscaled.
DISAGG = {
    "name": "mistral-7b-disagg",
    "model": "mistral-7b",
    "instance_type": "g6e.48xlarge",
    "engine": "dynamo",
    "scaling": {"min_replicas": 1, "max_replicas": 4, "autoscale": True},
    "options": {
        "mode": "disaggregated",
        "prefill": {"tensor_parallel_size": 1},
        "decode": {"tensor_parallel_size": 1},
    },
    "weights": {"prefix": "models/mistral-7b/"},
}
AGG_SCALING = {"min_replicas": 1, "max_replicas": 2, "autoscale": True}


def _data() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["deployments"][1]["scaling"] = dict(AGG_SCALING)
    data["deployments"].append(copy.deepcopy(DISAGG))
    return dict(data)


@cache
def _objects() -> dict[str, list[dict[str, Any]]]:
    return render_platform(PlatformSpec.model_validate(_data()), CONTEXT)


def _scaled_objects(name: str) -> list[dict[str, Any]]:
    return of_kind(_objects()[name], "ScaledObject")


def _adapters_the_operator_creates(graph: dict[str, Any]) -> list[dict[str, Any]]:
    """The adapter of each component that sets ``scalingAdapter``, as the operator makes it:
    named ``<graph>-<component, lowercased>``, its replicas seeded from the component's, which
    the graph leaves unstated and the operator's defaulting webhook sets to 1
    (internal/webhook/defaulting/dynamographdeployment_handler.go; the reconciler's
    ``ptr.Deref(component.Replicas, 1)``,
    internal/controller/dgd_scaling_adapters_reconciler.go)."""
    return [
        {
            "apiVersion": dgd.ADAPTER_API_VERSION,
            "kind": dgd.ADAPTER_KIND,
            "metadata": {
                "name": f"{graph['metadata']['name']}-{component['name'].lower()}",
                "namespace": graph["metadata"]["namespace"],
            },
            "spec": {
                "replicas": component.get("replicas", 1),
                "dgdRef": {
                    "name": graph["metadata"]["name"],
                    "componentName": component["name"],
                },
            },
        }
        for component in graph["spec"]["components"]
        if "scalingAdapter" in component
    ]


def test_each_scaled_object_scales_an_adapter_the_operator_creates() -> None:
    adapter_crd = yaml.safe_load(ADAPTER_CRD.read_text().split("---", 1)[1])
    (stored,) = [v for v in adapter_crd["spec"]["versions"] if v["storage"]]
    assert stored["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    adapter_schema = crd_validator(ADAPTER_CRD, stored["name"])
    graph_schema = crd_validator(DGD_CRD, "v1beta1")
    keda = crd_validator(SCALEDOBJECT_CRD, "v1alpha1")
    expected_groups = {"mistral-7b-kv": {"worker"}, "mistral-7b-disagg": {"prefill", "decode"}}
    for name, groups in expected_groups.items():
        graph = one(_objects()[name], "DynamoGraphDeployment")
        assert schema_errors(graph_schema, graph) == []
        adapters = _adapters_the_operator_creates(graph)
        assert {a["spec"]["dgdRef"]["componentName"] for a in adapters} == groups
        for adapter in adapters:
            assert schema_errors(adapter_schema, adapter) == []
        scaled = _scaled_objects(name)
        assert len(scaled) == len(groups)
        refs = []
        for obj in scaled:
            assert schema_errors(keda, obj) == []
            ref = obj["spec"]["scaleTargetRef"]
            group, _, version = ref["apiVersion"].partition("/")
            assert (group, ref["kind"]) == (adapter_crd["spec"]["group"], stored_kind(adapter_crd))
            assert version == stored["name"]
            refs.append(ref["name"])
            assert obj["spec"]["minReplicaCount"] == 1
        assert sorted(refs) == sorted(a["metadata"]["name"] for a in adapters)


def stored_kind(crd: dict[str, Any]) -> str:
    return str(crd["spec"]["names"]["kind"])


def test_the_frontend_is_not_scaled_and_the_adapters_own_the_groups_counts() -> None:
    """The graph states no count for a scaled group: the operator's webhook refuses a change
    of it while an adapter holds one (internal/webhook/validation/shared_v1beta1.go), which a
    stated count applied again after KEDA scaled the group would be. Each group starts at the
    operator's default of one, and KEDA takes it to ``min_replicas``."""
    graph = one(_objects()["mistral-7b-disagg"], "DynamoGraphDeployment")
    components = {c["name"]: c for c in graph["spec"]["components"]}
    assert "scalingAdapter" not in components["frontend"]
    assert components["frontend"]["replicas"] == 1
    for group in ("prefill", "decode"):
        assert components[group]["scalingAdapter"] == {}
        assert "replicas" not in components[group]
    fixed = one(
        render_platform(PlatformSpec.from_yaml(EXAMPLE), CONTEXT)["mistral-7b-kv"],
        "DynamoGraphDeployment",
    )
    assert all("scalingAdapter" not in c for c in fixed["spec"]["components"])


def test_prefill_scales_on_its_queue_and_decode_on_its_batch_and_kv_cache() -> None:
    by_target = {
        o["spec"]["scaleTargetRef"]["name"]: o["spec"]["triggers"]
        for o in _scaled_objects("mistral-7b-disagg")
    }
    prefill = by_target["mistral-7b-disagg-prefill"]
    decode = by_target["mistral-7b-disagg-decode"]
    assert [t["metadata"]["query"].split("{")[0] for t in prefill] == [
        f"sum({VLLM_REQUESTS_WAITING.one()}"
    ]
    assert [t["metadata"]["query"].split("{")[0] for t in decode] == [
        f"sum({VLLM_REQUESTS_RUNNING.one()}",
        f"avg({VLLM_KV_CACHE_USAGE.one()}",
    ]
    for group, triggers in (("prefill", prefill), ("decode", decode)):
        for trigger in triggers:
            query = trigger["metadata"]["query"]
            assert f'{GROUP_SERIES_LABEL}="{group}"' in query
            assert unknown_metrics(query) == frozenset()
    # The running requests one decode worker should carry: three quarters of max_num_seqs.
    spec = PlatformSpec.model_validate(_data()).deployments[-1]
    assert decode[0]["metadata"]["threshold"] == str(spec.limits.max_num_seqs * 3 // 4)


def test_the_workers_series_carry_their_group() -> None:
    (monitor,) = [
        m
        for m in of_kind(_objects()["mistral-7b-disagg"], "PodMonitor")
        if m["metadata"]["name"].endswith(dgd.WORKER_COMPONENT)
    ]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    label = "".join(c if c.isalnum() else "_" for c in names.DYNAMO_WORKER_ROLE_LABEL)
    assert {
        "action": "replace",
        "sourceLabels": [f"__meta_kubernetes_pod_label_{label}"],
        "targetLabel": GROUP_SERIES_LABEL,
    } in endpoint["relabelings"]


def test_the_operators_worker_services_are_a_family_of_the_graph() -> None:
    spec = PlatformSpec.model_validate(_data()).deployments[-1]
    family = engine_of(spec).capability(DerivesServiceNames)
    assert family is not None
    pattern = re.compile(family.pattern(spec))
    assert pattern.fullmatch("mistral-7b-disagg-prefill-0a1b2c3d")
    assert pattern.fullmatch("mistral-7b-disagg-decode-89abcdef")
    assert not pattern.fullmatch("mistral-7b-disagg-frontend")
    assert "mistral-7b-disagg-frontend" in engine_of(spec).services(spec)


def _cli_platform(tmp_path: Path, change: dict[str, Any]) -> Path:
    data = _data()
    data["deployments"][-1] = {**data["deployments"][-1], **change}
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_groups_own_replicas_with_autoscale_are_refused(tmp_path: Path) -> None:
    options = copy.deepcopy(DISAGG["options"])
    assert isinstance(options, dict)
    options["decode"] = {"replicas": 2, "tensor_parallel_size": 1}
    one_line_error(
        run_cli("plan", "--platform", _cli_platform(tmp_path, {"options": options}), cwd=tmp_path),
        2,
        "deployments.2.options.decode.replicas",
        "each group scales between scaling.min_replicas (1) and max_replicas (4)",
        "remove options.decode.replicas",
    )


def test_a_graph_that_outgrows_one_node_at_max_replicas_takes_whole_efa_interfaces(
    tmp_path: Path,
) -> None:
    # At 5 x (TP 1 + TP 1) the graph crosses nodes over EFA, where a one-GPU worker would
    # take half of one of the g6e.48xlarge's 4 interfaces per 8 GPUs.
    scaling = {"min_replicas": 1, "max_replicas": 5, "autoscale": True}
    one_line_error(
        run_cli("plan", "--platform", _cli_platform(tmp_path, {"scaling": scaling}), cwd=tmp_path),
        2,
        "deployments.2.options.prefill.tensor_parallel_size",
        "4 EFA interfaces of a g6e.48xlarge (8 GPUs), and at TP 1 that is 1/2",
        "use tensor_parallel_size one of [2, 4, 8]",
    )


def test_a_graph_that_outgrows_a_node_without_efa_at_max_replicas_is_refused(
    tmp_path: Path,
) -> None:
    scaling = {"min_replicas": 1, "max_replicas": 2, "autoscale": True}
    path = _cli_platform(tmp_path, {"instance_type": "g6e.2xlarge", "scaling": scaling})
    one_line_error(
        run_cli("plan", "--platform", path, cwd=tmp_path),
        2,
        "deployments.2.scaling.max_replicas",
        "at max_replicas 2 the graph's prefill and decode workers",
        "more than one g6e.2xlarge (1)",
        "it has no EFA",
        "use an instance type with EFA (",
    )
