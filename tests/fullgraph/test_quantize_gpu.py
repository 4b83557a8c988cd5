"""The CUDA quantiser (quantize_gpu) against the CPU kernels (quantize_fast): the same bytes.

Given a seed, quantize_fast's numba kernels and quantize_gpu's CUDA kernels draw the same
counter-based noise, so their payloads must be byte-equal (codes, padding, bf16
parameters), their row ranges equal, and their decoded rows equal to the last bit; the
CPU kernels are themselves byte-equal to the torch reference given that noise
(test_quantize_fast.py), which one check here confirms as well.

The kernel checks run in numba's CUDA simulator in ONE child process (tests/cuda_simulator.py
says why), each reported as its own test, and in a second child the kernels are compiled to
PTX for sm_90 (typing, no float64, no fused multiply-add, IEEE division). With a real GPU
the checks also run in-process, with the torch-facing wrappers and a two-rank exchange on
the device against the same exchange on the CPU (marked gpu). Sizes stay tiny: the
simulator runs every GPU thread as a Python thread.
"""
import os
import sys
from pathlib import Path

if __name__ == "__main__" and "--compile-ptx" not in sys.argv:   # the simulator child:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"        # before numba.cuda is imported
if __name__ == "__main__":
    sys.path[:0] = [str(Path(__file__).resolve().parents[2])]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the shared harness

import numpy as np
import pytest
import torch

from cuda_simulator import (KernelChecks, assert_check_passed, assert_compiled, child_main,
                            child_results, compile_ptx, ptx_child_main, run_children)
from gnnsys.fullgraph import quantize_fast
from gnnsys.fullgraph.quantize import encode_message, message_order
from gnnsys.fullgraph.quantize_fast import counter_uniforms, group_counts, wire_size
from test_quantize_fast import awkward_rows

CHILD_TIMEOUT_S = 240
CHECKS = KernelChecks()
GARBAGE = 0xA5            # the GPU buffers start as this: a byte no kernel wrote shows up


# ----------------------------------------------------------------------------- helpers
def wire(bits, rows=None):
    """(wire-ordered rows, rows per bit-width, order) of a message with these bit-widths."""
    bits = np.asarray(bits, dtype=np.int8)
    rows = np.arange(len(bits)) if rows is None else np.asarray(rows)
    order = message_order(bits)
    return rows[order].astype(np.int64), group_counts(bits[order]), order


def gpu_encode(h, wire_rows, counts, seed):
    """quantize_gpu.encode_device on device copies; (payload, row range) as numpy."""
    from numba import cuda

    from gnnsys.fullgraph.quantize_gpu import encode_device
    payload = cuda.to_device(np.full(wire_size(counts, h.shape[1]), GARBAGE, np.uint8))
    row_range = cuda.to_device(np.full(len(wire_rows), np.nan, np.float32))
    encode_device(cuda.to_device(h.numpy()), cuda.to_device(wire_rows), counts, seed,
                  payload, row_range)
    return payload.copy_to_host(), row_range.copy_to_host()


def gpu_decode(payload, counts, start, targets, accumulate):
    from numba import cuda

    from gnnsys.fullgraph.quantize_gpu import decode_device
    out = cuda.to_device(start.numpy().copy())
    decode_device(cuda.to_device(np.asarray(payload)), counts, out,
                  cuda.to_device(np.asarray(targets, np.int64)), accumulate)
    return out.copy_to_host()


def assert_encodes_like_cpu(h, bits, seed, rows=None):
    """GPU payload and ranges == the CPU kernel's; returns the CPU payload."""
    wire_rows, counts, _ = wire(bits, rows)
    expected, expected_range = quantize_fast.encode_rows(h, wire_rows, counts, seed)
    payload, row_range = gpu_encode(h, wire_rows, counts, seed)
    np.testing.assert_array_equal(payload, expected.numpy(),
                                  err_msg=f"bytes differ (bits {np.unique(bits)}, seed {seed})")
    np.testing.assert_array_equal(row_range, expected_range.numpy())
    return expected


