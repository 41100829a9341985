"""The Neuron compile job: it compiles what serving loads, publishes it whole, and serving waits.

The agreement tests render one shape as both a standalone vLLM deployment and a RayService and
compare the compile job with each server object by object, from the rendered manifests alone.
The script tests run the rendered shell scripts under bash with stand-ins for ``aws``, ``vllm``
and ``python3`` on PATH, so the marker-last and fail-closed behaviour is exercised, not only
read.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from eks_inference import names
from eks_inference.catalog.sizing import pod_resources
from eks_inference.charts.artifacts_gate import (
    ARTIFACTS_GATE_CONTAINER,
    COMPILE_JOB_ROLE,
    compile_job_name,
    gates_on_compiled_artifacts,
)
from eks_inference.charts.compile_job import (
    ALREADY_COMPLETE_FLAG,
    ARTIFACT_KEY_ANNOTATION,
    BACKOFF_LIMIT,
    COMPILE_CONTAINER,
    LOCAL_ARTIFACTS_PATH,
    SAFE_TO_EVICT_ANNOTATION,
    UPLOAD_CONTAINER,
    active_deadline_seconds,
)
from eks_inference.charts.deployment import compile_job_charts, deployment_charts
from eks_inference.charts.model_server import ARTIFACTS_MOUNT_PATH, MODEL_MOUNT_PATH
from eks_inference.charts.render import default_context, render_files, render_platform
from eks_inference.charts.vllm_server import vllm_server_args
from eks_inference.names import COMPONENT_LABEL
from eks_inference.serve.image import neuron_ray_build_args
from eks_inference.specification.artifacts import (
    COMPLETION_MARKER_NAME,
    artifact_prefix,
    completion_marker_key,
    override_neuron_config,
)
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import (
    AWS_CLI_IMAGE,
    KUBERNETES_VERSION,
    NEURON_SDK_VERSION,
    NEURON_VLLM_IMAGE,
)
from tests.helpers.checks import found
from tests.helpers.objects import of_kind, one, pod_templates, serve_config, serving_objects
from tests.helpers.platforms import REPO
from tests.helpers.rendered import CONTEXT, Rendered

# One shape served by both engines: the compile job must be the same for both, and agree
# with each server.
SHAPE: dict[str, Any] = {
    "model": "llama-3-8b",
    "instance_type": "inf2.48xlarge",
    "tensor_parallel_size": 8,
    "limits": {"max_model_len": 2048, "max_num_seqs": 16},
    "weights": {"prefix": "models/llama-3-8b/"},
    "neuron": {
        "compiled_artifacts_prefix": "neuron-artifacts/",
        "sequence_buckets": [2048, 128, 512],
        "overrides": {"fused_qkv": True},
    },
}
ENGINES = {
    "shape-vllm": {"engine": "vllm", "scaling": {"min_replicas": 1, "max_replicas": 1}},
    "shape-ray": {"engine": "rayservice", "scaling": {"min_replicas": 1, "max_replicas": 3}},
}


@pytest.fixture(scope="module")
def both_engines() -> Rendered:
    platform = PlatformSpec.model_validate(
        {
            "model_bucket_name": CONTEXT.bucket_name,
            "node_pools": [
                {"name": "system", "instance_types": ["m6i.2xlarge"]},
                {"name": "inf2", "instance_types": ["inf2.48xlarge"], "max_size": 4},
            ],
            "deployments": [{"name": n, **SHAPE, **e} for n, e in ENGINES.items()],
        }
    )
    return Rendered(
        platform=platform,
        objects=render_platform(platform, CONTEXT),
        files=render_files(platform, CONTEXT),
    )


@dataclass(frozen=True)
class CompilePod:
    """The rendered compile Job of one deployment and its two containers."""

    job: dict[str, Any]

    @property
    def pod(self) -> dict[str, Any]:
        pod: dict[str, Any] = self.job["spec"]["template"]["spec"]
        return pod

    @property
    def compile(self) -> dict[str, Any]:
        (container,) = self.pod["initContainers"]
        assert container["name"] == COMPILE_CONTAINER
        return dict(container)

    @property
    def upload(self) -> dict[str, Any]:
        (container,) = self.pod["containers"]
        assert container["name"] == UPLOAD_CONTAINER
        return dict(container)

    def env(self, container: dict[str, Any]) -> dict[str, str]:
        return {e["name"]: e["value"] for e in container["env"]}

    def claim(self, mount_path: str, container: dict[str, Any]) -> str:
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == mount_path)
        assert mount["readOnly"] is True
        volume = next(v for v in self.pod["volumes"] if v["name"] == mount["name"])
        assert volume["persistentVolumeClaim"]["readOnly"] is True
        return str(volume["persistentVolumeClaim"]["claimName"])


def _compile_pod(objects: list[dict[str, Any]]) -> CompilePod:
    return CompilePod(one(objects, "Job"))


def _flags(args: list[str]) -> dict[str, str | None]:
    flags: dict[str, str | None] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            following = args[i + 1] if i + 1 < len(args) else None
            flags[arg] = None if following is None or following.startswith("--") else following
    return flags


def _compiled_specs(rendered: Rendered) -> list[ModelDeploymentSpec]:
    return found(
        s
        for s in rendered.platform.deployments
        if s.on_neuron and s.neuron_options.compiled_artifacts_prefix is not None
    )


def _artifacts_volume_uri(objects: list[dict[str, Any]], mounted_path: str) -> str:
    """``s3://bucket/key/`` that a path inside the artifacts mount reads, from the rendered PV."""
    (volume,) = [
        pv
        for pv in of_kind(objects, "PersistentVolume")
        if pv["metadata"]["labels"][COMPONENT_LABEL] == "neuron-artifacts"
    ]
    bucket = volume["spec"]["csi"]["volumeAttributes"]["bucketName"]
    (prefix,) = [o.removeprefix("prefix ") for o in volume["spec"]["mountOptions"] if "prefix" in o]
    relative = mounted_path.removeprefix(ARTIFACTS_MOUNT_PATH).strip("/")
    return f"s3://{bucket}/{prefix}{relative}/" if relative else f"s3://{bucket}/{prefix}"


