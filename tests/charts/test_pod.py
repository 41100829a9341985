"""Pod templates of every chart: placement from the pool, resources, images, security."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from eks_inference import names
from eks_inference.catalog.sizing import pod_resources
from eks_inference.charts import kv_offload
from eks_inference.charts.pod import RAY_UID
from eks_inference.specification.kv_serving_rules import replica_memory_mib
from eks_inference.versions import (
    AWS_CLI_IMAGE,
    LMCACHE_VLLM_IMAGE,
    NEURON_VLLM_IMAGE,
    VLLM_EFA_IMAGE,
    VLLM_GPU_IMAGE,
)
from tests.helpers.checks import found
from tests.helpers.objects import of_kind, pod_templates
from tests.helpers.rendered import Rendered

ACCELERATORS = (names.NEURONCORE_RESOURCE, names.NVIDIA_GPU_RESOURCE, names.NEURON_DEVICE_RESOURCE)
# registry/name:tag or name@sha256:digest, with no tag `latest`.
PINNED = re.compile(
    r"^[^\s:@]+(:[0-9]+)?(/[^\s:@]+)*(:(?P<tag>[\w][\w.-]{0,127})|@sha256:[0-9a-f]{64})$"
)


def test_every_deployment_renders_pods(rendered: Rendered) -> None:
    roles = {
        (t.deployment.name, t.role) for t in pod_templates(rendered.platform, rendered.objects)
    }
    for spec in rendered.platform.deployments:
        expected = {"vllm"} if spec.engine == "vllm" else {"ray-head", "ray-worker"}
        assert {role for name, role in roles if name == spec.name} == expected


def test_node_selector_is_the_pools(rendered: Rendered) -> None:
    for template in pod_templates(rendered.platform, rendered.objects):
        assert template.spec["nodeSelector"] == template.pool.node_selector(), template.role


def test_tolerations_cover_the_pools_taints(rendered: Rendered) -> None:
    for template in pod_templates(rendered.platform, rendered.objects):
        tolerations = template.spec.get("tolerations", [])
        for taint in template.pool.taints:
            assert taint.toleration() in tolerations, (template.deployment.name, template.role)


def test_ray_head_requests_no_accelerator(rendered: Rendered) -> None:
    for service in found(of_kind(rendered.all_objects(), "RayService")):
        head = service["spec"]["rayClusterConfig"]["headGroupSpec"]
        assert head["rayStartParams"]["num-gpus"] == "0"
        assert head["rayStartParams"]["num-cpus"] == "0"
        assert "resources" not in head["rayStartParams"]
        for container in head["template"]["spec"]["containers"]:
            for side in ("requests", "limits"):
                assert not set(container["resources"][side]) & set(ACCELERATORS)


def test_accelerators_match_tensor_parallelism(rendered: Rendered) -> None:
    templates = pod_templates(rendered.platform, rendered.objects)
    for template in found(t for t in templates if t.role != "ray-head"):
        spec = template.deployment
        expected = names.NEURONCORE_RESOURCE if spec.on_neuron else names.NVIDIA_GPU_RESOURCE
        resources = template.server["resources"]
        for side in ("requests", "limits"):
            accelerators = {k: v for k, v in resources[side].items() if k in ACCELERATORS}
            assert accelerators == {expected: str(spec.tensor_parallel_size)}


def test_cpu_and_memory_are_the_nodes_share_requests_equal_limits(rendered: Rendered) -> None:
    for template in pod_templates(rendered.platform, rendered.objects):
        for container in template.containers:
            requests, limits = container["resources"]["requests"], container["resources"]["limits"]
            assert {"cpu", "memory"} <= set(requests)
            # Only an LMCache disk tier's ephemeral storage is requested without a limit.
            assert requests == {**limits, **kv_offload.disk_request(template.deployment)}, (
                container["name"]
            )
        if template.role != "ray-head":
            spec = template.deployment
            share = pod_resources(spec.instance, spec.replicas_per_node)
            assert template.server["resources"]["limits"]["cpu"] == share.cpu
            # The node's share, or with an LMCache CPU tier the server and its tier.
            memory = f"{replica_memory_mib(spec)}Mi"
            assert template.server["resources"]["limits"]["memory"] == memory


def test_autoscaler_sidecar_is_sized(rendered: Rendered) -> None:
    for service in found(of_kind(rendered.all_objects(), "RayService")):
        resources = service["spec"]["rayClusterConfig"]["autoscalerOptions"]["resources"]
        assert resources["requests"] == resources["limits"]
        assert {"cpu", "memory"} <= set(resources["limits"])


def test_images_are_pinned_and_pulled_if_not_present(rendered: Rendered) -> None:
    for template in pod_templates(rendered.platform, rendered.objects):
        for container in template.containers:
            match = PINNED.match(container["image"])
            assert match, container["image"]
            assert match.group("tag") != "latest"
            assert container["imagePullPolicy"] == "IfNotPresent"
    for text in rendered.files.values():
        assert ":latest" not in text


def test_ray_pods_run_as_the_ray_user_without_privileges(rendered: Rendered) -> None:
    templates = pod_templates(rendered.platform, rendered.objects)
    for template in found(t for t in templates if t.role != "vllm"):
        assert template.spec["securityContext"]["runAsUser"] == RAY_UID
        assert template.spec["securityContext"]["runAsNonRoot"] is True
        assert template.server["securityContext"]["allowPrivilegeEscalation"] is False


def test_only_the_ray_head_mounts_a_service_account_token(rendered: Rendered) -> None:
    for template in pod_templates(rendered.platform, rendered.objects):
        assert template.spec["serviceAccountName"] == names.service_account_name(
            template.deployment.name
        )
        assert template.spec["automountServiceAccountToken"] is (template.role == "ray-head")


def test_shared_memory_is_memory_backed_and_bounded(rendered: Rendered) -> None:
    for template in pod_templates(rendered.platform, rendered.objects):
        shm = template.mounts()["/dev/shm"]
        volume = template.volume(shm["name"])
        assert volume["emptyDir"]["medium"] == "Memory"
        size = int(volume["emptyDir"]["sizeLimit"].removesuffix("Mi"))
        memory = int(template.server["resources"]["limits"]["memory"].removesuffix("Mi"))
        assert 0 < size <= memory


def test_neuron_scheduler_only_when_a_pod_takes_part_of_a_node(rendered: Rendered) -> None:
    for template in pod_templates(rendered.platform, rendered.objects):
        spec = template.deployment
        partial = spec.on_neuron and template.role != "ray-head"
        partial = partial and spec.tensor_parallel_size < spec.instance.cores
        assert ("schedulerName" in template.spec) is partial
        if partial:
            assert template.spec["schedulerName"] == names.NEURON_SCHEDULER_NAME


def _workload_pods(rendered: Rendered) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(name, pod spec)`` of every pod a deployment renders, its compile Job's included."""
    for template in pod_templates(rendered.platform, rendered.objects):
        yield f"{template.deployment.name}/{template.role}", template.spec
    for job in of_kind(rendered.all_objects(), "Job"):
        yield job["metadata"]["name"], job["spec"]["template"]["spec"]


