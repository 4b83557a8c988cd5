"""Memory of the GPU fused sampler: tier tables in device, pinned-host and peer-GPU memory.

Turns a placement (samplers/gpu_tiers.py) into arrays a numba.cuda kernel can read:
- device tier: an ordinary device array on the current GPU;
- host tier: mapped pinned host memory (cuda.mapped_array): the kernel reads it in place
  over PCIe (zero-copy / UVA), nothing is staged;
- peer tiers: device arrays allocated on other GPUs of the machine, read by ordinary
  loads once peer access is enabled (NVLink/PCIe P2P). Without `peer_devices` a peer
  shard is allocated on the current GPU: the layout and code path are the same, which is
  how single-GPU machines and numba's CUDA simulator exercise the peer tier.
Also `DeviceWorkspace`, the grow-only device buffers the sampler reuses across batches.

Every table has the same dtype and layout, so the kernel gets one homogeneous tuple it
can index with a tier id. float16 rows are stored as their uint16 bits (only copied).
Depends on numpy and numba.cuda only.
"""
from __future__ import annotations

import numpy as np
from numba import cuda


def copyable(array: np.ndarray) -> np.ndarray:
    """float16 as uint16 bits (the kernels only move them); other dtypes unchanged."""
    array = np.asarray(array)
    return array.view(np.uint16) if array.dtype == np.float16 else array


def device_table(rows: np.ndarray, device_id: int | None = None):
    """A copy of `rows` on the current GPU, or on GPU `device_id` (a peer shard)."""
    rows = np.ascontiguousarray(rows)
    if device_id is None:
        return cuda.to_device(rows)
    with cuda.gpus[device_id]:
        return cuda.to_device(rows)


# Zero-copy reads cross PCIe in 128-byte transactions: rows that start on a 128-byte
# boundary cost the fewest (the lesson of PyTorch-Direct, ../shared/ALGORITHMS.md 2.8).
HOST_ROW_ALIGNMENT_BYTES = 128


def host_table(rows: np.ndarray, align_rows: bool = False):
    """A copy of `rows` in mapped pinned host memory that kernels read in place; with
    `align_rows`, 2-D rows are padded so each starts on a 128-byte boundary (the kernel
    copies only the real columns)."""
    shape = rows.shape
    if align_rows and rows.ndim == 2:
        per_row = max(1, HOST_ROW_ALIGNMENT_BYTES // rows.itemsize)
        shape = (rows.shape[0], -(-rows.shape[1] // per_row) * per_row)
    table = cuda.mapped_array(shape, dtype=rows.dtype)
    if rows.ndim == 2:
        table[:, :rows.shape[1]] = rows
    else:
        table[...] = rows
    return table


def check_device_memory(needed_bytes: int, what: str) -> None:
    """Fail before allocating when the current GPU cannot hold `needed_bytes`."""
    free_bytes, _ = cuda.current_context().get_memory_info()
    if needed_bytes > free_bytes:
        raise MemoryError(f"{what} needs {needed_bytes / 2**30:.2f} GiB on the GPU but only "
                          f"{free_bytes / 2**30:.2f} GiB are free; lower the device budgets "
                          f"(budgets=TierBudgets(device_bytes=...), adjacency_device_bytes=...)")


def enable_peer_access(peer_device_ids) -> None:
    """Let kernels of the current GPU load from the memory of each peer GPU."""
    if not peer_device_ids:
        return
    local = cuda.current_context()
    for peer_id in peer_device_ids:
        if not local.can_access_peer(peer_id):
            raise RuntimeError(f"GPU {local.device.id} cannot access GPU {peer_id} "
                               f"directly (no P2P path); drop it from peer_devices or "
                               f"give its share of the budget to the host tier")
        with cuda.gpus[peer_id]:
            peer = cuda.current_context()
        try:
            local.enable_peer_access(peer.handle)
        except Exception as error:                # already enabled is fine
            if "ALREADY_ENABLED" not in str(error).upper():
                raise


def build_tier_tables(features: np.ndarray, tier_rows: list, host_tier: int,
                      peer_devices=None) -> tuple:
    """One table per tier id, in tier order; tier `host_tier` goes to mapped host memory,
    tier ids after it (peers) to `peer_devices[k]` when given. Empty tiers get a one-row
    placeholder so the tuple stays homogeneous (no location word points at it)."""
    width = features.shape[1]
    source = copyable(features)
    peer_devices = list(peer_devices or [])
    num_peers = len(tier_rows) - host_tier - 1
    if peer_devices and len(peer_devices) != num_peers:
        raise ValueError(f"peer_devices names {len(peer_devices)} GPUs but the placement "
                         f"has {num_peers} peer shards; give one GPU id per shard")
    enable_peer_access(peer_devices)
    tables = []
    for tier, rows in enumerate(tier_rows):
        chosen = source[rows] if rows.size else np.zeros((1, width), dtype=source.dtype)
        if tier == host_tier:
            tables.append(host_table(chosen, align_rows=True))
        elif tier > host_tier and peer_devices:
            tables.append(device_table(chosen, peer_devices[tier - host_tier - 1]))
        else:
            tables.append(device_table(chosen))
    return tuple(tables)


class DeviceWorkspace:
    """Named device arrays reused across batches; one grows (by >= 25%, at least
    doubling) only when a batch needs more, so steady state allocates nothing."""

    def __init__(self):
        self._arrays = {}

    def get(self, name: str, rows: int, dtype, width: int | None = None, keep: int = 0):
        """The whole buffer (>= rows rows); on growth the first `keep` rows survive."""
        array = self._arrays.get(name)
        if array is None or array.shape[0] < rows:
            old_rows = 0 if array is None else array.shape[0]
            new_rows = max(rows + rows // 4, 2 * old_rows, 16)
            bigger = cuda.device_array((new_rows,) if width is None else (new_rows, width),
                                       dtype=dtype)
            if keep:
                bigger[:keep].copy_to_device(array[:keep])
            self._arrays[name] = array = bigger
        return array

    def nbytes(self) -> int:
        return int(sum(a.size * a.dtype.itemsize for a in self._arrays.values()))
