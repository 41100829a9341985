"""NVIDIA Dynamo (``engine: dynamo``): its options, rules, graph and observation."""
