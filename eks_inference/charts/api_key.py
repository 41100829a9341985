"""The platform's API key as the model servers see it: the Secret they read it from, and when.

The key check itself (:mod:`eks_inference.serve.api_key_auth`, which runs in the pods) defines
``API_KEY_ENV``, the variable that holds the key in model-server containers, and the paths it
leaves open (``HEALTH_PATH`` to probes, ``METRICS_PATH`` to Prometheus). The variable is filled
from the Secret the platform syncs (:data:`API_KEY_SECRET_NEED`); vLLM reads it itself and the
Serve applications are told its name, so the key never appears in a manifest, a process's
arguments, a Serve config or the Ray dashboard.
"""

from __future__ import annotations

from eks_inference.charts.contract import SecretNeed
from eks_inference.names import API_KEY_SECRET, API_KEY_SECRET_KEY, INFERENCE_NAMESPACE
from eks_inference.specification.routes import Route

API_KEY_SECRET_NEED = SecretNeed(
    name=API_KEY_SECRET, namespace=INFERENCE_NAMESPACE, key=API_KEY_SECRET_KEY
)


def requires_api_key(route: Route | None) -> bool:
    """Whether a server exposed on ``route`` requires the platform's API key."""
    return route is not None and route.api_key
