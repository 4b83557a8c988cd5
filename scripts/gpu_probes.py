"""The short device checks gpu_check.py runs before anything long, and its race check.

Each probe returns what it measured and raises on a failure. Needs numba.cuda and torch,
nothing else of the device image (no ray, no pymetis). Also a command of its own, so that
compute-sanitizer can run the race check in a process it watches:

    python scripts/gpu_probes.py races --small       # under compute-sanitizer: a small graph
    python scripts/gpu_probes.py preflight           # every preflight probe, one JSON line
"""
import harness  # noqa: F401  (first: the repository on sys.path, OpenMP's wait policy)
import importlib.metadata
import json
import os
import subprocess
import sys
import time

import numpy as np
import samplers  # noqa: F401  (numpy aliases numba.cuda needs)
from numba import cuda          # after harness; the simulator is chosen before this import


def simulated() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def versions() -> dict:
    """The device, its driver and the CUDA stacks gnnsys uses on it."""
    import numba
    import torch
    found = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
             "numba": numba.__version__, "simulated": simulated()}
    for package in ("numba-cuda", "cuda-bindings", "cupy-cuda13x", "torch_geometric"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    if simulated():
        return found
    # Each read on its own: one failing (a driver numba-cuda does not know) still leaves
    # the others, and the failure is the finding.
    found["device"] = _read(torch.cuda.get_device_name)
    found["capability"] = _read(lambda: ".".join(map(str, torch.cuda.get_device_capability())))
    found["numba_device"] = _read(lambda: _text(cuda.get_current_device().name))
    found["numba_driver_version"] = _read(
        lambda: ".".join(map(str, cuda.cudadrv.driver.driver.get_version())))
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20)
        found["nvidia_smi"] = smi.stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as err:
        found["nvidia_smi"] = f"not run: {err}"
    return found


def _read(fn):
    try:
        return fn()
    except Exception as err:
        return f"unreadable: {type(err).__name__}: {err}"[:300]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# Module level: the simulator swaps this module's `cuda` for its own inside kernels.
@cuda.jit
def add_index(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] += i


