"""What a metric of :mod:`eks_inference.metrics` is: its name as its emitter registers it, its
Prometheus type (which decides the series names Prometheus stores), and where it was read."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    """The Prometheus type of a metric, which decides the series names it is exposed as."""

    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"
    # A counter exposed under its registered name as is (prometheus-cpp adds no _total).
    UNSUFFIXED_COUNTER = "unsuffixed counter"


@dataclass(frozen=True)
class Source:
    """The component and version that emits a metric, and where in it that was read."""

    component: str
    version: str
    where: str


@dataclass(frozen=True)
class Metric:
    """A metric as its emitter registers it (counters without ``_total``)."""

    name: str
    kind: Kind
    source: Source
    meaning: str

    @property
    def series(self) -> tuple[str, ...]:
        """The names Prometheus stores: a counter's ``_total``, a histogram's three series."""
        if self.kind is Kind.COUNTER:
            return (f"{self.name.removesuffix('_total')}_total",)
        if self.kind is Kind.HISTOGRAM:
            return tuple(f"{self.name}_{suffix}" for suffix in ("bucket", "sum", "count"))
        # Gauges, and counters their emitter exposes as named (Kind.UNSUFFIXED_COUNTER).
        return (self.name,)

    def one(self) -> str:
        """The one series of a gauge or a counter, as queries name it."""
        if self.kind is Kind.HISTOGRAM:
            raise ValueError(f"{self.name} is a histogram; use bucket(), not one()")
        return self.series[0]

    def bucket(self) -> str:
        """The ``_bucket`` series of a histogram, which ``histogram_quantile`` reads."""
        if self.kind is not Kind.HISTOGRAM:
            raise ValueError(f"{self.name} is a {self.kind}, not a histogram")
        return self.series[0]
