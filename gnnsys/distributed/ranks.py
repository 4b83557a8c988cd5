"""What every rank's values become on each rank: outputs gathered in rank order, and
per-process counters of ranks that share one process (threads, `cluster.launcher:
threads` or the test harness) counted once."""
from __future__ import annotations

import collections
import os
import platform

import numpy as np
import torch

# the epoch counters each rank measures for its whole process
PER_PROCESS = ("cpu_cores", "peak_rss_mb")


def this_process() -> tuple:
    """Identifies a rank's process, so ranks that are threads of one count it once."""
    return platform.node(), os.getpid()


def split_process_counters(ranks: list[dict]) -> list[dict]:
    """Ranks that are threads of one process (the test harness, bench scripts) each
    measured the whole process's CPU time and peak memory: split them evenly among the
    ranks, so the sum over ranks counts every process once. Drops the `process` key that
    identifies it."""
    sharing = collections.Counter(r["process"] for r in ranks)
    return [{**{k: v for k, v in r.items() if k != "process"},
             **{k: round(r[k] / sharing[r["process"]], 3) for k in PER_PROCESS if k in r}}
            for r in ranks]


def gather_outputs(comm, outputs: dict) -> dict:
    """{split: {name: every rank's share, concatenated in rank order}} of `Mode.split_outputs`'s
    outputs (tensors on the host): one gather."""
    mine = {split: {name: v.cpu() if isinstance(v, torch.Tensor) else v
                    for name, v in named.items()} for split, named in outputs.items()}
    ranks = comm.all_gather_object(mine)
    cat = lambda p: torch.cat(p) if isinstance(p[0], torch.Tensor) else np.concatenate(p)  # noqa: E731
    return {split: {name: cat([r[split][name] for r in ranks]) for name in named}
            for split, named in mine.items()}