# ----------------------------------------------------------------------------- kernel checks
@CHECKS
def uniform_widths_with_padding_equal_the_cpu_kernel():
    """2, 4 and 8 bits; row counts that leave 1..3 padding rows in the last byte."""
    for bits in (2, 4, 8):
        for rows in (1, 3, 6, 13):
            h = awkward_rows(rows, 7, seed=rows)
            assert_encodes_like_cpu(h, np.full(rows, bits, np.int8), seed=17 + rows)


@CHECKS
def mixed_widths_from_gathered_rows_equal_cpu_and_reference():
    """Rows gathered out of order (as send_idx is), widths mixed: the CPU kernel's bytes,
    and the torch reference's given the same counter noise."""
    h = awkward_rows(30, 11, seed=5)
    rows = np.random.default_rng(0).permutation(30)[:19]
    bits = np.random.default_rng(1).choice([2, 4, 8], len(rows)).astype(np.int8)
    seed = 2 ** 61 + 3
    payload = assert_encodes_like_cpu(h, bits, seed, rows)
    noise = torch.from_numpy(counter_uniforms(seed, len(rows), 11))
    reference, _ = encode_message(h[torch.from_numpy(rows)], bits, noise=noise)
    assert torch.equal(payload, reference)


@CHECKS
def constant_and_extreme_rows():
    """Constant rows (zero, positive, negative: step 1.0, code 0) decode to themselves;
    rows of huge and tiny range keep their bytes (bf16 rounding of both parameters)."""
    h = torch.tensor([[0.0] * 5, [3.0] * 5, [-2.5] * 5, [1e-30, -1e-30, 0.0, 1e-30, 0.0],
                      [-3e4, 1e4, 0.5, 2e4, 3e4], [1.0, 1.0, 1.0, 1.0, 0.0]])
    bits = np.array([2, 4, 8, 2, 8, 4], np.int8)
    payload = assert_encodes_like_cpu(h, bits, seed=3)
    wire_rows, counts, _ = wire(bits)
    out = gpu_decode(payload, counts, torch.zeros(6, 5), wire_rows, False)
    np.testing.assert_array_equal(out[:3], h[:3].numpy())
    everything_constant = torch.full((5, 4), 7.25)
    assert_encodes_like_cpu(everything_constant, np.full(5, 2, np.int8), seed=11)


@CHECKS
def codes_are_clamped_at_the_top():
    """A row's maximum sits exactly at the top code (255 with step 1) and the noise of
    (row 0, column 0) under this seed is 1 - 1.3e-6: 255 + u rounds to 256.0 in float32,
    which must be clamped to 255, not wrapped to 0."""
    seed = 408442                    # found by a search over seeds for u(0, 0) > 1 - 2^-17
    assert np.float32(255.0) + counter_uniforms(seed, 1, 2)[0, 0] == 256.0
    payload = assert_encodes_like_cpu(torch.tensor([[255.0, 0.0]]), np.array([8], np.int8),
                                      seed)
    assert payload[0] == 255


@CHECKS
def decode_writes_and_accumulates_like_the_cpu_kernel():
    """Into target rows of a bigger output, = and +=: equal to the CPU kernel's floats
    (explicitly rounded multiply and add: no FMA), other rows untouched."""
    h = awkward_rows(17, 9, seed=6)
    bits = np.array([8, 2, 4] * 5 + [2, 8], dtype=np.int8)
    targets = np.random.default_rng(2).permutation(25)[:17]
    wire_targets, counts, _ = wire(bits, targets)
    payload = assert_encodes_like_cpu(h, bits, seed=9)
    start = torch.randn(25, 9, generator=torch.Generator().manual_seed(4))
    for accumulate in (False, True):
        expected = quantize_fast.decode_rows(payload, counts, start.clone(), wire_targets,
                                             accumulate)
        out = gpu_decode(payload, counts, start, wire_targets, accumulate)
        np.testing.assert_array_equal(out, expected.numpy(), err_msg=f"accumulate={accumulate}")
        untouched = np.setdiff1d(np.arange(25), targets)
        np.testing.assert_array_equal(out[untouched], start[untouched].numpy())
        assert not np.array_equal(out[targets], start[targets].numpy())


