"""`gnnsys report RUN_DIR`: one PNG line chart per group of keys in its metrics.jsonl.

The table CHARTS says which keys each chart of the loop's keys draws, and a mode's
`Mode.charts` (beside its `reductions`) those of its own keys, drawn only for that mode
(the run's `start` record names it), since e.g. `bytes_sent` counts different traffic in
each; a chart is drawn when any of its keys is logged, so every mode's logs work.
Matplotlib's Agg canvas: no display.
"""
from __future__ import annotations

import io
import os
from pathlib import Path

from . import runlog
from .errors import ConfigError
from .mode import MODES, mode_class
from .runlog import METRICS, check_output, write_output

METRIC_NAMES = ("acc", "auc", "ap", "mrr")
NUMBER = (int, float)
# file stem: (title, y label, keys), drawn for every mode; "name.*" draws each entry of
# the mapping `name` (bytes_by_bits: {"2": bytes, ..., "32": bytes})
CHARTS = {
    "loss": ("training loss", "loss", ["loss"]),
    "metrics": ("evaluation", "score", [f"val_{m}" for m in METRIC_NAMES] + ["train_acc"]),
    "time": ("seconds per epoch", "seconds",
             ["epoch_s", "eval_s", "comm_wait_s", "batch_wait_s", "grad_sync_s",
              "exchange_s"]),
    "traffic": ("communicator bytes", "bytes", ["comm_bytes_sent", "comm_bytes_recv"]),
    "memory": ("peak memory of the worker processes (summed)", "MB", ["peak_rss_mb"]),
}


def charts_of(mode: str | None) -> dict:
    """The charts of a run of `mode`: CHARTS, then the mode's own (none for a mode this
    gnnsys does not know, or a log that names none)."""
    return {**CHARTS, **(mode_class(mode).charts if mode in MODES else {})}


def chart_stems() -> list[str]:
    """Every chart's file stem, any mode's: what an earlier run's report may have left."""
    return list(CHARTS) + [stem for name in MODES for stem in mode_class(name).charts]


def _lines(epochs: list[dict], key: str) -> list[tuple[str, list]]:
    """(label, [(epoch, value), ...]) per line of one table key, empty lines left out."""
    if key.endswith(".*"):
        maps = [(r["epoch"], r[key[:-2]]) for r in epochs if isinstance(r.get(key[:-2]), dict)]
        subs = sorted({s for _, m in maps for s in m}, key=lambda s: (len(s), s))  # "4" < "32"
        lines = [(f"{key[:-2]}[{s}]", [(e, m[s]) for e, m in maps if isinstance(m.get(s), NUMBER)])
                 for s in subs]
    else:
        lines = [(key, [(r["epoch"], r[key]) for r in epochs if isinstance(r.get(key), NUMBER)])]
    return [line for line in lines if line[1]]


def _draw(path: Path, title: str, ylabel: str, lines: list) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, points in lines:
        ax.plot([e + 1 for e, _ in points], [v for _, v in points], marker="o", label=label)
    ax.set(title=title, xlabel="epoch", ylabel=ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    write_output(path, buf.getvalue())      # a temp file in out_dir, then os.replace


def make_report(run_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> list[Path]:
    """Draw every chart whose keys the run logged; returns the PNG paths (out_dir: run_dir)."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{run_dir} is a file, not a run directory; give the run.dir of a "
                          "gnnsys run (the folder holding metrics.jsonl)")
    records = runlog.read_metrics(run_dir)
    epochs = runlog.epochs(records)
    if not epochs:
        state = "has no epoch records" if records else "is missing or empty"
        raise ConfigError(f"{run_dir / METRICS} {state}; train first with "
                         "`gnnsys train --config CONFIG` (its run.dir is the run directory)")
    mode = (runlog.start(records) or {}).get("mode")
    heading = run_dir.name + (f" ({mode})" if mode else "")
    final = ", ".join(f"{k} {v:.4f}" for k, v in (runlog.final(records) or {}).items()
                      if k[5:] in METRIC_NAMES and k[:5] == "test_" and v is not None)
    charts = charts_of(mode)
    for stem in charts:
        check_output(Path(out_dir or run_dir) / f"{stem}.png")   # before any chart is drawn
    written = []
    for stem, (title, ylabel, keys) in charts.items():
        lines = [line for key in keys for line in _lines(epochs, key)]
        if lines:
            note = f"\nfinal: {final}" if stem == "metrics" and final else ""
            written.append(Path(out_dir or run_dir) / f"{stem}.png")
            _draw(written[-1], f"{title}: {heading}{note}", ylabel, lines)
    return written
