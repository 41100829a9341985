"""How long a replica takes to serve from nothing, per weights loader, from catalog figures.

A cold start is four phases: a node is launched (``node``), the serving image is pulled
(``image``; for ``loader: image`` the weights image too, ``weights_image``), the weights are read
(``weights``: their size over the loader's bandwidth on that instance), and the engine comes
up (``engine``: graph capture on GPUs, loading compiled artifacts, or compiling, on
Inferentia2). Each phase carries how it was computed and the source of its figures
(:mod:`eks_inference.catalog.cold_start_figures`).

The bandwidth of each loader, on an instance of :mod:`eks_inference.catalog.node_hardware`:

- ``runai_streamer``: the instance's network at the share of it the published anchor
  reached (10.4 GB in 5.0 s on g6e.4xlarge's 20 Gbps: 83%), and no faster than the anchor
  (its 16 concurrent reads bound it on wider networks).
- ``mountpoint``: half of the streamer's share (one sequential reader), at most 1 GB/s.
- ``fsx``: the file system's throughput (capacity times throughput per TiB), at most the
  instance's network.
- ``image``: the weights come with the image pull (the anchor's 183 MB/s), then are copied
  to the pod's volume and read from it at the local disk's rate (NVMe where the instance has
  an instance store, which the node bootstrap mounts for pods; EBS otherwise).

:func:`cold_start` is what ``eks-inference plan`` shows and what the load budget
(:mod:`eks_inference.specification.startup_budget`) is held against; :func:`recommended_loader` is
the design
documents' decision rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eks_inference.catalog import GB, GIB, sizing
from eks_inference.catalog import cold_start_figures as figures
from eks_inference.catalog.node_hardware import NodeHardware, node_hardware
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engines import engine_of
from eks_inference.specification.weights import (
    LOADERS,
    Lustre,
    lustre_capacity_gib,
    lustre_throughput_per_tib,
)
from eks_inference.specification.weights_rules import IMAGE_WEIGHTS_MAX_BYTES


@dataclass(frozen=True)
class Phase:
    """One phase of a cold start: its name, duration, how it was computed and from what."""

    name: str
    seconds: float
    basis: str
    source: str


@dataclass(frozen=True)
class ColdStart:
    """A cold start of one replica with ``loader`` on ``instance_type``, phase by phase."""

    loader: str
    instance_type: str
    phases: tuple[Phase, ...]

    @property
    def total_seconds(self) -> float:
        return sum(p.seconds for p in self.phases)

    def seconds(self, name: str) -> float:
        """Seconds of the phase ``name`` (0 when there is none)."""
        return sum(p.seconds for p in self.phases if p.name == name)

    def as_json(self) -> dict[str, Any]:
        """The loader, each phase rounded to a tenth of a second, and the total."""
        return {
            "loader": self.loader,
            "instance_type": self.instance_type,
            "phases": [
                {
                    "phase": p.name,
                    "seconds": round(p.seconds, 1),
                    "basis": p.basis,
                    "source": p.source,
                }
                for p in self.phases
            ],
            "total_seconds": round(self.total_seconds, 1),
        }


def streamer_share_of_network() -> float:
    """The share of the instance's network the Run:ai streamer reached in the anchor."""
    rate = figures.RUNAI_ANCHOR_BYTES.value / figures.RUNAI_ANCHOR_SECONDS.value
    return rate / node_hardware(figures.RUNAI_ANCHOR_INSTANCE).network_bytes_per_second


def local_disk(hardware: NodeHardware) -> figures.Figure:
    """Where pods' local volumes live: the NVMe instance store when there is one (the node
    bootstrap mounts the kubelet's directory on it), else the EBS root volume."""
    return figures.NVME_READ if hardware.has_instance_store else figures.EBS_READ


def _gbps(rate: float) -> str:
    return f"{rate / GB:.2f} GB/s"


def _read(size: float, rate: float, what: str) -> str:
    return f"{size / GB:.1f} GB / {_gbps(rate)} {what}"


def _streamer(spec: ModelDeploymentSpec, hardware: NodeHardware, size: float) -> list[Phase]:
    share = streamer_share_of_network()
    rate = min(hardware.network_bytes_per_second * share, figures.STREAMER_MAX_RATE.value)
    basis = _read(size, rate, f"(from S3: {share:.0%} of {hardware.network_gbps:g} Gbps at most)")
    source = f"{figures.RUNAI_ANCHOR_SECONDS.source} ({figures.RUNAI_ANCHOR_BYTES.value / GB} GB)"
    return [Phase("weights", size / rate, basis, source)]


def _mountpoint(spec: ModelDeploymentSpec, hardware: NodeHardware, size: float) -> list[Phase]:
    factor = figures.MOUNTPOINT_SHARE_OF_STREAMER
    network = hardware.network_bytes_per_second * streamer_share_of_network() * factor.value
    rate = min(network, figures.MOUNTPOINT_MAX_RATE.value)
    basis = _read(size, rate, "(one sequential reader through Mountpoint, from S3)")
    return [Phase("weights", size / rate, basis, factor.source)]


def lustre_bytes_per_second(lustre: Lustre, weights_gib: float) -> float:
    """What a file system of these options delivers: capacity in TiB times MB/s per TiB."""
    tib = lustre_capacity_gib(lustre, weights_gib) / 1024
    return tib * lustre_throughput_per_tib(lustre, weights_gib) * 1e6


