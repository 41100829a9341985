"""The engines: one module each, registered in :data:`eks_inference.specification.engines.ENGINES`.

- :mod:`~eks_inference.engines.vllm.engine`: ``engine: vllm``, a standalone vLLM Deployment.
- :mod:`~eks_inference.engines.rayservice.engine`: ``engine: rayservice``, Ray Serve on a
  KubeRay RayService.

An engine extends :class:`~eks_inference.charts.serving.ServingEngine`.
:mod:`~eks_inference.engines.built_in` registers the package's own, on the registry's
first use; another engine is one more module and one more entry in its
:data:`~eks_inference.engines.built_in.BUILT_IN_ENGINES`, or, outside the package, one
call to ``ENGINES.register``.
"""
