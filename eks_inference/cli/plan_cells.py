"""How a plan reads as text: the cells, column headers and notes that the terminal tables and
the Markdown of :mod:`eks_inference.cli.plan_render` both show."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eks_inference.catalog.spot_prices import SPOT_PRICES_DATE
from eks_inference.cli.plan_adapters import ADAPTER_NUMERIC
from eks_inference.metrics import metric_names

if TYPE_CHECKING:
    from eks_inference.ops.plan import ConfigurationPlan, DeploymentPlan, PoolPlan

BOUND_NOTE = (
    "Decode throughput is a memory-bandwidth bound for one node with all its replicas, every "
    "sequence at max_model_len: a ceiling, not a benchmark. $ per 1M tokens = node $/hour / "
    "(tokens/s x 3600) x 1e6, at on-demand catalog prices (us-east-1), or for SPOT pools at "
    f"the catalog's spot prices of {SPOT_PRICES_DATE} (median over us-east-1 zones; "
    "--spot-price overrides them)."
)


WATCH_NOTE = (
    "Per deployment, the metrics on its Grafana dashboard that matter most and the thresholds "
    "its alerts and autoscaler act on (eks_inference/observability/signals.py)."
)


def money(value: float) -> str:
    """``12.98127`` -> ``$12.98``."""
    return f"${value:,.2f}"


def rate(value: float) -> str:
    """Tokens per second, whole and grouped: ``10,171``."""
    return f"{value:,.0f}"


def memory(plan: ConfigurationPlan) -> str:
    """Weights plus worst-case KV cache against the TP group's memory."""
    return (
        f"{plan.required_gib:.1f} / {plan.accelerator_memory_gib:.0f} GiB "
        f"({plan.memory_utilization:.0%})"
    )


def fit(plan: ConfigurationPlan) -> str:
    return "yes" if plan.fits else "NO"


def replicas_per_node(c: ConfigurationPlan) -> str:
    """Replicas a node holds, or for a replica across nodes its group: nodes and GPUs."""
    if c.nodes_per_replica == 1:
        return str(c.replicas_per_node)
    return f"1 per {c.nodes_per_replica} nodes ({c.accelerators_per_replica} GPUs)"


def deployment_cells(d: DeploymentPlan) -> list[str]:
    c = d.configuration
    return [
        d.name,
        c.instance_type,
        str(c.tensor_parallel_size),
        replicas_per_node(c),
        f"{d.nodes_min}-{d.nodes_max}",
        memory(c),
        fit(c),
        rate(c.decode_tokens_per_second_bound),
        money(d.price_per_hour_min),
        money(d.price_per_hour_max),
        money(c.cost_per_million_tokens),
    ]


DEPLOYMENT_HEADERS = (
    "deployment",
    "instance",
    "TP",
    "replicas/node",
    "nodes",
    "memory (weights+KV / TP group)",
    "fits",
    "decode bound tok/s",
    "$/h min",
    "$/h max",
    "$/1M tok",
)
POOL_HEADERS = ("pool", "instance", "capacity", "nodes", "$/h node", "$/h min", "$/h max")
SCALE_TO_ZERO_HEADERS = (
    "deployment",
    "loader",
    "cold start s",
    "to zero after s",
    "$/idle h",
    "idle h/day",
    "h at zero/day",
    "$/day saved",
)
NUMERIC = {
    "node s",
    "image s",
    "weights image s",
    "weights s",
    "engine s",
    "total s",
    "TP",
    "replicas/node",
    "nodes",
    "decode bound tok/s",
    "$/h min",
    "$/h max",
    "$/1M tok",
    "$/h node",
    "GiB",
    "tokens of KV",
    *SCALE_TO_ZERO_HEADERS[2:],
    *ADAPTER_NUMERIC,
}