@CHECKS
def seeds_sweep_including_wraparound():
    """Seeds across the uint64 range (the counter hash wraps): equal bytes for each, and
    a different seed gives different codes (the noise is really used)."""
    h = awkward_rows(9, 6, seed=8)
    bits = np.array([2, 8, 4, 2, 2, 8, 4, 2, 8], np.int8)
    payloads = [assert_encodes_like_cpu(h, bits, seed).numpy()
                for seed in (0, 1, 2 ** 32 + 7, 2 ** 62 - 1, 2 ** 64 - 1)]
    assert len({p.tobytes() for p in payloads}) == len(payloads)


@CHECKS
def empty_messages_touch_nothing():
    h = awkward_rows(4, 3, seed=1)
    payload, row_range = gpu_encode(h, np.zeros(0, np.int64), np.zeros(3, np.int64), 5)
    assert payload.size == 0 and row_range.size == 0
    start = torch.ones(4, 3)
    out = gpu_decode(np.zeros(0, np.uint8), np.zeros(3, np.int64), start, np.zeros(0), True)
    np.testing.assert_array_equal(out, start.numpy())


# ----------------------------------------------------------------------------- the children
@pytest.fixture(scope="module")
def children():
    return run_children({"simulator": ([sys.executable, __file__], True),
                         "ptx": ([sys.executable, __file__, "--compile-ptx"], False)},
                        CHILD_TIMEOUT_S)


@pytest.fixture(scope="module")
def simulator_results(children):
    return child_results(children["simulator"])


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_kernel_in_cuda_simulator(name, simulator_results):
    assert_check_passed(simulator_results, name)


def compile_kernels_to_ptx() -> int:
    """Every kernel with the argument types the wrappers pass (C-contiguous views):
    compiles, and has no float64, no fused multiply-add and no approximate division,
    any of which would break equality with the CPU kernels."""
    from numba import typeof
    from numba import types as nt

    from gnnsys.fullgraph import quantize_gpu as kernels

    def array(dtype, ndim=1):
        return typeof(np.zeros((1,) * ndim, dtype=dtype))

    i64 = nt.int64
    h, rows, payload = array(np.float32, 2), array(np.int64), array(np.uint8)
    signatures = {
        "row_parameters": (h, rows, i64, i64, payload, array(np.float32)),
        "pack_codes": (h, rows, payload, nt.uint64, i64, i64, i64, i64, payload),
        "unpack_rows": (payload, payload, i64, i64, i64, i64, h, rows, nt.boolean),
    }
    for name, signature in signatures.items():
        ptx = compile_ptx(getattr(kernels, name), signature)
        for forbidden in (".f64", "fma.rn.f32", "div.approx", "div.full"):
            assert forbidden not in ptx, f"{name}: '{forbidden}' in its PTX"
    return len(signatures)


def test_kernels_compile_for_a_real_gpu(children):
    assert_compiled(children["ptx"])


# ----------------------------------------------------------------------------- real GPU
def _require_gpu():
    from samplers.fused_gpu import cuda_gpu_available
    if not (cuda_gpu_available() and torch.cuda.is_available()):
        pytest.skip("needs a CUDA GPU with CUDA torch")


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_kernel_on_gpu(name):
    _require_gpu()
    (result,) = CHECKS.run([name])
    assert result["ok"], result["error"]


@pytest.mark.gpu
def test_torch_wrappers_on_gpu_equal_the_cpu_kernels():
    """encode_rows / decode_rows on CUDA tensors: CPU bytes and floats, rows given as
    numpy or as a CUDA tensor, a non-contiguous input, on a side stream too."""
    from gnnsys.fullgraph import quantize_gpu
    _require_gpu()
    h = awkward_rows(40, 13, seed=3)
    rows = np.random.default_rng(5).permutation(40)[:27]
    bits = np.random.default_rng(6).choice([2, 4, 8], 27).astype(np.int8)
    wire_rows, counts, order = wire(bits, rows)
    expected, expected_range = quantize_fast.encode_rows(h, wire_rows, counts, 77)
    device_h = h.cuda()
    for given_rows in (wire_rows, torch.from_numpy(wire_rows).cuda()):
        payload, row_range = quantize_gpu.encode_rows(device_h, given_rows, counts, 77)
        assert payload.is_cuda and torch.equal(payload.cpu(), expected)
        assert torch.equal(row_range.cpu(), expected_range)
    transposed = h.t().contiguous().cuda().t()                  # same values, not contiguous
    assert torch.equal(quantize_gpu.encode_rows(transposed, wire_rows, counts, 77)[0].cpu(),
                       expected)
    start = torch.randn(50, 13)
    targets = np.random.default_rng(7).permutation(50)[:27][order]
    for accumulate in (False, True):
        want = quantize_fast.decode_rows(expected, counts, start.clone(), targets, accumulate)
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):                           # launches follow torch's stream
            out = quantize_gpu.decode_rows(expected.cuda(), counts, start.cuda(), targets,
                                           accumulate)
        side.synchronize()
        assert torch.equal(out.cpu(), want)
    with pytest.raises(ValueError, match="expected"):
        quantize_gpu.decode_rows(expected[:-1].cuda(), counts, start.cuda(), targets, False)
    with pytest.raises(ValueError, match="CUDA tensors"):
        quantize_gpu.encode_rows(h, wire_rows, counts, 77)