# -- one shape, two engines: the compile job agrees with serving --------------------------------


def test_both_engines_share_one_key_and_one_compile(both_engines: Rendered) -> None:
    vllm, ray = (both_engines.platform.deployment(n) for n in ENGINES)
    assert artifact_prefix(vllm) == artifact_prefix(ray)
    jobs = [_compile_pod(both_engines.objects[n]) for n in ENGINES]
    assert jobs[0].compile["args"] == jobs[1].compile["args"]
    assert jobs[0].env(jobs[0].upload) == jobs[1].env(jobs[1].upload)


def test_compile_job_agrees_with_standalone_vllm(both_engines: Rendered) -> None:
    spec = both_engines.platform.deployment("shape-vllm")
    objects = both_engines.objects[spec.name]
    job = _compile_pod(objects)
    (server,) = [
        t for t in pod_templates(both_engines.platform, {spec.name: objects}) if t.role == "vllm"
    ]

    # Image, flags (TP, batch, length, dtype, buckets and overrides) and environment are
    # serving's, except where the compile writes.
    assert job.compile["image"] == server.server["image"] == NEURON_VLLM_IMAGE
    assert job.compile["args"] == server.server["args"]
    compile_env = job.env(job.compile)
    for name, value in server.env().items():
        expected = LOCAL_ARTIFACTS_PATH if name == "NEURON_COMPILED_ARTIFACTS" else value
        assert compile_env[name] == expected, name
    # The same read-only weights claim at the same path.
    weights_claim = job.claim(MODEL_MOUNT_PATH, job.compile)
    assert (
        weights_claim
        == server.volume(server.mounts()[MODEL_MOUNT_PATH]["name"])["persistentVolumeClaim"][
            "claimName"
        ]
    )
    # What the upload writes is what serving reads through its artifacts volume.
    upload_env = job.env(job.upload)
    served = _artifacts_volume_uri(objects, server.env()["NEURON_COMPILED_ARTIFACTS"])
    assert upload_env["ARTIFACT_URI"] == served
    assert served == f"s3://{CONTEXT.bucket_name}/{artifact_prefix(spec)}"


