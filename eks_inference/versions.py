"""Every pinned version the library emits: images, Helm charts, EKS add-ons, Kubernetes.

One module so that an upgrade is one reviewed diff, and so that tests can assert that nothing
rendered anywhere is tagged ``latest``. Versions marked *unverified* come from public release
notes and are overridable defaults rather than facts checked against a registry from here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HelmChartVersion:
    """A Helm chart pinned to one version, from an HTTP or OCI repository."""

    chart: str
    repository: str
    version: str


# Kubernetes in EKS standard support; the kubectl Lambda layer must match (kubectl-v35).
KUBERNETES_VERSION = "1.35"

# Ray: the operator's `rayVersion`, the Ray LLM image on GPUs, and the Ray baked into our
# Neuron Ray image all agree, so head and workers speak the same protocol.
RAY_VERSION = "2.60.0"

KUBERAY_OPERATOR_CHART = HelmChartVersion(
    chart="kuberay-operator",
    repository="https://ray-project.github.io/kuberay-helm/",
    version="1.7.0",
)
NEURON_HELM_CHART = HelmChartVersion(
    chart="neuron-helm-chart",
    repository="oci://public.ecr.aws/neuron/neuron-helm-chart",
    version="1.9.0",
)
NVIDIA_DEVICE_PLUGIN_CHART = HelmChartVersion(
    chart="nvidia-device-plugin",
    repository="https://nvidia.github.io/k8s-device-plugin",
    version="0.20.0",
)

# Images. The GPU and Neuron stacks are pinned separately: Inferentia2 is served by a legacy
# Neuron stack (vLLM 0.16 + vllm-neuron, NxD Inference) whose images trail the GPU ones.
VLLM_GPU_IMAGE = "vllm/vllm-openai:v0.30.0"
RAY_LLM_GPU_IMAGE = f"rayproject/ray-llm:{RAY_VERSION}-py311-cu128"
NEURON_VLLM_IMAGE = (
    "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:"
    "0.16.0-neuronx-py312-sdk2.31.1-ubuntu24.04"
)
NEURON_SDK_VERSION = "2.31.1"
# Ray head image when the workers run the GPU Ray LLM image: the same image, so the head can
# import the Serve application (`ray.serve.llm`) it routes to.
RAY_HEAD_GPU_IMAGE = RAY_LLM_GPU_IMAGE
