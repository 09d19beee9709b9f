"""What a run reports: the JSON document, the terminal table and the Markdown page."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from envlayer.bench.figures import Figure
from envlayer.bench.plots import PLOTS

SCHEMA = 1
"""Version of the JSON document's shape."""

HEADERS = ["BACKEND", "MEASURE", "METHOD", "MEDIAN", "P10-P90", "MIB/S", "PEAK RSS", "VS BASELINE"]


def document(figures: list[Figure], machine: dict[str, Any], command: list[str], quick: bool) -> dict[str, Any]:
    """The run as one JSON-ready document (``schema``, ``command``, ``quick``,
    ``machine``, ``backends``, ``figures``)."""
    return {
        "schema": SCHEMA,
        "command": command,
        "quick": quick,
        "machine": machine,
        "backends": sorted({f.backend for f in figures}),
        "figures": [f.to_json(figures) for f in figures],
    }


def value_text(value: float, unit: str) -> str:
    """``0.152 ms``, ``12.7 ms``, ``6.21 s``: three significant figures."""
    return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"


def row_cells(fig: dict[str, Any]) -> list[str]:
    """The table cells of one figure of :func:`document`."""
    unit = fig["unit"]
    ratio = f"{fig['ratio']:.2f}x {fig['baseline']}" if fig["ratio"] is not None else ""
    return [
        fig["backend"],
        fig["measure"],
        fig["method"],
        value_text(fig["median"], unit),
        f"{value_text(fig['p10'], unit)} - {value_text(fig['p90'], unit)}",
        f"{fig['mib_per_s']:.0f}" if fig["mib_per_s"] is not None else "",
        f"{fig['peak_rss_mib']:.0f} MiB" if fig["peak_rss_mib"] is not None else "",
        ratio,
    ]


def text_table(doc: dict[str, Any]) -> str:
    """The figures as aligned columns for a terminal."""
    rows = [HEADERS, *(row_cells(f) for f in doc["figures"])]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def markdown_table(doc: dict[str, Any]) -> str:
    """The figures as a Markdown table."""
    lines = ["| " + " | ".join(h.lower() for h in HEADERS) + " |", "|" + " --- |" * len(HEADERS)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row_cells(f)) + " |" for f in doc["figures"]]
    return "\n".join(lines)


def machine_text(machine: dict[str, Any]) -> str:
    """One paragraph naming the machine and the versions measured."""
    memory = machine.get("memory_bytes")
    gib = f"{memory / (1 << 30):.0f} GiB" if memory else "unknown memory"
    load = machine.get("load_average")
    versions = ", ".join(f"{k} {v}" for k, v in machine.get("versions", {}).items() if v)
    return (
        f"{machine['cores']} cores, {gib}, {machine['system']} {machine['kernel']} ({machine['machine']}), "
        f"{machine['python_implementation']} {machine['python']}; load average at the start "
        f"{' / '.join(str(x) for x in load) if load else 'unknown'}. {pinning_text(machine.get('pinned_cpu'))} "
        f"Versions: {versions}."
    )


def pinning_text(cpu: int | None) -> str:
    """Where the local backend's session measures ran (see :func:`envlayer.bench.machine.one_cpu`)."""
    if cpu is None:
        return "Local session measures ran where their shells landed (`--no-pin`, or one CPU)."
    return f"Local session measures ran on CPU {cpu} alone, client and shells alike (`--no-pin`: where they land)."


def markdown_page(doc: dict[str, Any], images: str | None) -> str:
    """A self-contained Markdown page: command, machine, table, and the plots from the
    directory ``images`` (a path relative to the page; None: no plots)."""
    parts = [
        "# Benchmarks",
        "",
        "Produced by `envlayer bench`; run it on your machine for your own figures. "
        "Each figure is the median of repeated runs with its 10th-90th percentile spread "
        "(warm exec: the median of the medians of interleaved rounds); "
        "a baseline (the same work without envlayer) is measured in the same run; the ratio matters most.",
        "",
        "Command:",
        "",
        "```",
        " ".join(doc["command"]),
        "```",
        "",
        f"Machine: {machine_text(doc['machine'])}" + (" A quick run (`--quick`)." if doc["quick"] else ""),
        "",
        markdown_table(doc),
        "",
    ]
    if images is not None:
        parts += [f"![{kind}]({images}/{name})\n" for kind, name in PLOTS.items()]
    parts += [
        "What each measure and baseline is: `envlayer bench --help` and the bench section of docs/cli.md. "
        "The scripts in "
        "`benchmarks/` measure narrower cases (the session broker, SSH, "
        "Kubernetes and the cloud backends against their fakes, timeouts); each prints its own figures.",
        "",
    ]
    return "\n".join(parts)


def write_output(doc: dict[str, Any], directory: Path, *, markdown: bool = True) -> list[Path]:
    """Write ``bench.json``, the plots and (with ``markdown``) ``bench.md`` into
    ``directory`` (created); the paths written.

    Raises: EnvlayerError when matplotlib is missing (the ``bench`` extra)."""
    from envlayer.bench.plots import write_plots

    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / "bench.json", *write_plots(doc, directory)]
    written[0].write_text(json.dumps(doc, indent=2) + "\n")
    if markdown:
        written.append(directory / "bench.md")
        written[-1].write_text(markdown_page(doc, "."))
    return written


def write_page(doc: dict[str, Any], page: Path, plots_dir: Path | None) -> Path:
    """Write the Markdown page at ``page``, its plots linked from ``plots_dir``."""
    images = None if plots_dir is None else Path(os.path.relpath(plots_dir, page.parent)).as_posix()
    page.write_text(markdown_page(doc, images))
    return page
