"""Layer 1: what to serve and on what, typed and validated before anything is built.

- :mod:`~eks_inference.specification.deployment`: :class:`ModelDeploymentSpec`, one model on one
  instance type, and the rules across its fields.
- :mod:`~eks_inference.specification.platform`: :class:`PlatformSpec`, the cluster's node pools and
  deployments together, and the rules across deployments.
- :mod:`~eks_inference.specification.node_pools`, :mod:`~eks_inference.specification.endpoints`,
  :mod:`~eks_inference.specification.routes`: node pools, load-balancer exposure and the routes
  derived
  from them.
- :mod:`~eks_inference.specification.validation`: how every problem is collected and reported at
  once.
- :mod:`~eks_inference.specification.files`: reading a platform file safely.

Nothing here imports cdk8s or aws-cdk-lib: the CLI and the manifest writer validate a
platform without starting Node.js. The public names are exported from :mod:`eks_inference`.
"""

# Every way into the package passes here first, so the deployment's rules are written into
# its rule book before any spec validates (the rules read the model: the model cannot import
# them).
from eks_inference.specification import deployment_rules  # noqa: F401
