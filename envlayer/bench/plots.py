"""PNG plots of a run, made with matplotlib (the ``bench`` extra), imported only here and
only when plots are asked for.

* ``latency.png``: start and warm exec per backend and method, milliseconds on a log
  scale, bars at the median with the p10-p90 spread;
* ``throughput.png``: MiB/s of every transfer and flood per backend and method on a
  log scale, the floors (baselines) beside envlayer's figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envlayer.errors import EnvlayerError

PLOTS = {"latency": "latency.png", "throughput": "throughput.png"}
"""The plots :func:`write_plots` writes, by kind: file names in the output directory."""

ENVLAYER_COLOR = "tab:blue"
BASELINE_COLOR = "tab:gray"


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend.

    Raises: EnvlayerError naming the extra to install when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        raise EnvlayerError(
            "plots need matplotlib, which is not installed",
            hint="pip install 'envlayer[bench]' (or leave out --output to print the figures only)",
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bars(plt: Any, figures: list[dict[str, Any]], value: str, xlabel: str, log: bool, path: Path) -> None:
    labels = [f"{f['backend']}: {f['measure']} / {f['method']}" for f in figures]
    values = [f[value] for f in figures]
    colors = [ENVLAYER_COLOR if f["through_envlayer"] else BASELINE_COLOR for f in figures]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(figures) + 1.2))
    if value == "median":
        spread = [[f["median"] - f["p10"] for f in figures], [f["p90"] - f["median"] for f in figures]]
        ax.barh(labels, values, xerr=spread, color=colors, capsize=2)
    else:
        ax.barh(labels, values, color=colors)
    if log:
        ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title("blue: through envlayer, grey: baseline (same run)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_plots(doc: dict[str, Any], directory: Path) -> list[Path]:
    """Write the plots of ``doc`` (from :func:`envlayer.bench.report.document`) into
    ``directory``; the paths written (a plot with no figures is left out)."""
    plt = pyplot()
    latency = [f for f in doc["figures"] if f["unit"] == "ms" and f["bytes"] is None]
    moved = [f for f in doc["figures"] if f["mib_per_s"] is not None]
    written = []
    for kind, figures, value, xlabel, log in (
        ("latency", latency, "median", "milliseconds (log scale), median with p10-p90", True),
        ("throughput", moved, "mib_per_s", "MiB/s at the median (log scale)", True),
    ):
        if figures:
            path = directory / PLOTS[kind]
            _bars(plt, figures, value, xlabel, log, path)
            written.append(path)
    return written
