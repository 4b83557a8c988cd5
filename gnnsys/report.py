"""`gnnsys report RUN_DIR`: PNG charts of a run from its metrics.jsonl.

- `training.png`: loss and every validation metric per epoch.
- `communication.png` (distributed runs): per epoch and per worker, the remote rows
  fetched, the rows served by the cache, and the bytes received, so one can see at a
  glance what the cache saved; plus the seconds spent waiting on communication.

Reads only the run directory (`gnnsys.runlog` format); matplotlib with the Agg backend,
so it works without a display.
"""
from __future__ import annotations

import os
from pathlib import Path

from .runlog import read_metrics


def _epoch_records(records: list[dict]) -> list[dict]:
    """The last record of each epoch (a resumed run may have redone some)."""
    by_epoch = {}
    for r in records:
        if "epoch" in r and not r.get("final"):
            by_epoch[r["epoch"]] = r
    return [by_epoch[e] for e in sorted(by_epoch)]


def make_report(run_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> list[Path]:
    """Draw the charts; returns the PNG paths written (into out_dir, default run_dir)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    epochs = _epoch_records(read_metrics(run_dir))
    if not epochs:
        raise ValueError(f"{run_dir} has no per-epoch metrics (metrics.jsonl is missing or "
                         "empty); train first with `gnnsys train --config ...`")
    out_dir = Path(out_dir or run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    x = [r["epoch"] + 1 for r in epochs]

    fig, (ax_loss, ax_metric) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(x, [r.get("loss") for r in epochs], marker="o")
    ax_loss.set(title="training loss", xlabel="epoch", ylabel="loss")
    for ax in (ax_loss, ax_metric):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    metric_keys = sorted({k for r in epochs for k in r if k.startswith(("val_", "train_"))
                          and isinstance(r[k], (int, float))})
    for key in metric_keys:
        pts = [(e, r[key]) for e, r in zip(x, epochs) if key in r]
        ax_metric.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=key)
    ax_metric.set(title="evaluation", xlabel="epoch")
    if metric_keys:
        ax_metric.legend()
    fig.tight_layout()
    written.append(out_dir / "training.png")
    fig.savefig(written[-1], dpi=100)
    plt.close(fig)

    if any("workers" in r for r in epochs):
        panels = [("remote_rows", "remote rows fetched"), ("cache_hits", "rows served by cache"),
                  ("bytes_recv", "bytes received"), ("fetch_wait_s", "s in fetch collectives"),
                  ("batch_wait_s", "s waiting for batches"), ("allreduce_s", "s in all-reduce")]
        fig, axes = plt.subplots(2, 3, figsize=(14, 7))
        ranks = sorted({w["rank"] for r in epochs for w in r.get("workers", [])})
        for ax, (key, title) in zip(axes.flat, panels):
            for rank in ranks:
                pts = [(e, w[key]) for e, r in zip(x, epochs) for w in r.get("workers", [])
                       if w["rank"] == rank and key in w]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                        label=f"worker {rank}")
            ax.set(title=title, xlabel="epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.legend(fontsize="small")
        fig.suptitle(f"communication per epoch: {run_dir.name}")
        fig.tight_layout()
        written.append(out_dir / "communication.png")
        fig.savefig(written[-1], dpi=100)
        plt.close(fig)
    return written
