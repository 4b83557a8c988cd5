"""Vertex ownership for a temporal run: range / hash, or balanced from the access counts
of a simulated training epoch (the same batches, negatives and neighbours the workers will
use, so the simulation predicts the exchange exactly); and that prediction itself, byte
for byte as the communicator counts, for any worker count (`simulate_exchange`)."""
from __future__ import annotations

import numpy as np

from partition.temporal import AccessCounter, make_ownership, traffic_per_worker
from .batch import BatchPlanner
from .models import row_layout


def simulate_access(config, events, num_workers: int) -> AccessCounter:
    """A[g, v]: batches of one training epoch in which worker g fetches / writes back v."""
    counter = AccessCounter(events.num_nodes, num_workers)
    for rank in range(num_workers):
        planner = BatchPlanner.for_run(config, events, rank, num_workers, pair_history=False)
        for batch in planner.epoch("train", 0, 1):
            counter.add(rank, np.unique(batch.needed), np.unique(batch.written))
    return counter


def access_weights(config, events, counter: AccessCounter) -> np.ndarray:
    """Bytes per access: a fetch moves an 8-byte id and a read row, a write-back a write row."""
    layout = row_layout(config, events)
    return counter.weights(read_row_bytes=8 + 4 * layout.read_width,
                           write_row_bytes=4 * layout.write_width)


def vertex_ownership(config, events, num_workers: int | None = None) -> np.ndarray:
    num_workers = num_workers or config.cluster.workers
    kind = config.temporal.ownership
    access = None
    if kind == "balanced" and num_workers > 1:
        access = access_weights(config, events, simulate_access(config, events, num_workers))
    return make_ownership(kind, events.num_nodes, num_workers, access)


def predicted_traffic(config, events, owner: np.ndarray, num_workers: int) -> np.ndarray:
    """Per-worker bytes (sent + received) of one dedup training epoch under `owner`."""
    weights = access_weights(config, events, simulate_access(config, events, num_workers))
    return traffic_per_worker(weights, owner)


COUNT_BYTES = 8        # an all_to_all first exchanges one int64 count per peer
COUNTED_CALLS = 2      # request ids and write-back rows; reply counts equal the requests'


def simulate_exchange(config, events, num_workers: int, owner: np.ndarray) -> dict:
    """One training epoch's exchange traffic for both exchanges without running it:
    {'naive'|'dedup': {'sent': bytes [K], 'recv': bytes [K], 'rows': rows sent},
    'redundancy': occurrences / unique}, counted exactly as `Communicator` counts."""
    layout = row_layout(config, events)
    read_bytes, write_bytes = 4 * layout.read_width, 4 * layout.write_width
    K = num_workers
    out = {mode: {"sent": np.zeros(K), "recv": np.zeros(K), "rows": 0}
           for mode in ("naive", "dedup")}
    planners = [BatchPlanner.for_run(config, events, r, K, pair_history=False)
                for r in range(K)]
    occurrences = unique = 0
    for per_rank in zip(*(p.epoch("train", 0, 1) for p in planners)):
        for g, batch in enumerate(per_rank):
            needed, written = batch.needed, batch.written
            occurrences += len(needed)
            unique += len(np.unique(needed))
            for mode, o in out.items():
                reads = np.unique(needed) if mode == "dedup" else needed
                writes = np.unique(written) if mode == "dedup" else written
                per_owner_reads = np.bincount(owner[reads], minlength=K)
                per_owner_writes = np.bincount(owner[writes], minlength=K)
                remote_reads = per_owner_reads.sum() - per_owner_reads[g]
                remote_writes = per_owner_writes.sum() - per_owner_writes[g]
                # g sends 8-byte ids and its write rows; each owner h replies with read rows
                o["sent"][g] += remote_reads * 8 + remote_writes * write_bytes
                o["recv"][g] += remote_reads * read_bytes
                for h in range(K):
                    if h != g:
                        o["sent"][h] += per_owner_reads[h] * read_bytes
                        o["recv"][h] += per_owner_reads[h] * 8 + per_owner_writes[h] * write_bytes
                o["rows"] += 2 * remote_reads + remote_writes
        for o in (out["naive"], out["dedup"]):   # count messages: every peer
            o["sent"] += COUNTED_CALLS * COUNT_BYTES * (K - 1)
            o["recv"] += COUNTED_CALLS * COUNT_BYTES * (K - 1)
    out["redundancy"] = occurrences / max(unique, 1)
    return out
