"""Code that runs inside the cluster's pods, and the image it runs in.

``neuron`` is the Ray Serve application that serves a model on Inferentia2 with vLLM and the
Neuron plugin (it also builds Ray Serve LLM's application behind the API-key check on GPUs);
``api_key_auth`` is the platform's API-key check, which every model server loads (vLLM through
its ``--middleware`` flag, the Serve applications around their ASGI app). Both are shipped into
pods (one ConfigMap, :mod:`eks_inference.charts.shipped`; in the Ray pods with this file, as a
copy of this package's tree) and import nothing of the project but the check, so neither is
imported here: importing ``eks_inference.serve`` must not require Ray or FastAPI. ``image``
describes the Ray + Neuron vLLM image that runs the application.
"""
