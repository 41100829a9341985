"""LMCache on standalone vLLM (``kv_cache``): flags, environment, memory, disk tier and rules."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from eks_inference.catalog import INSTANCE_TYPES, sizing
from eks_inference.charts import kv_offload
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.versions import LMCACHE_VLLM_IMAGE
from tests.helpers.errors import errors_of
from tests.helpers.objects import PodTemplate, pod_templates
from tests.helpers.rendered import Rendered

_BASE: dict[str, Any] = {
    "name": "m",
    "model": "mistral-7b",
    "instance_type": "g6e.2xlarge",
    "engine": "vllm",
    "weights": {"prefix": "m/"},
}


def _spec(**fields: Any) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate({**_BASE, **fields})


def _problems(**fields: Any) -> dict[str, str]:
    return errors_of({**_BASE, **fields}, ModelDeploymentSpec)


def _lmcache_pods(variants: Rendered) -> list[PodTemplate]:
    return [
        p
        for p in pod_templates(variants.platform, variants.objects)
        if p.role == "vllm" and p.deployment.kv_cache is not None
    ]


def test_the_server_is_wired_to_lmcache(variants: Rendered) -> None:
    (pod,) = _lmcache_pods(variants)
    args = pod.server["args"]
    config = args[args.index("--kv-transfer-config") + 1]
    assert json.loads(config) == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    assert args[args.index("--attention-backend") + 1] == "FLASHINFER"
    # Neither release requires eager mode with the connector; CUDA graphs stay on.
    assert "--enforce-eager" not in args
    assert pod.server["image"] == LMCACHE_VLLM_IMAGE
    env = pod.env()
    offload = pod.deployment.kv_cache
    assert offload is not None
    assert offload.disk_gib is not None
    assert env["PYTHONHASHSEED"] == "0"
    assert env["LMCACHE_LOCAL_CPU"] == "True"
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == str(offload.cpu_gib)
    assert env["LMCACHE_LOCAL_DISK"] == f"file://{kv_offload.DISK_TIER_PATH}/"
    assert env["LMCACHE_MAX_LOCAL_DISK_SIZE"] == str(offload.disk_gib)
    # vLLM 0.29.0 and 0.34.0 read no VLLM_ATTENTION_BACKEND: the flag above replaces it.
    assert "VLLM_ATTENTION_BACKEND" not in env


def test_the_memory_request_grows_by_the_cpu_tier(variants: Rendered) -> None:
    (pod,) = _lmcache_pods(variants)
    spec = pod.deployment
    assert spec.kv_cache is not None
    server = sizing.server_host_memory_gib(spec.model.architecture)
    expected = f"{(server + spec.kv_cache.cpu_gib) * 1024}Mi"
    resources = pod.server["resources"]
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == expected
    share = sizing.pod_resources(spec.instance, spec.replicas_per_node)
    assert (server + spec.kv_cache.cpu_gib) * 1024 <= share.memory_mib


def test_the_disk_tier_is_a_bounded_reserved_directory(variants: Rendered) -> None:
    (pod,) = _lmcache_pods(variants)
    spec = pod.deployment
    assert spec.kv_cache is not None
    assert spec.kv_cache.disk_gib is not None
    mount = pod.mounts()[kv_offload.DISK_TIER_PATH]
    volume = pod.volume(mount["name"])
    requested = kv_offload.disk_request_gib(spec)
    assert requested >= spec.kv_cache.disk_gib
    assert volume["emptyDir"] == {"sizeLimit": f"{requested}Gi"}
    assert pod.server["resources"]["requests"]["ephemeral-storage"] == f"{requested}Gi"
    assert "ephemeral-storage" not in pod.server["resources"]["limits"]


def test_without_kv_cache_nothing_changes() -> None:
    spec = _spec()
    assert kv_offload.server_args(spec) == []
    assert kv_offload.environment(spec) == {}
    assert kv_offload.disk_volume(spec) is None
    assert kv_offload.disk_request(spec) == {}


def test_a_cpu_tier_larger_than_the_node_is_refused() -> None:
    problems = _problems(kv_cache={"offload": "cpu", "cpu_gib": 60})
    message = problems["kv_cache.cpu_gib"]
    assert "does not fit g6e.2xlarge" in message
    assert "use cpu_gib <= 39" in message
    _spec(kv_cache={"offload": "cpu", "cpu_gib": 39})


def test_a_disk_tier_larger_than_the_nvme_is_refused() -> None:
    problems = _problems(kv_cache={"offload": "cpu+disk", "cpu_gib": 8, "disk_gib": 1000})
    assert "419 GiB of local NVMe" in problems["kv_cache.disk_gib"]
    assert "use disk_gib <= 319" in problems["kv_cache.disk_gib"]


def test_a_disk_tier_without_nvme_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    without = dataclasses.replace(INSTANCE_TYPES["g6e.2xlarge"], local_nvme_gib=0)
    monkeypatch.setitem(INSTANCE_TYPES, "g6e.2xlarge", without)
    problems = _problems(kv_cache={"offload": "cpu+disk", "cpu_gib": 8, "disk_gib": 100})
    message = problems["kv_cache.offload"]
    assert "g6e.2xlarge has no local NVMe" in message
    assert "use offload: cpu" in message


def test_the_disk_size_follows_the_offload() -> None:
    assert "kv_cache.disk_gib" in _problems(kv_cache={"offload": "cpu+disk", "cpu_gib": 8})
    assert "kv_cache.disk_gib" in _problems(
        kv_cache={"offload": "cpu", "cpu_gib": 8, "disk_gib": 10}
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"engine": "rayservice"},
            "engine rayservice (Ray Serve on a KubeRay RayService) does not offload the KV "
            "cache with LMCache; remove kv_cache, or use engine: vllm",
        ),
        (
            {
                "instance_type": "inf2.48xlarge",
                "tensor_parallel_size": 8,
                "neuron": {"allow_compile_at_startup": True},
            },
            "engine vllm (a standalone vLLM Deployment) does not offload the KV cache with "
            "LMCache on inf2.48xlarge; remove kv_cache",
        ),
    ],
)
def test_engines_without_lmcache_refuse_it(fields: dict[str, Any], message: str) -> None:
    problems = _problems(kv_cache={"offload": "cpu", "cpu_gib": 8}, **fields)
    assert problems["kv_cache"] == message


def test_tier_tokens_follow_the_architecture() -> None:
    spec = _spec()
    arch = spec.model.architecture
    per_token = sizing.kv_cache_bytes_per_token(arch)
    assert per_token == 131_072  # 2 x 32 layers x 8 KV heads x 128 x 2 bytes
    assert sizing.kv_tier_tokens(arch, spec.instance, 1, 32) == 32 * 1024**3 // per_token


def test_disaggregation_is_refused_by_engines_that_do_not_disaggregate() -> None:
    problems = _problems(
        model="llama-3.1-70b",
        instance_type="g6e.48xlarge",
        tensor_parallel_size=8,
        disaggregation={
            "prefill": {"tensor_parallel_size": 4},
            "decode": {"tensor_parallel_size": 4},
        },
    )
    assert problems["disaggregation"] == (
        "engine vllm (a standalone vLLM Deployment) does not serve prefill and decode on "
        "separate workers; remove disaggregation, or use engine: dynamo"
    )


def test_the_catalog_knows_local_nvme_and_efa() -> None:
    # EC2 instance store tables: one 450 GB SSD on g6e.2xlarge, four 1,900 GB on g6e.48xlarge.
    assert INSTANCE_TYPES["g6e.2xlarge"].local_nvme_gib == 450 * 1000**3 // 1024**3
    assert INSTANCE_TYPES["g6e.48xlarge"].local_nvme_gib == 7600 * 1000**3 // 1024**3
    assert INSTANCE_TYPES["g6e.48xlarge"].efa
    assert not INSTANCE_TYPES["g6e.2xlarge"].efa
    assert not any(t.local_nvme_gib or t.efa for n, t in INSTANCE_TYPES.items() if n[:3] == "inf")
