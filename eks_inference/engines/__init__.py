"""The engines: one package each, registered in
:data:`eks_inference.specification.engine_registry.ENGINES`.

- :mod:`~eks_inference.engines.vllm`: ``engine: vllm``, a standalone vLLM Deployment.
- :mod:`~eks_inference.engines.rayservice`: ``engine: rayservice``, Ray Serve on a KubeRay
  RayService.
- :mod:`~eks_inference.engines.kserve`: ``engine: kserve``, vLLM as a KServe InferenceService
  on Knative, scaling to zero.
- :mod:`~eks_inference.engines.triton`: ``engine: triton``, NVIDIA Triton on a typed model
  repository.

An engine extends :class:`~eks_inference.charts.serving.ServingEngine`.
:mod:`~eks_inference.engines.built_in` registers the package's own, on the registry's
first use; another engine is one more package and one more entry in its
:data:`~eks_inference.engines.built_in.BUILT_IN_ENGINES`, or, outside the package, one
call to ``ENGINES.register``.
"""