@cuda.jit
def double(source, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = 2 * source[i]


def kernel_launch() -> dict:
    """A numba-cuda kernel compiled for this device and launched: every element touched."""
    n = 1 << 12 if simulated() else 1 << 22
    values = cuda.to_device(np.ones(n, dtype=np.int64))
    started = time.perf_counter()
    add_index[(n + 255) // 256, 256](values)
    cuda.synchronize()
    seconds = time.perf_counter() - started             # compile + launch
    if not np.array_equal(values.copy_to_host(), np.arange(n) + 1):
        raise AssertionError("kernel_launch: the kernel's output is wrong")
    return {"elements": n, "first_launch_s": round(seconds, 3)}


def cuda_array_to_torch() -> dict:
    """A numba device array handed to torch through __cuda_array_interface__: the same
    memory (a write through torch shows in numba's array), not a copy."""
    if simulated():
        return {"checked": False, "why": "the simulator has no device memory to share"}
    import torch
    array = cuda.to_device(np.arange(1000, dtype=np.float32))
    tensor = torch.as_tensor(array, device="cuda")
    same_pointer = tensor.data_ptr() == array.device_ctypes_pointer.value
    tensor += 1
    torch.cuda.synchronize()
    if not same_pointer or not np.array_equal(array.copy_to_host(), np.arange(1000) + 1):
        raise AssertionError("cuda_array_to_torch: torch copied the array instead of sharing it")
    return {"checked": True, "zero_copy": True}


def pinned_host_read() -> dict:
    """Mapped pinned host memory read in place by a kernel (the host tier's path)."""
    n = 1 << 12 if simulated() else 1 << 22
    host = cuda.mapped_array(n, dtype=np.float32)
    host[:] = np.arange(n, dtype=np.float32)
    out = cuda.device_array(n, dtype=np.float32)
    double[(n + 255) // 256, 256](host, out)
    cuda.synchronize()
    if not np.array_equal(out.copy_to_host(), 2 * np.arange(n, dtype=np.float32)):
        raise AssertionError("pinned_host_read: the kernel read wrong values from host memory")
    return {"elements": n}


def assert_same_batch(gpu, cpu, what: str) -> None:
    """The GPU sampler's batch equals the CPU kernel's, field by field."""
    pairs = [("n_id", gpu.n_id, cpu.n_id), ("hop_sizes", gpu.hop_sizes, cpu.hop_sizes),
             ("x", gpu.x, cpu.x), ("missing", gpu.missing, cpu.missing)]
    pairs += [(f"block_indptr[{i}]", g, c)
              for i, (g, c) in enumerate(zip(gpu.block_indptr, cpu.block_indptr))]
    pairs += [(f"block_indices[{i}]", g, c)
              for i, (g, c) in enumerate(zip(gpu.block_indices, cpu.block_indices))]
    for name, got, want in pairs:
        if got is None and want is None:
            continue
        if not np.array_equal(np.asarray(got), np.asarray(want)):
            raise AssertionError(f"{what}: the GPU kernel's {name} differs from the CPU kernel's")


def hub_graph(num_nodes: int, num_hubs: int, num_features: int, seed: int = 0):
    """CSR in which every node links to some of `num_hubs` hubs and the hubs to thousands
    of nodes: a batch's threads pick the same hubs at once (where a lost atomic shows)."""
    rng = np.random.default_rng(seed)
    hubs = rng.choice(num_nodes, num_hubs, replace=False)
    degree = rng.integers(1, 12, num_nodes)
    degree[hubs] = min(num_nodes, 5000)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    indices = rng.integers(0, num_nodes, int(indptr[-1])).astype(np.int32)
    to_hub = rng.random(indices.size) < 0.5                 # half of all edges end at a hub
    indices[to_hub] = rng.choice(hubs, int(to_hub.sum())).astype(np.int32)
    features = rng.standard_normal((num_nodes, num_features)).astype(np.float32)
    return indptr, indices, features, hubs


def fused_sampler_tiny() -> dict:
    """The fused sampler on a tiny graph (a hub, repeated seeds) equals the CPU kernel."""
    return races(small=True, batches=3, what="fused_sampler_tiny")


def races(small: bool = False, batches: int | None = None, what: str = "races") -> dict:
    """GPU against CPU kernel on a hub-heavy graph over many batch seeds; thousands of
    threads claim the same hub's slot in the node map, so a lost atomic (min or
    compare-and-swap) shows as a different n_id or block. `small`: sizes the simulator and
    compute-sanitizer run in seconds."""
    from samplers.fused_cpu import FusedSampler
    from samplers.fused_gpu import GpuFusedSampler
    num_nodes, batch, fanouts = ((120, 16, [3, 2]) if simulated() else
                                 (400, 64, [4, 3]) if small else (200_000, 4096, [15, 10, 5]))
    batches = 1 if simulated() else batches or (2 if small else 40)
    indptr, indices, features, hubs = hub_graph(num_nodes, 16 if num_nodes > 1000 else 4, 8)
    gpu = GpuFusedSampler(indptr, indices, fanouts, features=features)
    cpu = FusedSampler(indptr, indices, fanouts, features=features)
    rng = np.random.default_rng(7)
    edges = 0
    started = time.perf_counter()
    for batch_seed in range(batches):
        seeds = np.concatenate([rng.choice(hubs, batch // 8),          # repeated seeds too
                                rng.integers(0, num_nodes, batch - batch // 8)]).astype(np.int64)
        got = gpu.sample(seeds, batch_seed)
        assert_same_batch(got, cpu.sample(seeds, batch_seed), f"{what}, batch seed {batch_seed}")
        edges += got.num_sampled_edges
    return {"nodes": num_nodes, "batch_size": batch, "fanouts": fanouts, "batches": batches,
            "sampled_edges": int(edges), "equal": True,
            "seconds": round(time.perf_counter() - started, 2)}


PREFLIGHT = {"versions": versions, "kernel_launch": kernel_launch,
             "cuda_array_to_torch": cuda_array_to_torch, "pinned_host_read": pinned_host_read,
             "fused_sampler_tiny": fused_sampler_tiny}


def run_probes(probes: dict) -> dict:
    """{name: {ok, result | error, seconds}}; every probe runs whatever the others did."""
    results = {}
    for name, probe in probes.items():
        started = time.perf_counter()
        try:
            results[name] = {"ok": True, "result": probe()}
        except Exception as err:
            results[name] = {"ok": False, "error": f"{type(err).__name__}: {err}"[:2000]}
        results[name]["seconds"] = round(time.perf_counter() - started, 2)
    return results


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", choices=["preflight", "races"])
    parser.add_argument("--small", action="store_true", help="races: the small graph")
    args = parser.parse_args(argv)
    if args.probe == "races":
        results = run_probes({"races": lambda: races(small=args.small)})
    else:
        results = run_probes(PREFLIGHT)
    print(json.dumps(results))
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
