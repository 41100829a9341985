"""The engines: one module each, registered in :data:`eks_inference.spec.engines.ENGINES`.

- :mod:`~eks_inference.charts.engines.vllm`: ``engine: vllm``, a standalone vLLM Deployment.
- :mod:`~eks_inference.charts.engines.rayservice`: ``engine: rayservice``, Ray Serve on a
  KubeRay RayService.

An engine extends :class:`~eks_inference.charts.engines.base.ServingEngine`.
:mod:`~eks_inference.charts.engines.built_in` registers the package's own, on the registry's
first use; another engine is one more module and one more entry in its
:data:`~eks_inference.charts.engines.built_in.BUILT_IN_ENGINES`, or, outside the package, one
call to ``ENGINES.register``.
"""