def _fsx(spec: ModelDeploymentSpec, hardware: NodeHardware, size: float) -> list[Phase]:
    lustre = spec.weights.lustre if spec.weights.loader == "fsx" else Lustre()
    gib = size / GIB
    file_system = lustre_bytes_per_second(lustre, gib)
    rate = min(file_system, hardware.network_bytes_per_second)
    capacity = lustre_capacity_gib(lustre, gib)
    tier = lustre_throughput_per_tib(lustre, gib)
    basis = _read(size, rate, f"(FSx for Lustre {capacity} GiB at {tier} MB/s/TiB)")
    return [Phase("weights", size / rate, basis, "FSx for Lustre user guide: throughput per TiB")]


def _image(spec: ModelDeploymentSpec, hardware: NodeHardware, size: float) -> list[Phase]:
    pull = figures.image_pull_bytes_per_second()
    disk = local_disk(hardware)
    return [
        Phase(
            "weights_image",
            size / pull,
            _read(size, pull, "(weights image pull)"),
            figures.IMAGE_ANCHOR_SECONDS.source,
        ),
        Phase(
            "weights",
            2 * size / disk.value,
            _read(2 * size, disk.value, "(copy to the pod's volume, then read)"),
            disk.source,
        ),
    ]


_WEIGHTS: dict[str, Callable[[ModelDeploymentSpec, NodeHardware, float], list[Phase]]] = {
    "runai_streamer": _streamer,
    "mountpoint": _mountpoint,
    "fsx": _fsx,
    "image": _image,
}


def _engine(spec: ModelDeploymentSpec) -> Phase:
    if not spec.on_neuron:
        figure = figures.GPU_ENGINE_START
        return Phase("engine", figure.value, "vLLM start and CUDA graph capture", figure.source)
    load = figures.NEURON_ARTIFACT_LOAD
    if spec.has_compiled_artifacts:
        return Phase("engine", load.value, "load compiled Neuron artifacts", load.source)
    compile_figure = figures.NEURON_COMPILE_SECONDS_PER_7B
    scale = sizing.weight_bytes(spec.model.architecture) / figures.NEURON_COMPILE_REFERENCE_BYTES
    return Phase(
        "engine",
        compile_figure.value * scale + load.value,
        f"compile in the pod ({scale:.1f} x a 7B model), then load",
        compile_figure.source,
    )


def cold_start(spec: ModelDeploymentSpec, loader: str | None = None) -> ColdStart:
    """A replica of ``spec`` from a new node to serving, with ``loader`` (default: its own)."""
    name = loader or spec.weights.loader
    instance = spec.instance
    hardware = node_hardware(instance.name)
    # Each node of a multi-node replica loads its own pipeline stage, a share of the weights,
    # at the same time as the others.
    size = float(sizing.weight_bytes(spec.model.architecture)) / spec.nodes_per_replica
    image = figures.SERVING_IMAGE_BYTES[instance.accelerator]
    pull = figures.image_pull_bytes_per_second()
    node = figures.NODE_READY
    phases = [
        Phase("node", node.value, "launch and join", node.source),
        Phase(
            "image", image.value / pull, _read(image.value, pull, "(serving image)"), image.source
        ),
        *_WEIGHTS[name](spec, hardware, size),
        _engine(spec),
    ]
    return ColdStart(name, instance.name, tuple(phases))


def supported_loaders(spec: ModelDeploymentSpec) -> tuple[str, ...]:
    """The loaders ``spec``'s engine reads weights with on its accelerator, in catalog order."""
    supported = engine_of(spec).loaders(spec.accelerator)
    return tuple(name for name in LOADERS if name in supported)


def cold_starts(spec: ModelDeploymentSpec) -> tuple[ColdStart, ...]:
    """A cold start with every loader ``spec``'s engine supports on its accelerator."""
    return tuple(cold_start(spec, name) for name in supported_loaders(spec))


@dataclass(frozen=True)
class Recommendation:
    """The loader the design documents' decision rule picks, and why."""

    loader: str
    reason: str


def recommended_loader(spec: ModelDeploymentSpec) -> Recommendation:
    """The documents' rule: Run:ai for standalone vLLM, Mountpoint for Ray (and wherever the
    streamer does not run), image only for tiny models, FSx only when training shares it.

    FSx is never recommended from a spec alone: it pays off when the same cluster trains and
    serves and checkpoint-to-serve latency matters, which a serving spec cannot tell.
    """
    supported = supported_loaders(spec)
    if "runai_streamer" in supported:
        return Recommendation(
            "runai_streamer",
            "standalone vLLM on GPUs: streams from S3 straight into GPU memory with no "
            "volume to manage, the fastest start; fsx only if this cluster also trains and "
            "checkpoint-to-serve time matters",
        )
    small = sizing.weight_bytes(spec.model.architecture) <= IMAGE_WEIGHTS_MAX_BYTES
    image = (
        f"; image only for a disconnected cluster (weights under "
        f"{IMAGE_WEIGHTS_MAX_BYTES // GB} GB)"
        if small and "image" in supported
        else ""
    )
    if "mountpoint" in supported:
        return Recommendation(
            "mountpoint",
            f"{engine_of(spec).summary} on {spec.instance_type} has no Run:ai streamer; one "
            f"read-only mount serves every pod (Ray Serve's head and workers alike) and the "
            f"node's cache serves restarts{image}",
        )
    return Recommendation(supported[0], "the only loader its engine supports here")