def test_compile_job_agrees_with_the_neuron_ray_service(both_engines: Rendered) -> None:
    spec = both_engines.platform.deployment("shape-ray")
    objects = both_engines.objects[spec.name]
    job = _compile_pod(objects)
    (application,) = serve_config(one(objects, "RayService"))["applications"]
    args = application["args"]
    flags = _flags(job.compile["args"])

    assert flags["--tensor-parallel-size"] == str(args["tensor_parallel_size"])
    assert flags["--max-num-seqs"] == str(args["max_num_seqs"])
    assert flags["--max-model-len"] == str(args["max_model_len"])
    assert flags["--dtype"] == args["dtype"] == spec.model.architecture.dtype
    assert json.loads(flags["--additional-config"] or "") == args["additional_config"]
    assert args["additional_config"]["override_neuron_config"] == override_neuron_config(spec)
    assert args["additional_config"]["override_neuron_config"]["context_encoding_buckets"] == [
        128,
        512,
        2048,
    ]
    # The Serve app asks for the KV layout the server flags imply: one block of
    # max_model_len per sequence, no prefix caching, max_num_seqs blocks.
    assert args["block_size"] == args["max_model_len"]
    assert "--no-enable-prefix-caching" in flags
    assert flags["--num-gpu-blocks-override"] == str(args["max_num_seqs"])
    assert job.compile["args"][0] == args["model"] == MODEL_MOUNT_PATH
    # The Ray workers' image is built on the image the job compiles with.
    assert job.compile["image"] == neuron_ray_build_args()["BASE_IMAGE"] == NEURON_VLLM_IMAGE

    (worker,) = [
        t
        for t in pod_templates(both_engines.platform, {spec.name: objects})
        if t.role == "ray-worker"
    ]
    assert (
        job.claim(MODEL_MOUNT_PATH, job.compile)
        == (
            worker.volume(worker.mounts()[MODEL_MOUNT_PATH]["name"])["persistentVolumeClaim"][
                "claimName"
            ]
        )
    )
    served = _artifacts_volume_uri(objects, worker.env()["NEURON_COMPILED_ARTIFACTS"])
    assert job.env(job.upload)["ARTIFACT_URI"] == served


def test_every_compile_job_uses_the_serving_flags(rendered: Rendered) -> None:
    for spec in _compiled_specs(rendered):
        job = _compile_pod(rendered.objects[spec.name])
        assert job.compile["args"] == vllm_server_args(spec, bucket_name=CONTEXT.bucket_name)
        assert job.compile["command"][:2] == ["bash", "-c"]


def test_the_key_names_the_sdk_of_the_image_that_compiles() -> None:
    assert f"-sdk{NEURON_SDK_VERSION}-" in NEURON_VLLM_IMAGE


# -- which deployments get a job, and its objects ---------------------------------------------


_SERVING_FILES = {
    f"{role}.yaml" for role in ("model-weights", "neuron-artifacts", "rayservice", "vllm")
}


def test_a_job_for_exactly_the_deployments_with_compiled_artifacts(rendered: Rendered) -> None:
    compiled = {s.name for s in _compiled_specs(rendered)}
    assert compiled
    for spec in rendered.platform.deployments:
        jobs = of_kind(rendered.objects[spec.name], "Job")
        assert len(jobs) == (spec.name in compiled), spec.name
        files = [f for f in rendered.files if f.startswith(f"{spec.name}/")]
        compile_files = [f for f in files if f.endswith(f"-{COMPILE_JOB_ROLE}.yaml")]
        assert len(compile_files) == (spec.name in compiled)
        if compile_files:
            # After every serving chart, so the serving charts' files keep their numbers
            # (only charts that watch or expose the servers come after it).
            serving = [f for f in files if f.rsplit("/", 1)[1].split("-", 1)[1] in _SERVING_FILES]
            assert serving
            assert max(serving) < compile_files[0]


def test_the_job_has_its_own_service_account(rendered: Rendered) -> None:
    for spec in _compiled_specs(rendered):
        objects = rendered.objects[spec.name]
        job = _compile_pod(objects)
        compile_objects = [o for o in objects if o not in serving_objects(objects)]
        account = one(compile_objects, "ServiceAccount")
        assert account["metadata"]["name"] == names.compile_service_account_name(spec.name)
        assert account["metadata"]["namespace"] == names.INFERENCE_NAMESPACE
        assert job.pod["serviceAccountName"] == account["metadata"]["name"]
        assert job.pod["serviceAccountName"] != names.service_account_name(spec.name)
        assert account["automountServiceAccountToken"] is False
        assert job.pod["automountServiceAccountToken"] is False


