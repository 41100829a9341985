"""Code that runs inside the cluster's pods, and the image it runs in.

``neuron_app`` is the Ray Serve application that serves a model on Inferentia2 with vLLM and
the Neuron plugin. It is shipped into pods on its own (as a ConfigMap) and imports nothing from
this package, so it is deliberately not imported here: importing ``eks_inference.serve`` must
not require Ray or FastAPI. ``image`` describes the Ray + Neuron vLLM image that runs it.
"""
