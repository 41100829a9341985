"""The Serve config of a RayService: one OpenAI-compatible application, and its autoscaling.

GPU deployments run Ray Serve LLM's ``build_openai_app`` with the same engine settings
standalone vLLM gets (:mod:`eks_inference.charts.vllm_server`); Inferentia2 deployments run the
project's Neuron application (:mod:`eks_inference.serve`), shipped to the pods. Pure functions,
no cdk8s, read by :mod:`eks_inference.engines.rayservice.engine`.
"""

from __future__ import annotations

from typing import Any

from eks_inference.charts.api_key import requires_api_key
from eks_inference.charts.model_server import MODEL_MOUNT_PATH, keep_alive_seconds
from eks_inference.charts.vllm_server import neuron_additional_config
from eks_inference.names import NEURON_SERVER_DEPLOYMENT
from eks_inference.serve.api_key_auth import API_KEY_ENV
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.routes import Route

# The Serve deployment inside eks_inference/serve/neuron/app.py, and its module as the pods
# import it (shipped as the package eks_inference_serve, eks_inference.charts.shipped): the Serve
# config addresses the deployment by name, and the module is imported from PYTHONPATH.
NEURON_APP_MODULE = "eks_inference_serve.neuron.app"
NEURON_APP_BUILDER = "build_app"
# The same module's builder of Ray Serve LLM's OpenAI application behind the API-key check,
# for GPU RayServices that require the platform's key.
RAY_LLM_APP_BUILDER = "build_ray_llm_app"

# Serve autoscaling delays: add replicas after 30 s of sustained queueing, remove them after
# 10 minutes of low load. A replica takes minutes to load a model, so scaling in quickly
# would only pay that again at the next burst.
UPSCALE_DELAY_S = 30
DOWNSCALE_DELAY_S = 600


def max_ongoing_requests(spec: ModelDeploymentSpec) -> int:
    """Requests Serve lets one replica hold: the engine's batch plus a quarter as a queue.

    The engine runs at most ``max_num_seqs`` sequences; a short queue on top lets it refill a
    finished slot at once. Anything beyond waits in Serve's router, where it counts towards
    autoscaling and can still go to a new replica, instead of inside one engine. Never below
    the autoscaling target, which a replica must be able to reach.
    """
    batch = spec.limits.max_num_seqs
    return max(batch + max(1, batch // 4), spec.target_ongoing_requests)


def serve_autoscaling_config(spec: ModelDeploymentSpec) -> dict[str, Any]:
    """Serve autoscaling on queue depth: ongoing requests per replica against the target."""
    return {
        "min_replicas": spec.scaling.min_replicas,
        "max_replicas": spec.scaling.max_replicas,
        "target_ongoing_requests": spec.target_ongoing_requests,
        "upscale_delay_s": UPSCALE_DELAY_S,
        "downscale_delay_s": DOWNSCALE_DELAY_S,
    }


def ray_llm_config(spec: ModelDeploymentSpec) -> dict[str, Any]:
    """One ``LLMConfig`` of ``ray.serve.llm:build_openai_app`` for a GPU deployment.

    ``engine_kwargs`` are the vLLM settings of :func:`vllm_server_args` without ``model`` and
    ``served_model_name``, which Ray Serve LLM forbids there: they come from
    ``model_loading_config``. ``accelerator_type`` is the catalog's GPU model (``L40S`` on
    g6e), which Ray detects on the node and Serve LLM places replicas by.
    """
    limits = spec.limits
    return {
        "model_loading_config": {"model_id": spec.model.id, "model_source": MODEL_MOUNT_PATH},
        "accelerator_type": spec.instance.accelerator_model,
        "engine_kwargs": {
            "tensor_parallel_size": spec.tensor_parallel_size,
            "max_model_len": limits.max_model_len,
            "max_num_seqs": limits.max_num_seqs,
            "block_size": limits.block_size,
            "gpu_memory_utilization": limits.gpu_memory_utilization,
            "dtype": spec.model.architecture.dtype,
        },
        "deployment_config": {
            "autoscaling_config": serve_autoscaling_config(spec),
            "max_ongoing_requests": max_ongoing_requests(spec),
        },
    }


def neuron_app_args(spec: ModelDeploymentSpec, *, api_key_env: str | None) -> dict[str, Any]:
    """``args`` of the Neuron application's ``build_app``, exactly the keys of its contract.

    ``api_key_env`` names the environment variable holding the API key the server requires, or
    is ``None`` when it requires none; the key itself is never part of the Serve config.

    ``block_size`` is ``max_model_len``: the block size the Neuron plugin uses without prefix
    caching, passed so that the application configures the engine it will actually get.
    ``dtype`` is the model's, as standalone vLLM's ``--dtype``: it is part of the compiled graph
    (and of the artifact key), so both engines must load with the one the artifacts have.
    """
    limits = spec.limits
    return {
        "model": MODEL_MOUNT_PATH,
        "served_model_name": spec.model.id,
        "tensor_parallel_size": spec.tensor_parallel_size,
        "max_model_len": limits.max_model_len,
        "max_num_seqs": limits.max_num_seqs,
        "block_size": limits.max_model_len,
        "dtype": spec.model.architecture.dtype,
        "additional_config": neuron_additional_config(spec),
        "api_key_env": api_key_env,
    }


def serve_config(spec: ModelDeploymentSpec, route: Route | None = None) -> dict[str, Any]:
    """The Serve config (``serveConfigV2``) of a RayService: one OpenAI-compatible application.

    GPU deployments run Ray Serve LLM's ``build_openai_app``. Inferentia2 deployments run the
    project's Neuron application (Ray Serve LLM has no Neuron path); its one deployment
    reserves ``neuron_cores`` = TP, the Ray resource KubeRay derives from a worker's
    ``aws.amazon.com/neuroncore`` limit, so exactly one replica fits a worker pod.

    Exposed on ``route``, Serve's HTTP proxies keep idle connections past the load balancer's
    idle timeout. When the route requires the platform's API key, both applications are told
    the environment variable holding it: the Neuron application checks it itself, and GPU
    deployments run the Neuron module's ``build_ray_llm_app``, Ray Serve LLM's application behind
    the same check.
    """
    api_key_env = API_KEY_ENV if requires_api_key(route) else None
    application: dict[str, Any] = {"name": spec.name, "route_prefix": "/"}
    if spec.on_neuron:
        application["import_path"] = f"{NEURON_APP_MODULE}:{NEURON_APP_BUILDER}"
        application["args"] = neuron_app_args(spec, api_key_env=api_key_env)
        application["deployments"] = [
            {
                "name": NEURON_SERVER_DEPLOYMENT,
                "autoscaling_config": serve_autoscaling_config(spec),
                "max_ongoing_requests": max_ongoing_requests(spec),
                "ray_actor_options": {
                    "num_cpus": 1,
                    "resources": {"neuron_cores": spec.tensor_parallel_size},
                },
            }
        ]
    elif api_key_env is not None:
        application["import_path"] = f"{NEURON_APP_MODULE}:{RAY_LLM_APP_BUILDER}"
        application["args"] = {"llm_configs": [ray_llm_config(spec)], "api_key_env": api_key_env}
    else:
        application["import_path"] = "ray.serve.llm:build_openai_app"
        application["args"] = {"llm_configs": [ray_llm_config(spec)]}
    config: dict[str, Any] = {"applications": [application]}
    if route is not None:
        # Applied when Serve starts, that is with each new Ray cluster; the idle timeout only
        # changes with the platform's deployments, which roll new clusters anyway.
        config["http_options"] = {"keep_alive_timeout_s": keep_alive_seconds(route)}
    return config