def test_compile_job_manifest_validates_strictly(rendered: Rendered) -> None:
    for spec in _compiled_specs(rendered):
        (path,) = [f for f in rendered.files if f.startswith(f"{spec.name}/") and "compile" in f]
        documents = list(yaml.safe_load_all(rendered.files[path]))
        assert {d["kind"] for d in documents} == {"ServiceAccount", "Job"}
        for document in documents:
            assert kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_job_name_carries_the_key_and_fits_a_label(both_engines: Rendered) -> None:
    spec = both_engines.platform.deployment("shape-vllm")
    job = _compile_pod(both_engines.objects[spec.name]).job
    name = job["metadata"]["name"]
    assert name == compile_job_name(spec)
    assert re.fullmatch(rf"{spec.name}-compile-[0-9a-f]{{8}}", name)
    assert job["metadata"]["annotations"][ARTIFACT_KEY_ANNOTATION] == (
        f"s3://{CONTEXT.bucket_name}/{artifact_prefix(spec)}"
    )
    longest = spec.model_copy(update={"name": "x" * 40})
    assert len(compile_job_name(longest)) <= 63
    # A new shape is a new Job; scaling is not a shape.
    data = spec.model_dump()
    wider = ModelDeploymentSpec.model_validate({**data, "tensor_parallel_size": 4})
    scaled = ModelDeploymentSpec.model_validate(
        {**data, "scaling": {"min_replicas": 2, "max_replicas": 2}}
    )
    assert compile_job_name(wider) != name
    assert compile_job_name(scaled) == name