def pool_cells(p: PoolPlan) -> list[str]:
    """A pool's row: its capacity types in order of preference, spot prices marked."""
    spot = " (spot)" if p.price_source.startswith("spot") else ""
    return [
        p.name,
        p.instance_type,
        " > ".join((p.capacity_type, *p.fallback_capacity_types)),
        f"{p.min_size}-{p.max_size}",
        money(p.price_per_hour) + spot,
        money(p.price_per_hour_min),
        money(p.price_per_hour_max),
    ]


WATCH_HEADERS = ("deployment", "signal", "metric", "threshold", "then")


def watch_rows(d: DeploymentPlan) -> list[list[str]]:
    """One row per watched signal: the metrics its query reads, and the threshold chosen."""
    return [
        [d.name, w.signal, ", ".join(sorted(metric_names(w.query))), w.threshold, w.consequence]
        for w in d.watch
    ]


KV_TIER_HEADERS = ("deployment", "tier", "GiB", "tokens of KV")


def kv_tier_rows(d: DeploymentPlan) -> list[list[str]]:
    """One row per KV tier of a replica: its size and the tokens of KV it holds."""
    return [[d.name, t.tier, f"{t.gib:.1f}", f"{t.tokens:,}"] for t in d.kv_tiers]


COLD_START_PHASES = ("node", "image", "weights_image", "weights", "engine")
COLD_START_HEADERS = (
    "deployment",
    "loader",
    "node s",
    "image s",
    "weights image s",
    "weights s",
    "engine s",
    "total s",
    "",
)
COLD_START_NOTE = (
    "Cold start of one replica on a new node, per loader its engine supports on its "
    "instance: catalog figures anchored on the EKS best practices guide (Run:ai streamer "
    "10.4 GB in 5.0 s on g6e.4xlarge, an 8.8 GB image in 48 s, NVMe ~30 GB/s, EBS ~1 GB/s, "
    "node ready ~30 s) and estimates (eks_inference/catalog/cold_start_figures.py); `plan --json` "
    "gives each phase's basis and source. The probes, do-not-disrupt durations and alerts "
    "allow at least three times the weights and engine phases."
)


def cold_start_rows(d: DeploymentPlan) -> list[list[str]]:
    """One row per supported loader: seconds per phase, the deployment's own loader marked
    ``in use`` and the documents' choice ``recommended``."""
    rows = []
    own = d.cold_start.loader if d.cold_start else None
    best = d.recommendation.loader if d.recommendation else None
    for estimate in d.cold_starts:
        marks = [
            m
            for m, on in (
                ("in use", estimate.loader == own),
                ("recommended", estimate.loader == best),
            )
            if on
        ]
        rows.append(
            [
                d.name,
                estimate.loader,
                *(
                    f"{estimate.seconds(phase):.0f}" if estimate.seconds(phase) else "-"
                    for phase in COLD_START_PHASES
                ),
                f"{estimate.total_seconds:.0f}",
                ", ".join(marks),
            ]
        )
    return rows


SCALE_TO_ZERO_NOTE = (
    "Deployments at min_replicas 0 (eks_inference/ops/scale_to_zero.py): the first request "
    "after idle waits the cold start of the deployment's own loader (the cold-start "
    "estimate; `plan --json` gives its phases) before vLLM starts on it. An hour at zero "
    "saves the nodes one warm replica would hold at the pool's node price; a day saves that "
    "for the idle hours (one stretch, --idle-hours, default 12) less the time the engine "
    "keeps its last replica after the last request (Knative's retention period; Ray Serve's "
    "downscale delay and the Ray autoscaler's idle timeout). The emptied node is removed "
    "minutes later still, which is not subtracted: an upper bound."
)


def scale_to_zero_rows(d: DeploymentPlan) -> list[list[str]]:
    """The deployment's scale-to-zero row, or none when it keeps a replica."""
    z = d.scale_to_zero
    if z is None:
        return []
    return [
        [
            d.name,
            z.loader,
            f"{z.cold_start_seconds:.0f}",
            str(z.delay_seconds),
            money(z.saved_per_idle_hour),
            f"{z.idle_hours_per_day:g}",
            f"{z.hours_at_zero_per_day:.2f}",
            money(z.saved_per_day),
        ]
    ]
