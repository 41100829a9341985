"""What every model-server pod agrees on, whatever its engine: its port, volumes and keep-alive.

The OpenAI port, the names of the weights and artifacts volumes and the fixed paths they are
mounted at are the same in every engine's pods (and the Neuron compile job's), so clients,
probes, NetworkPolicies and the engines' flags never depend on the deployment.
"""

from __future__ import annotations

from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.routes import Route

# The OpenAI-compatible port of vLLM and of Ray Serve's HTTP proxy alike, so a client's URL
# differs between engines only in the Service name.
OPENAI_PORT = 8000
# The name of that port on the servers' containers and Services: Prometheus scrapes the
# engine's /metrics on the same port by this name.
HTTP_PORT_NAME = "http"

# Roles of the Mountpoint volume charts, also the names of the pod volumes that mount them.
WEIGHTS_ROLE = "model-weights"
ARTIFACTS_ROLE = "neuron-artifacts"

# Fixed paths inside model-server containers. The weights prefix is mounted at the model
# path, so `--model` (or the Serve app's model source) is the same for every deployment.
MODEL_MOUNT_PATH = "/mnt/model"
ARTIFACTS_MOUNT_PATH = "/mnt/neuron-artifacts"
# Without a compiled-artifacts prefix (development only) the plugin compiles into a
# writable scratch directory and keeps the result only for the life of the pod.
SCRATCH_COMPILED_ARTIFACTS_PATH = "/tmp/neuron-compiled-artifacts"

# An exposed model server keeps idle connections open this much longer than the load balancer:
# the load balancer, never the server, then closes an idle connection. A connection the server
# closed just as the load balancer reused it would fail that request with a 502.
KEEP_ALIVE_MARGIN_S = 30


def compiled_artifacts_path(spec: ModelDeploymentSpec) -> str:
    """``NEURON_COMPILED_ARTIFACTS`` for a Neuron pod of ``spec``.

    With compiled artifacts, the artifacts volume mounts exactly the deployment's key
    (:func:`eks_inference.specification.artifacts.artifact_prefix`) at
    :data:`ARTIFACTS_MOUNT_PATH`, so the Mountpoint driver reads that key and nothing else of the
    artifacts tree. Without them (compiling at start-up, development only), a scratch directory.
    """
    return ARTIFACTS_MOUNT_PATH if spec.has_compiled_artifacts else SCRATCH_COMPILED_ARTIFACTS_PATH


def keep_alive_seconds(route: Route) -> int:
    """Idle seconds a server exposed on ``route`` keeps a connection: past the ALB's timeout."""
    return route.idle_timeout_seconds + KEEP_ALIVE_MARGIN_S
