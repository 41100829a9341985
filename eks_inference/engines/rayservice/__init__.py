"""``engine: rayservice``: Ray Serve on a KubeRay RayService.

- :mod:`~eks_inference.engines.rayservice.engine`: the engine and its RayService.
- :mod:`~eks_inference.engines.rayservice.pods`: the Ray head's and workers' pods.
- :mod:`~eks_inference.engines.rayservice.serve_config`: the Serve application's config.
"""
