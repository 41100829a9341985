"""RayService: cluster shape, autoscaling on queue depth, Serve configs, the Neuron application."""

from __future__ import annotations

from eks_inference import names
from eks_inference.charts.api_key import requires_api_key
from eks_inference.charts.model_server import (
    ARTIFACTS_MOUNT_PATH,
    MODEL_MOUNT_PATH,
    SCRATCH_COMPILED_ARTIFACTS_PATH,
)
from eks_inference.charts.shipped import SHIPPED_PATH, code_digest, module_file, module_source
from eks_inference.engines.rayservice.engine import SERVE_APP_MODULES
from eks_inference.engines.rayservice.serve_config import (
    NEURON_SERVER_DEPLOYMENT,
    max_ongoing_requests,
    neuron_app_args,
)
from eks_inference.serve.api_key_auth import API_KEY_ENV
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.startup_budget import rollout_seconds
from eks_inference.versions import RAY_LLM_GPU_IMAGE, RAY_VERSION
from tests.helpers.checks import found
from tests.helpers.objects import of_kind, one, pod_templates, serve_config, serving_objects
from tests.helpers.rendered import CONTEXT, Rendered


def _ray_specs(rendered: Rendered) -> list[ModelDeploymentSpec]:
    return found(s for s in rendered.platform.deployments if s.engine == "rayservice")


def test_cluster_and_worker_group_follow_the_spec(rendered: Rendered) -> None:
    for spec in _ray_specs(rendered):
        service = one(rendered.objects[spec.name], "RayService")
        assert service["metadata"]["name"] == spec.name
        cluster = service["spec"]["rayClusterConfig"]
        assert cluster["rayVersion"] == RAY_VERSION
        assert cluster["enableInTreeAutoscaling"] is True
        options = cluster["autoscalerOptions"]
        assert options["idleTimeoutSeconds"] > 0
        assert options["upscalingMode"] in {"Default", "Aggressive", "Conservative"}
        assert options["version"] == "v2"
        (group,) = cluster["workerGroupSpecs"]
        assert group["minReplicas"] == spec.scaling.min_replicas
        assert group["maxReplicas"] == spec.scaling.max_replicas
        assert group["replicas"] == spec.scaling.min_replicas
        assert service["spec"]["upgradeStrategy"] == {"type": "NewCluster"}
        assert service["spec"]["excludeHeadPodFromServeSvc"] is (spec.scaling.min_replicas > 0)


def test_initializing_timeout_covers_a_rollout(rendered: Rendered) -> None:
    for spec in _ray_specs(rendered):
        service = one(rendered.objects[spec.name], "RayService")
        timeout = service["metadata"]["annotations"]["ray.io/initializing-timeout"]
        assert timeout.endswith("m")
        assert int(timeout.removesuffix("m")) * 60 >= rollout_seconds(spec)
        assert "serviceUnhealthySecondThreshold" not in service["spec"]
        assert "deploymentUnhealthySecondThreshold" not in service["spec"]


def test_serve_autoscales_on_queue_depth(rendered: Rendered) -> None:
    for spec in _ray_specs(rendered):
        (application,) = serve_config(one(rendered.objects[spec.name], "RayService"))[
            "applications"
        ]
        if spec.on_neuron:
            (deployment,) = application["deployments"]
            settings = deployment
        else:
            (llm_config,) = application["args"]["llm_configs"]
            settings = llm_config["deployment_config"]
        autoscaling = settings["autoscaling_config"]
        assert autoscaling["target_ongoing_requests"] == spec.target_ongoing_requests
        assert autoscaling["min_replicas"] == spec.scaling.min_replicas
        assert autoscaling["max_replicas"] == spec.scaling.max_replicas
        assert settings["max_ongoing_requests"] == max_ongoing_requests(spec)
        assert settings["max_ongoing_requests"] >= spec.limits.max_num_seqs
        assert settings["max_ongoing_requests"] >= spec.target_ongoing_requests


def test_gpu_application_is_ray_serve_llm(rendered: Rendered) -> None:
    gpu = [s for s in _ray_specs(rendered) if not s.on_neuron]
    assert gpu
    for spec in gpu:
        service = one(rendered.objects[spec.name], "RayService")
        (application,) = serve_config(service)["applications"]
        # Exposed with the platform's API key, Ray Serve LLM's app runs behind the key check.
        if requires_api_key(rendered.platform.route(spec)):
            assert application["import_path"] == "eks_inference_serve.neuron.app:build_ray_llm_app"
            assert application["args"]["api_key_env"] == API_KEY_ENV
        else:
            assert application["import_path"] == "ray.serve.llm:build_openai_app"
        (llm_config,) = application["args"]["llm_configs"]
        assert llm_config["model_loading_config"] == {
            "model_id": spec.model.id,
            "model_source": MODEL_MOUNT_PATH,
        }
        assert llm_config["accelerator_type"] == "L40S"
        engine = llm_config["engine_kwargs"]
        assert not {"model", "served_model_name"} & set(engine)
        assert engine["tensor_parallel_size"] == spec.tensor_parallel_size
        assert engine["max_num_seqs"] == spec.limits.max_num_seqs
        assert engine["max_model_len"] == spec.limits.max_model_len
        for template in pod_templates(rendered.platform, {spec.name: rendered.objects[spec.name]}):
            assert template.server["image"] == RAY_LLM_GPU_IMAGE