def test_two_rank_exchange_on_cpu_is_quantised():
    """The exchange the GPU test below compares: quantised rows are near the fp32 ones
    (within a 2-bit step of the rows' range), not equal to them."""
    for quantised, exact in _two_rank_exchange("cpu"):
        for got, want in zip(quantised, exact):
            assert not torch.equal(got, want)
            assert (got - want).abs().max() <= (want.max() - want.min()) / 3


@pytest.mark.gpu
def test_quantised_exchange_on_gpu_equals_the_cpu_exchange():
    """Two ranks (threads) exchange quantised halos forward and gradients backward, once
    on the GPU and once on the CPU with the same seed: the same seeds are drawn and the
    same bytes travel, so the received rows are equal."""
    _require_gpu()
    results = {device: _two_rank_exchange(device) for device in ("cpu", "cuda")}
    for rank in range(2):
        for got, want in zip(results["cuda"][rank], results["cpu"][rank]):
            for a, b in zip(got, want):
                assert torch.equal(a.cpu(), b)


def _two_rank_exchange(device: str) -> list:
    """Per rank ((halo, grad_h) quantised, (halo, grad_h) in fp32), on `device`."""
    from gnnsys.distributed.local import ThreadGroup
    from gnnsys.fullgraph.exchange import BitAssignment, HaloExchanger
    from gnnsys.fullgraph.halo import build_halo_plan
    from gnnsys.fullgraph.timing import EpochTimers
    from gnnsys.testing import tiny_graph
    graph = tiny_graph(num_nodes=60, avg_degree=4, num_features=6, num_classes=3, seed=2)
    parts = np.random.default_rng(0).integers(0, 2, graph.num_nodes)

    def rank(comm):
        comm.device = torch.device(device)
        plan = build_halo_plan(graph, parts, comm.rank, 2, "gcn").to(device)
        me, peer = comm.rank, 1 - comm.rank
        halo_from_peer = plan.recv_ranges[peer][1] - plan.recv_ranges[peer][0]
        widths = np.array([2, 8, 4], np.int8)          # mixed, the same on both ranks
        mixed = {(me, peer): np.resize(widths, len(plan.send_idx[peer])),
                 (peer, me): np.resize(widths, halo_from_peer)}
        exchanger = HaloExchanger(plan, comm, EpochTimers(), seed=4, device=device,
                                  assignment=BitAssignment(4, {"forward0": mixed}))
        h = torch.randn(plan.num_inner, 6, generator=torch.Generator().manual_seed(me))
        grad = torch.randn(plan.num_halo, 6, generator=torch.Generator().manual_seed(9))
        out = []
        for quantised in (True, False):
            halo = exchanger.start(h.to(device), "forward0", quantised).finish(
                torch.zeros(plan.num_halo, 6, device=device), accumulate=False)
            grad_h = exchanger.start(grad.to(device), "backward1", quantised).finish(
                torch.ones(plan.num_inner, 6, device=device), accumulate=True)
            out.append((halo, grad_h))
        return out

    return ThreadGroup(2).run(rank)


if __name__ == "__main__" and sys.argv[1:] == ["--compile-ptx"]:
    ptx_child_main(compile_kernels_to_ptx)
elif __name__ == "__main__":
    child_main(CHECKS, sys.argv[1:])
