"""``engine: vllm``: a standalone vLLM Deployment (:mod:`~eks_inference.engines.vllm.engine`)."""
