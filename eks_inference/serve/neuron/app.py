"""The Ray Serve deployment and the application builders the Serve config imports.

Deployment contract with the chart that renders the Serve config (``import_path:
"eks_inference_serve.neuron.app:build_app"``, this module as the pods name it):
:func:`build_app` receives ``args`` with exactly the keys of :class:`.config.ServerConfig`; the
deployment is named ``NeuronLLMServer`` and its replica count, autoscaling,
``max_ongoing_requests`` and ``ray_actor_options.resources.neuron_cores`` come from the Serve
config, never from this package.

API keys. With ``api_key_env`` set, every route but ``/health`` requires ``Authorization:
Bearer <key>``, the key being read from that environment variable when the replica starts (a
replica without it fails to start rather than serve unauthenticated). The check is the
platform's one API-key middleware, ``api_key_auth.APIKeyMiddleware``, which standalone vLLM
loads too, so every engine answers a missing or wrong key with the same 401 in OpenAI's error
shape. GPU RayServices that require the key run Ray Serve LLM's own application behind it
(:func:`build_ray_llm_app`, ``import_path:
"eks_inference_serve.neuron.app:build_ray_llm_app"``).
"""

import re
from typing import Any, cast

from fastapi import FastAPI
from pydantic import ValidationError
from ray import serve

# The API-key check is the one module above this package: a parent-relative import, since the
# pods' copy of the tree has another root package (eks_inference_serve) than the project's.
from ..api_key_auth import APIKeyMiddleware, api_key_from_environment  # noqa: TID252
from .config import ENV_NAME_PATTERN, ServerConfig
from .engine import EngineFactory
from .server import OpenAIServer
from .vllm_engine import start_vllm_neuron_engine


@serve.deployment(name="NeuronLLMServer")
@serve.ingress()
class NeuronLLMServer:
    """One replica: one vLLM engine on the NeuronCores Ray assigned to it.

    The FastAPI app is built per replica (``__serve_build_asgi_app__``) with routes bound to
    this replica's engine, so request handling never depends on Ray's replica context and the
    same :class:`OpenAIServer` runs unchanged under test.
    """

    def __init__(
        self, config: ServerConfig, engine_factory: EngineFactory = start_vllm_neuron_engine
    ) -> None:
        # Read before the engine starts: a replica without its key fails in seconds, not after
        # minutes of loading the model.
        api_key = (
            api_key_from_environment(config.api_key_env) if config.api_key_env is not None else None
        )
        self._server = OpenAIServer(config, engine_factory(config), api_key)

    def __serve_build_asgi_app__(self) -> FastAPI:
        return self._server.asgi_app()

    async def check_health(self) -> None:
        """Called periodically by Ray Serve; raising makes Serve replace the replica."""
        if not await self._server.engine.is_healthy():
            raise RuntimeError("the vLLM engine of this replica is not running")

    def __del__(self) -> None:
        # Called by Serve on graceful shutdown: stopping the engine frees the NeuronCores for
        # the replica that replaces this one instead of waiting for the process to exit.
        server: OpenAIServer | None = getattr(self, "_server", None)
        if server is not None:
            server.engine.shutdown()


def build_app(args: dict[str, Any]) -> serve.Application:
    """Serve import target (see the module docstring): validate ``args``, bind the deployment.

    Raises ``ValueError`` naming every invalid or missing key, on the Ray head, before any
    replica is scheduled on an Inferentia node.
    """
    try:
        config = ServerConfig.model_validate(args)
    except ValidationError as exc:
        raise ValueError(f"invalid args for {__name__}:build_app: {exc}") from exc
    # mypy does not apply class decorators: it sees the class where Ray made a Deployment.
    deployment = cast(serve.Deployment, NeuronLLMServer)
    return deployment.bind(config)


def api_key_ingress(base: type[Any], api_key_env: str) -> type[Any]:
    """A subclass of Ray Serve LLM's ingress ``base`` whose ASGI app is behind the API-key check.

    Serve wraps an ingress class and hands the replica's ASGI app to ``_set_asgi_app`` when the
    replica starts; the subclass adds :class:`APIKeyMiddleware` to that app as its outermost
    middleware, with the key read from ``api_key_env`` there, in the replica, so the key never
    travels in the Serve config. The app stays the one Serve was given rather than being
    wrapped: Serve then adds its handlers to it, which answer back-pressure with 503 and
    ``Retry-After`` and a failed deployment with 503 (a wrapper without ``add_exception_handler``
    would leave both to Ray Serve LLM's last-resort handler, which drops the header and makes
    the second a 500).
    """

    def _set_asgi_app(self: Any, app: FastAPI) -> None:
        app.add_middleware(APIKeyMiddleware, api_key=api_key_from_environment(api_key_env))
        super(ingress, self)._set_asgi_app(app)

    ingress: type[Any] = type(f"APIKey{base.__name__}", (base,), {"_set_asgi_app": _set_asgi_app})
    return ingress


def build_ray_llm_app(args: dict[str, Any]) -> serve.Application:
    """Serve import target (see the module docstring) for GPU RayServices with a key.

    ``args`` are Ray Serve LLM's ``build_openai_app`` arguments plus ``api_key_env``; the
    application is Ray Serve LLM's own, with its ingress made by :func:`api_key_ingress`. Ray
    Serve LLM is imported here, on the Ray head and GPU workers that have it, never when the
    module is.
    """
    options = dict(args)
    api_key_env = options.pop("api_key_env", None)
    if not isinstance(api_key_env, str) or not re.fullmatch(ENV_NAME_PATTERN, api_key_env):
        raise ValueError(
            f"invalid args for {__name__}:build_ray_llm_app: api_key_env must name an "
            f"environment variable, got {api_key_env!r}"
        )
    if "ingress_cls_config" in options:
        raise ValueError(
            f"invalid args for {__name__}:build_ray_llm_app: ingress_cls_config is set by the "
            "builder (the ingress behind the API-key check)"
        )
    from ray.serve.llm import build_openai_app
    from ray.serve.llm.ingress import OpenAiIngress

    ingress = api_key_ingress(OpenAiIngress, api_key_env)
    application: serve.Application = build_openai_app(
        {**options, "ingress_cls_config": {"ingress_cls": ingress}}
    )
    return application
