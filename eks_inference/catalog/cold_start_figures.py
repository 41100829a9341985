"""The figures a cold start is estimated from, each with where it comes from.

Published figures (``published=True``) are the anchors of the EKS best practices guide for
AI/ML, "Application scaling and performance" (fast model loading and container start-up):
the Run:ai Model Streamer put a 10.4 GB model into GPU memory in 5.0 s on g6e.4xlarge; an
8.8 GB image was pulled in 48 s; local NVMe instance store read about 30 GB/s against about
1 GB/s from an EBS root volume; a node became ready in about 30 s. The estimate must
reproduce them (``tests/test_cold_start.py``).

Everything else is an *estimate* (``published=False``): a round figure this project chose
and explains, to be replaced by a measurement of your own. The image sizes of the pinned
serving images are the compressed sizes their registries list (unverified from here; no
registry is reachable at build time).
"""

from __future__ import annotations

from dataclasses import dataclass

from eks_inference.catalog.instances import GB, Accelerator

EKS_GUIDE = "EKS best practices guide, AI/ML: application scaling and performance"


@dataclass(frozen=True)
class Figure:
    """One number the estimate uses: its value, unit, source, and whether it is published."""

    value: float
    unit: str
    source: str
    published: bool


# --- Published anchors ---------------------------------------------------------------------
RUNAI_ANCHOR_BYTES = Figure(10.4 * GB, "B", f"{EKS_GUIDE}: model streamed", True)
RUNAI_ANCHOR_SECONDS = Figure(5.0, "s", f"{EKS_GUIDE}: Run:ai streamer on g6e.4xlarge", True)
RUNAI_ANCHOR_INSTANCE = "g6e.4xlarge"
IMAGE_ANCHOR_BYTES = Figure(8.8 * GB, "B", f"{EKS_GUIDE}: image pulled", True)
IMAGE_ANCHOR_SECONDS = Figure(48.0, "s", f"{EKS_GUIDE}: image pull", True)
NVME_READ = Figure(30 * GB, "B/s", f"{EKS_GUIDE}: local NVMe instance store", True)
EBS_READ = Figure(1 * GB, "B/s", f"{EKS_GUIDE}: EBS root volume", True)
NODE_READY = Figure(30.0, "s", f"{EKS_GUIDE}: node launch to Ready", True)

# --- Estimates -----------------------------------------------------------------------------
# Mountpoint serves vLLM's default loader, which reads the safetensors shards one after the
# other through the page cache: one sequential stream at a time where the streamer keeps 16
# range reads in flight. Taken as half the streamer's share of the network.
MOUNTPOINT_SHARE_OF_STREAMER = Figure(
    0.5, "", "estimate: one sequential reader against the streamer's 16", False
)
# The streamer keeps 16 range reads in flight (charts.loading); on networks wider than the
# anchor's, those reads rather than the network bound it: no faster than the anchor.
STREAMER_MAX_RATE = Figure(
    10.4 * GB / 5.0, "B/s", "estimate: 16 concurrent reads at the anchor's rate each", False
)
# A sequential reader through FUSE page-faults one window at a time.
MOUNTPOINT_MAX_RATE = Figure(1 * GB, "B/s", "estimate: one sequential reader through FUSE", False)
# vLLM on one GPU from weights in memory to serving: engine start, torch.compile and CUDA
# graph capture for a 7-9B model (the compile cache lives in the pod's HOME, so a new pod
# pays it again).
GPU_ENGINE_START = Figure(60.0, "s", "estimate: vLLM engine start, compile, graph capture", False)
# Neuron with compiled artifacts: load the compiled graphs and shard the weights onto the
# NeuronCores.
NEURON_ARTIFACT_LOAD = Figure(
    120.0, "s", "estimate: load compiled artifacts, shard weights onto NeuronCores", False
)
# Compiling in the pod instead (development only): about 3.4 minutes for a 7B model on
# inf2.8xlarge, as reported publicly, scaled with the weights (about 14.5 GB at bf16).
NEURON_COMPILE_SECONDS_PER_7B = Figure(
    204.0, "s", "reported: Neuron compile of a 7B model on inf2.8xlarge, 3.4 min", True
)
NEURON_COMPILE_REFERENCE_BYTES = 14.5 * GB
# The largest pinned serving image of each accelerator, compressed as pulled: vLLM 0.34.0
# (CUDA 13) and the Ray LLM 2.60 image on GPUs, the Neuron vLLM DLC on Inferentia2.
SERVING_IMAGE_BYTES: dict[Accelerator, Figure] = {
    Accelerator.NVIDIA: Figure(
        10.5 * GB, "B", "estimate: vllm/vllm-openai and rayproject/ray-llm, compressed", False
    ),
    Accelerator.NEURON: Figure(
        8.0 * GB, "B", "estimate: Neuron vLLM DLC 0.16.0 (SDK 2.31.1), compressed", False
    ),
}


def image_pull_bytes_per_second() -> float:
    """The pull rate of the published anchor: 8.8 GB in 48 s, about 183 MB/s."""
    return IMAGE_ANCHOR_BYTES.value / IMAGE_ANCHOR_SECONDS.value