def test_neuron_application_is_the_projects_own(rendered: Rendered) -> None:
    neuron = [s for s in _ray_specs(rendered) if s.on_neuron]
    assert neuron
    for spec in neuron:
        objects = rendered.objects[spec.name]
        (application,) = serve_config(one(objects, "RayService"))["applications"]
        assert application["import_path"] == "eks_inference_serve.neuron.app:build_app"
        api_key_env = API_KEY_ENV if requires_api_key(rendered.platform.route(spec)) else None
        assert application["args"] == neuron_app_args(spec, api_key_env=api_key_env)
        assert set(application["args"]) == {
            "model",
            "served_model_name",
            "tensor_parallel_size",
            "max_model_len",
            "max_num_seqs",
            "block_size",
            "dtype",
            "additional_config",
            "api_key_env",
        }
        assert application["args"]["dtype"] == spec.model.architecture.dtype
        (deployment,) = application["deployments"]
        assert deployment["name"] == NEURON_SERVER_DEPLOYMENT
        resources = deployment["ray_actor_options"]["resources"]
        assert resources == {"neuron_cores": spec.tensor_parallel_size}

        # The deployment's ConfigMaps: this one, and its Grafana dashboard.
        (config_map,) = [o for o in of_kind(objects, "ConfigMap") if "neuron.app.py" in o["data"]]
        files = {module_file(m): module_source(m) for m in SERVE_APP_MODULES}
        assert config_map["data"] == files
        assert {"__init__.py", "api_key_auth.py", "neuron.__init__.py", "neuron.app.py"} <= set(
            files
        )
        digest = code_digest(files)
        for template in pod_templates(rendered.platform, {spec.name: objects}):
            assert template.server["image"] == CONTEXT.neuron_ray_image
            env = template.env()
            assert env["PYTHONPATH"] == SHIPPED_PATH
            mount = template.mounts()[SHIPPED_PATH]
            volume = template.volume(mount["name"])
            assert volume["configMap"]["name"] == config_map["metadata"]["name"]
        service = one(objects, "RayService")
        cluster = service["spec"]["rayClusterConfig"]
        for group in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"]):
            annotations = group["template"]["metadata"]["annotations"]
            assert annotations["eks-inference.io/serve-app-sha256"] == digest


def test_neuron_workers_find_their_compiled_artifacts(rendered: Rendered) -> None:
    workers = [
        t
        for t in pod_templates(rendered.platform, rendered.objects)
        if t.deployment.engine == "rayservice" and t.deployment.on_neuron and t.role == "ray-worker"
    ]
    for template in found(workers):
        spec = template.deployment
        prefix = spec.neuron_options.compiled_artifacts_prefix
        env = template.env()
        if prefix is None:
            assert env["NEURON_COMPILED_ARTIFACTS"] == SCRATCH_COMPILED_ARTIFACTS_PATH
            assert ARTIFACTS_MOUNT_PATH not in template.mounts()
            continue
        # The artifacts volume mounts exactly the deployment's key (artifact_prefix).
        assert env["NEURON_COMPILED_ARTIFACTS"] == ARTIFACTS_MOUNT_PATH
        assert template.mounts()[ARTIFACTS_MOUNT_PATH]["readOnly"] is True


def test_workers_mount_the_weights_heads_do_not(rendered: Rendered) -> None:
    templates = pod_templates(rendered.platform, rendered.objects)
    for template in found(t for t in templates if t.role != "vllm"):
        mounts = template.mounts()
        if template.role == "ray-head":
            assert MODEL_MOUNT_PATH not in mounts
            assert not [v for v in template.spec["volumes"] if "persistentVolumeClaim" in v]
        else:
            assert mounts[MODEL_MOUNT_PATH]["readOnly"] is True
            claim = template.volume(mounts[MODEL_MOUNT_PATH]["name"])["persistentVolumeClaim"]
            claims = of_kind(rendered.objects[template.deployment.name], "PersistentVolumeClaim")
            assert claim["claimName"] in {c["metadata"]["name"] for c in claims}


def test_service_account_is_the_deployments(rendered: Rendered) -> None:
    for spec in _ray_specs(rendered):
        account = one(serving_objects(rendered.objects[spec.name]), "ServiceAccount")
        assert account["metadata"]["name"] == names.service_account_name(spec.name)


# KubeRay 1.7.0 refuses `authOptions.mode: token` below this Ray version
# (ray-operator/controllers/ray/utils/validation.go).
_MIN_TOKEN_AUTH_RAY = (2, 52, 0)


def test_every_ray_cluster_requires_rays_token(rendered: Rendered) -> None:
    """Without the token the dashboard's job API runs any caller's code on the head."""
    services = of_kind(rendered.all_objects(), "RayService")
    assert services
    for service in services:
        cluster = service["spec"]["rayClusterConfig"]
        assert cluster["authOptions"] == {"mode": "token"}
        # KubeRay makes the token and its Secret itself: nothing may name another Secret, and
        # delegating to Kubernetes tokens is refused for RayServices.
        assert "secretName" not in cluster["authOptions"]
        assert "enableK8sTokenAuth" not in cluster["authOptions"]
        version = tuple(int(part) for part in cluster["rayVersion"].split("."))
        assert version >= _MIN_TOKEN_AUTH_RAY
        # The variables KubeRay injects are not set by hand (it would keep a stale value).
        for template in (
            cluster["headGroupSpec"]["template"],
            *(group["template"] for group in cluster["workerGroupSpecs"]),
        ):
            for container in template["spec"]["containers"]:
                assert not {e["name"] for e in container.get("env", [])} & {
                    "RAY_AUTH_MODE",
                    "RAY_AUTH_TOKEN",
                }