def test_every_container_drops_all_capabilities_under_the_runtime_seccomp_profile(
    rendered: Rendered,
) -> None:
    pods = list(_workload_pods(rendered))
    assert any(name.endswith("/vllm") for name, _ in pods)
    assert any("/" not in name for name, _ in pods), "no compile Job rendered"
    for name, spec in pods:
        pod_seccomp = spec.get("securityContext", {}).get("seccompProfile")
        for container in (*spec.get("initContainers", []), *spec["containers"]):
            security = container["securityContext"]
            where = (name, container["name"])
            assert security["capabilities"] == {"drop": ["ALL"]}, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert security.get("privileged", False) is False, where
            seccomp = security.get("seccompProfile", pod_seccomp)
            assert seccomp == {"type": "RuntimeDefault"}, where


def test_every_workload_pod_declares_the_runtime_seccomp_profile_for_all_its_containers(
    rendered: Rendered,
) -> None:
    # At the pod, so it covers the containers a controller adds as well as the platform's own.
    pods = list(_workload_pods(rendered))
    assert any("/" not in name for name, _ in pods), "no compile Job rendered"
    for name, spec in pods:
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name


def test_root_containers_are_only_those_of_images_without_another_user(
    rendered: Rendered,
) -> None:
    root_images = {
        VLLM_GPU_IMAGE,
        VLLM_EFA_IMAGE,
        LMCACHE_VLLM_IMAGE,
        NEURON_VLLM_IMAGE,
        AWS_CLI_IMAGE,
    }
    for name, spec in _workload_pods(rendered):
        pod_security = spec.get("securityContext", {})
        for container in (*spec.get("initContainers", []), *spec["containers"]):
            security = {**pod_security, **container["securityContext"]}
            where = (name, container["name"], container["image"])
            if container["image"] in root_images:
                assert security["runAsNonRoot"] is False, where
                assert security["readOnlyRootFilesystem"] is True, where
            else:
                assert security["runAsNonRoot"] is True, where
                assert security["runAsUser"] == RAY_UID, where
