"""Counter-based random numbers for the kernels (the samplers; hashed dropout and the
quantizer's noise use mix64): splitmix64 streams keyed by position.

Every target node gets its own stream derived from (batch seed, hop, target position), so
a batch's sample does not depend on how targets are spread over threads, and no global
RNG state is shared between threads. Numba-only (no numpy RNG, no torch).

Specification (the test reference reimplements it with plain Python ints):
    mix64(z)      = splitmix64 finaliser: z ^= z >> 30; z *= C1; z ^= z >> 27; z *= C2;
                    z ^= z >> 31  (all mod 2**64)
    stream(s,h,p) = mix64(mix64(mix64(s) ^ h) ^ p)         -> initial state
    next(state)   = state += GOLDEN; return mix64(state)    (plain splitmix64)
    below(state, bound) -> uniform integer in [0, bound): Lemire's multiply-shift on the
                    high 32 bits of a draw, with rejection so it is exactly uniform
                    (bound <= 2**32; larger bounds fall back to a 64-bit modulo).
"""
from __future__ import annotations

import numpy as np
from numba import njit

import common.kernel_cache  # noqa: F401  (the cache stamp, before the kernels below are built)

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_C1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_C2 = np.uint64(0x94D049BB133111EB)
_U30 = np.uint64(30)
_U27 = np.uint64(27)
_U31 = np.uint64(31)
_U32 = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)
_TWO32 = np.uint64(1 << 32)


def build_streams(device_function):
    """The stream functions compiled by `device_function`: numba's njit for the CPU
    sampler, cuda.jit(device=True) for the GPU kernels. One source for both targets, so
    their draws cannot drift apart. Returns (mix64, stream_state, next_u64,
    uniform_below, floyd_positions)."""

    @device_function
    def mix64(z):
        """splitmix64 finaliser: a bijective 64-bit mixer (also used as the hash function)."""
        z = np.uint64(z)
        z = (z ^ (z >> _U30)) * _MIX_C1
        z = (z ^ (z >> _U27)) * _MIX_C2
        return z ^ (z >> _U31)

    @device_function
    def stream_state(batch_seed, hop, position):
        """Initial splitmix64 state of the stream owned by one target of one hop."""
        return mix64(mix64(mix64(np.uint64(batch_seed)) ^ np.uint64(hop))
                     ^ np.uint64(position))

    @device_function
    def next_u64(state):
        """One splitmix64 step: returns (new state, 64 random bits)."""
        state = state + GOLDEN
        return state, mix64(state)

    @device_function
    def uniform_below(state, bound):
        """Returns (new state, r) with r uniform in [0, bound); bound >= 1."""
        bound = np.uint64(bound)
        state, bits = next_u64(state)
        if bound > _TWO32:
            return state, bits % bound
        product = (bits >> _U32) * bound
        low = product & _LOW32
        if low < bound:
            # Reject the few high words that would make some results more likely.
            threshold = (_TWO32 - bound) % bound
            while low < threshold:
                state, bits = next_u64(state)
                product = (bits >> _U32) * bound
                low = product & _LOW32
        return state, product >> _U32

    @device_function
    def floyd_positions(batch_seed, hop, target, degree, take, out, offset):
        """Floyd's sample of `take` of `degree` neighbour positions into out[offset:].
        For j = degree - take .. degree - 1 draw t in [0, j]; if t was already picked,
        pick j (never picked before: all earlier picks are < j). The linear membership
        test is O(take^2), cheaper than any set for GNN-sized fanouts."""
        state = stream_state(batch_seed, hop, target)
        for picked in range(take):
            j = degree - take + picked
            state, draw = uniform_below(state, j + 1)
            position = np.int64(draw)
            for q in range(picked):
                if out[offset + q] == position:
                    position = j
                    break
            out[offset + picked] = position

    return mix64, stream_state, next_u64, uniform_below, floyd_positions


mix64, stream_state, next_u64, uniform_below, floyd_positions = build_streams(
    njit(inline="always", cache=True))


def seed_to_u64(seed: int) -> np.uint64:
    """Any Python int (negative too) as the 64-bit batch seed the kernels expect."""
    return np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF)
