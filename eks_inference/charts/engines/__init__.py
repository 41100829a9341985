"""The engines: one module each, registered in :data:`eks_inference.spec.engines.ENGINES`.

- :mod:`~eks_inference.charts.engines.vllm`: ``engine: vllm``, a standalone vLLM Deployment.
- :mod:`~eks_inference.charts.engines.rayservice`: ``engine: rayservice``, Ray Serve on a
  KubeRay RayService.

An engine extends :class:`~eks_inference.charts.engines.base.ServingEngine`. The package
registers the built-in engines when it is first imported (importing :mod:`eks_inference`
does), so that a spec naming one validates; another engine is one more module and one more
entry in :data:`BUILT_IN_ENGINES`, or, outside the package, one call to
``ENGINES.register``.
"""

from __future__ import annotations

from eks_inference.charts.engines.base import ServingEngine
from eks_inference.charts.engines.rayservice import RayServiceEngine
from eks_inference.charts.engines.vllm import VllmEngine
from eks_inference.spec.engines import ENGINES

#: The engines the package serves with, in the order ``eks-inference schema`` lists them.
BUILT_IN_ENGINES: tuple[ServingEngine, ...] = (VllmEngine(), RayServiceEngine())

for _engine in BUILT_IN_ENGINES:
    ENGINES.register(_engine)
