"""Ray Serve application: one model on Inferentia2 with vLLM and the Neuron plugin, served
behind OpenAI-compatible HTTP routes.

Why this exists: Ray Serve LLM (``ray.serve.llm``) has no working Neuron path, so on Inferentia2
the RayService runs this application instead. Each replica of the ``NeuronLLMServer``
deployment owns one vLLM engine on the NeuronCores Ray assigned to it; the vLLM Neuron plugin
(``vllm-neuron``, NxD Inference) loads the model precompiled at ``NEURON_COMPILED_ARTIFACTS``,
which the chart sets in the pod's environment. Ray Serve provides routing, autoscaling on
ongoing requests and replica health checks.

The modules, each with one job:

* :mod:`.config`: the application's arguments (``ServerConfig``), validated on the Ray head;
* :mod:`.engine`: what the server needs from an engine, and the types it exchanges with one;
* :mod:`.cores`: pinning a replica to the NeuronCores Ray assigned to it;
* :mod:`.vllm_engine`: the one adapter that touches vLLM, and the production engine factory;
* :mod:`.schemas`: the OpenAI request bodies, and how a body is parsed into one;
* :mod:`.errors`: errors in OpenAI's shape, and the handlers that answer with them;
* :mod:`.streaming`: server-sent events, and generations interleaved as their steps arrive;
* :mod:`.server`: the OpenAI-compatible routes, independent of Ray;
* :mod:`.app`: the Ray Serve deployment and the builders the Serve config imports.

This package and ``api_key_auth`` are copied into the Ray pods together, laid out as the
package ``eks_inference_serve`` (one ConfigMap on ``PYTHONPATH``, see
:mod:`eks_inference.charts.shipped`) in the same tree as here, so the relative imports between
them resolve alike in the project and in a pod. The modules import nothing else of the project:
only the standard library, Ray, FastAPI/Starlette and pydantic (all in the image and on the Ray
head), and vLLM lazily inside :mod:`.vllm_engine`. The head (which only builds the application)
and unit tests import them without vLLM installed.
"""
