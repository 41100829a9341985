"""``engine: kserve``: vLLM as a KServe InferenceService on Knative, scaling to zero.

- :mod:`~eks_inference.engines.kserve.engine`: the engine and its InferenceService.
- :mod:`~eks_inference.engines.kserve.options`: its options, the Knative settings.
- :mod:`~eks_inference.engines.kserve.observed`: its alerts and panels on cold starts.
- :mod:`~eks_inference.engines.kserve.knative`: the Knative Serving the KServe add-on installs.
"""
