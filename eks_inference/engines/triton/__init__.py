"""``engine: triton``: NVIDIA Triton on a typed model repository.

- :mod:`~eks_inference.engines.triton.engine`: the engine and its Deployment.
- :mod:`~eks_inference.engines.triton.options`: its options, the model repository, and their
  rules.
- :mod:`~eks_inference.engines.triton.repository`: the repository's generated files.
- :mod:`~eks_inference.engines.triton.observed`: its alerts and panels on Triton's metrics.
"""
