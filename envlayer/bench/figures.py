"""One measured figure of a run, and the ratio of a figure to its baseline."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from envlayer.bench.timing import Spread

ENVLAYER = "envlayer"
"""How the ``method`` of a figure measured through envlayer begins (``envlayer``,
``envlayer streamed``); a baseline's method names its tool."""


@dataclass(frozen=True)
class Figure:
    """A median and its spread for one measurement of one backend by one method.

    ``unit`` is ``"ms"`` or ``"s"``. ``bytes`` is the payload of a transfer or a flood
    (the throughput is ``bytes`` over the median); ``peak_rss_mib`` the peak memory of
    the process that ran a flood. ``baseline`` names the method this figure is compared
    to (a figure of the same backend and measure), ``None`` when there is none."""

    backend: str
    measure: str
    method: str
    unit: str
    spread: Spread
    bytes: int | None = None
    peak_rss_mib: float | None = None
    baseline: str | None = None

    @property
    def through_envlayer(self) -> bool:
        """True for a figure measured through envlayer, False for a baseline."""
        return self.method.split(" ")[0] == ENVLAYER

    @property
    def mib_per_s(self) -> float | None:
        """Throughput at the median, in MiB/s, for figures that moved bytes."""
        if self.bytes is None:
            return None
        seconds = self.spread.median / (1000 if self.unit == "ms" else 1)
        return self.bytes / (1 << 20) / seconds

    def ratio(self, figures: list[Figure]) -> float | None:
        """This figure's median over its baseline's, from ``figures`` (None without one)."""
        for other in figures:
            if (other.backend, other.measure, other.method) == (self.backend, self.measure, self.baseline):
                return self.spread.median / other.spread.median
        return None

    def to_json(self, figures: list[Figure]) -> dict[str, Any]:
        """The figure as JSON, with its throughput and its ratio to its baseline."""
        data = asdict(self)
        data.update(data.pop("spread"))
        data["mib_per_s"] = self.mib_per_s
        data["ratio"] = self.ratio(figures)
        data["through_envlayer"] = self.through_envlayer
        return data