def test_job_retries_deadline_and_cleanup(rendered: Rendered) -> None:
    for spec in _compiled_specs(rendered):
        job = _compile_pod(rendered.objects[spec.name])
        assert job.pod["restartPolicy"] == "Never"
        settings = job.job["spec"]
        assert settings["backoffLimit"] == BACKOFF_LIMIT == 2
        assert settings["activeDeadlineSeconds"] == active_deadline_seconds(spec)
        assert settings["ttlSecondsAfterFinished"] >= 3600
        (rule,) = settings["podFailurePolicy"]["rules"]
        assert rule["action"] == "Ignore"
        assert rule["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]
        annotations = job.job["spec"]["template"]["metadata"]["annotations"]
        assert annotations[SAFE_TO_EVICT_ANNOTATION] == "false"
        for container in (job.compile, job.upload):
            assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(container)


def test_deadline_is_hours_for_an_8b_model(reference: Rendered) -> None:
    spec = reference.platform.deployment("llama3-8b-inf2")
    assert 2 * 3600 <= active_deadline_seconds(spec) <= 4 * 3600


def test_job_placement_and_resources(rendered: Rendered) -> None:
    for spec in _compiled_specs(rendered):
        job = _compile_pod(rendered.objects[spec.name])
        pool = rendered.platform.placement(spec).workers
        assert job.pod["nodeSelector"] == pool.node_selector()
        assert job.pod["tolerations"] == pool.tolerations()
        partial = spec.tensor_parallel_size < spec.instance.cores
        assert job.pod.get("schedulerName") == (names.NEURON_SCHEDULER_NAME if partial else None)
        share = pod_resources(spec.instance, spec.replicas_per_node)
        limits = job.compile["resources"]["limits"]
        requests = job.compile["resources"]["requests"]
        assert limits == {
            "cpu": share.cpu,
            "memory": share.memory,
            names.NEURONCORE_RESOURCE: str(spec.tensor_parallel_size),
        }
        assert {k: v for k, v in requests.items() if k != "ephemeral-storage"} == limits
        assert int(requests["ephemeral-storage"].removesuffix("Gi")) >= 64
        upload = job.upload["resources"]
        assert upload["requests"] == upload["limits"]
        assert names.NEURONCORE_RESOURCE not in upload["limits"]


def test_images_are_pinned_never_latest(rendered: Rendered) -> None:
    for spec in _compiled_specs(rendered):
        job = _compile_pod(rendered.objects[spec.name])
        assert job.compile["image"] == NEURON_VLLM_IMAGE
        assert job.upload["image"] == AWS_CLI_IMAGE
        for container in (job.compile, job.upload):
            assert container["imagePullPolicy"] == "IfNotPresent"
            assert not container["image"].endswith(":latest")
    version = AWS_CLI_IMAGE.rsplit(":", 1)[1]
    # EKS Pod Identity credentials need AWS CLI v2.15.0 or later.
    assert tuple(int(part) for part in version.split(".")) >= (2, 15, 0)


def test_containers_run_without_privileges_on_a_read_only_root(rendered: Rendered) -> None:
    for spec in _compiled_specs(rendered):
        job = _compile_pod(rendered.objects[spec.name])
        for container in (job.compile, job.upload):
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True
            assert security["allowPrivilegeEscalation"] is False
            assert security["privileged"] is False


def test_compile_job_charts_follow_the_deployments_volumes_and_policies(
    reference_platform: PlatformSpec,
) -> None:
    spec = reference_platform.deployment("llama3-8b-inf2")
    placement = reference_platform.placement(spec)
    rendered = deployment_charts(spec, placement, CONTEXT)
    (chart,) = compile_job_charts(rendered)
    assert (chart.role, chart.chart_id) == (COMPILE_JOB_ROLE, f"{spec.name}-{COMPILE_JOB_ROLE}")
    assert chart.after == tuple(c.chart_id for c in (rendered.policies, *rendered.volumes))
    for other in found(d for d in reference_platform.deployments if not d.on_neuron):
        rendered = deployment_charts(other, reference_platform.placement(other), CONTEXT)
        assert compile_job_charts(rendered) == []


# -- the serving gate -------------------------------------------------------------------------


def test_serving_pods_wait_for_the_marker_and_name_the_key(rendered: Rendered) -> None:
    gated = 0
    for template in pod_templates(rendered.platform, rendered.objects):
        spec = template.deployment
        init = list(template.spec.get("initContainers", []))
        if template.role == "ray-head" or not gates_on_compiled_artifacts(spec):
            assert not [c for c in init if c["name"] == ARTIFACTS_GATE_CONTAINER]
            continue
        gated += 1
        (gate,) = [c for c in init if c["name"] == ARTIFACTS_GATE_CONTAINER]
        assert gate["image"] == template.server["image"]
        script = gate["command"][-1]
        assert artifact_prefix(spec) in script
        assert completion_marker_key(spec) in script
        assert compile_job_name(spec) in script
        marker = f"{template.env()['NEURON_COMPILED_ARTIFACTS']}/{COMPLETION_MARKER_NAME}"
        assert marker in script
        (mount,) = gate["volumeMounts"]
        assert mount == {
            "name": "neuron-artifacts",
            "mountPath": ARTIFACTS_MOUNT_PATH,
            "readOnly": True,
        }
        resources = gate["resources"]
        assert resources["requests"] == resources["limits"]
        assert set(resources["limits"]) == {"cpu", "memory"}
    assert gated


def test_the_gate_passes_only_with_the_marker(both_engines: Rendered, tmp_path: Path) -> None:
    templates = pod_templates(both_engines.platform, both_engines.objects)
    for template in found(t for t in templates if t.role != "ray-head"):
        (gate,) = template.spec["initContainers"]
        mount = tmp_path / template.deployment.name
        script = gate["command"][-1].replace(ARTIFACTS_MOUNT_PATH, str(mount))
        missing = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
        assert missing.returncode == 1
        assert artifact_prefix(template.deployment) in missing.stderr
        assert compile_job_name(template.deployment) in missing.stderr
        marker = Path(
            template.env()["NEURON_COMPILED_ARTIFACTS"].replace(ARTIFACTS_MOUNT_PATH, str(mount))
        )
        marker.mkdir(parents=True)
        (marker / COMPLETION_MARKER_NAME).write_text("{}")
        assert subprocess.run(["sh", "-c", script], capture_output=True).returncode == 0


# -- the scripts, run ---------------------------------------------------------------------------


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


# Records every call, keeps what `aws s3 cp - URI` reads, and fails the call that contains
# FAIL_ON.
FAKE_AWS = """#!/bin/bash
echo "$*" >> "$FAKE_STATE/aws.log"
if [ "$3" = "-" ]; then cat > "$FAKE_STATE/marker-body"; fi
if [ -n "${FAIL_ON:-}" ] && [[ "$*" == *"$FAIL_ON"* ]]; then exit 1; fi
"""
# `vllm serve ...` is the server: FAKE_VLLM picks whether it compiles, crashes, comes up
# without artifacts or compiles but ignores SIGTERM.
FAKE_VLLM_SERVER = """#!/bin/bash
[ "$1" = serve ] || exit 2
printf '%s\\n' "${@:2}" > "$FAKE_STATE/server-args"
case "$FAKE_VLLM" in
  crash) exit 3 ;;
  compile | hang) echo graph > "$NEURON_COMPILED_ARTIFACTS/model.pt" ;;
esac
if [ "$FAKE_VLLM" = hang ]; then
  trap '' TERM
else
  trap 'touch "$FAKE_STATE/stopped"; exit 0' TERM
fi
touch "$FAKE_STATE/healthy"
while true; do sleep 0.05; done
"""
# `python3 -c ... URL` is the health check: healthy once the server said so.
FAKE_PYTHON = """#!/bin/bash
[ -f "$FAKE_STATE/healthy" ]
"""


@dataclass
class ScriptRun:
    returncode: int
    stdout: str
    stderr: str
    state: Path

    def aws_calls(self) -> list[str]:
        log = self.state / "aws.log"
        return log.read_text().splitlines() if log.exists() else []


def _run(script: list[str], env: dict[str, str], tmp_path: Path, **extra: str) -> ScriptRun:
    bin_dir = tmp_path / "bin"
    state = tmp_path / "state"
    for folder in (bin_dir, state):
        folder.mkdir(exist_ok=True)
    _executable(bin_dir / "aws", FAKE_AWS)
    _executable(bin_dir / "vllm", FAKE_VLLM_SERVER)
    _executable(bin_dir / "python3", FAKE_PYTHON)
    local = {
        LOCAL_ARTIFACTS_PATH: str(tmp_path / "out" / "artifacts"),
        ALREADY_COMPLETE_FLAG: str(tmp_path / "out" / "already-complete"),
        ARTIFACTS_MOUNT_PATH: str(tmp_path / "mnt"),
    }
    values = {}
    for name, value in env.items():
        for path, replacement in local.items():
            value = value.replace(path, replacement)
        values[name] = value
    (tmp_path / "out").mkdir(exist_ok=True)
    result = subprocess.run(
        script,
        env={
            **values,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "FAKE_STATE": str(state),
            "HEALTH_POLL_SECONDS": "0.05",
            **extra,
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    return ScriptRun(result.returncode, result.stdout, result.stderr, state)


@pytest.fixture
def job(reference: Rendered) -> CompilePod:
    return _compile_pod(reference.objects["llama3-8b-inf2"])


def _upload(job: CompilePod, tmp_path: Path, **extra: str) -> ScriptRun:
    return _run(job.upload["command"], job.env(job.upload), tmp_path, **extra)


def _compile(job: CompilePod, tmp_path: Path, **extra: str) -> ScriptRun:
    return _run(
        job.compile["command"] + job.compile["args"], job.env(job.compile), tmp_path, **extra
    )


def test_upload_script_is_strict_and_writes_the_marker_last(job: CompilePod) -> None:
    command = job.upload["command"]
    assert command[:2] == ["bash", "-c"]
    lines = [line.strip() for line in command[2].splitlines() if line.strip()]
    assert lines[0] == "set -euo pipefail"
    aws_lines = [i for i, line in enumerate(lines) if re.search(r"\baws s3\b", line)]
    upload, marker = aws_lines
    assert "--recursive" in lines[upload]
    assert '"$ARTIFACT_URI"' in lines[upload]
    assert lines[marker].endswith('aws s3 cp - "$MARKER_URI"')
    assert upload < marker
    env = job.env(job.upload)
    spec_key = env["ARTIFACT_URI"].removeprefix(f"s3://{CONTEXT.bucket_name}/")
    assert env["MARKER_URI"] == f"s3://{CONTEXT.bucket_name}/{spec_key}{COMPLETION_MARKER_NAME}"


def test_upload_publishes_the_set_then_the_marker(job: CompilePod, tmp_path: Path) -> None:
    artifacts = tmp_path / "out" / "artifacts"
    artifacts.mkdir(parents=True)
    (artifacts / "model.pt").write_text("graph")
    result = _upload(job, tmp_path)
    assert result.returncode == 0, result.stderr
    env = job.env(job.upload)
    upload, marker = result.aws_calls()
    assert upload.startswith("s3 cp --recursive")
    assert upload.endswith(env["ARTIFACT_URI"])
    assert marker == f"s3 cp - {env['MARKER_URI']}"
    record = json.loads((result.state / "marker-body").read_text())
    assert record["artifacts"] == env["ARTIFACT_URI"]
    assert record["compiler_image"] == NEURON_VLLM_IMAGE


def test_a_failed_upload_writes_no_marker(job: CompilePod, tmp_path: Path) -> None:
    artifacts = tmp_path / "out" / "artifacts"
    artifacts.mkdir(parents=True)
    (artifacts / "model.pt").write_text("graph")
    result = _upload(job, tmp_path, FAIL_ON="--recursive")
    assert result.returncode != 0
    assert [c for c in result.aws_calls() if "_COMPLETE" in c] == []


def test_an_empty_compile_output_is_not_published(job: CompilePod, tmp_path: Path) -> None:
    (tmp_path / "out" / "artifacts").mkdir(parents=True)
    result = _upload(job, tmp_path)
    assert result.returncode == 1
    assert result.aws_calls() == []


def test_compile_passes_the_serving_flags_and_keeps_the_output(
    job: CompilePod, tmp_path: Path
) -> None:
    result = _compile(job, tmp_path, FAKE_VLLM="compile")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "artifacts" / "model.pt").read_text() == "graph\n"
    assert (result.state / "server-args").read_text().splitlines() == job.compile["args"]
    assert (result.state / "stopped").exists()
    assert not (tmp_path / "out" / "already-complete").exists()


def test_a_server_hanging_in_shutdown_is_killed(job: CompilePod, tmp_path: Path) -> None:
    result = _compile(job, tmp_path, FAKE_VLLM="hang", STOP_GRACE_SECONDS="1")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "artifacts" / "model.pt").exists()


def test_compile_fails_when_the_server_exits_first(job: CompilePod, tmp_path: Path) -> None:
    result = _compile(job, tmp_path, FAKE_VLLM="crash")
    assert result.returncode == 1
    assert "exited with status 3" in result.stderr


def test_compile_fails_when_nothing_was_saved(job: CompilePod, tmp_path: Path) -> None:
    result = _compile(job, tmp_path, FAKE_VLLM="empty")
    assert result.returncode == 1
    assert "empty" in result.stderr


def test_complete_artifacts_are_neither_compiled_nor_uploaded(
    job: CompilePod, tmp_path: Path
) -> None:
    marker = Path(
        job.env(job.compile)["COMPLETION_MARKER"].replace(
            ARTIFACTS_MOUNT_PATH, str(tmp_path / "mnt")
        )
    )
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")
    compiled = _compile(job, tmp_path, FAKE_VLLM="crash")
    assert compiled.returncode == 0, compiled.stderr
    assert not (compiled.state / "server-args").exists()
    uploaded = _upload(job, tmp_path)
    assert uploaded.returncode == 0
    assert uploaded.aws_calls() == []


# -- the committed manifests --------------------------------------------------------------------


def test_committed_manifests_are_fresh(reference_platform: PlatformSpec) -> None:
    """k8s_manifests/ is what `make manifests` writes from deployments.yaml now."""
    committed_root = REPO / "k8s_manifests"
    expected = render_files(reference_platform, default_context(reference_platform))
    committed = {
        str(p.relative_to(committed_root)): p.read_text()
        for p in sorted(committed_root.rglob("*.yaml"))
    }
    assert committed == expected, "k8s_manifests/ is stale; run `make manifests`"
