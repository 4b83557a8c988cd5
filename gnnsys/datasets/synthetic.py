"""Synthetic node-classification graphs: a seeded degree-corrected stochastic block model.

Why this model: real graphs have heavy-tailed degrees, homophilous classes and features
that are noisy class signals. Here every node gets a community (= its class, sizes
optionally Zipf-skewed) and a Pareto degree propensity theta; each undirected edge picks
its first end proportional to theta over all nodes and its second end proportional to
theta inside the first end's community with probability `homophily`, else over all nodes.
Features are the class centroid plus Gaussian noise, float32, scaled to unit variance.
Optionally a share of labels is then redrawn at random (annotation noise): averaging over
neighbours removes feature noise but not this, so it keeps GNN accuracy realistic (< 1).

Locality (`local_fraction` > 0): real graphs such as co-purchase networks are not just
communities joined at random; they have geography, so a good partition cuts few edges
and the remote vertices a part reaches lie near its boundary. Then nodes sit on a hidden
ring, each community is one arc of it, and a share `local_fraction` of the edges joins
the first end to a node a ring distance d away, d Pareto with P(d > x) = (scale / x)^a
(mostly near, a few far: a small world; a smaller exponent a means more long edges). Distances are measured in degree propensity
mass, so hubs still attract their share of local edges. Node ids are shuffled at the end,
so they carry no trace of the ring: a partitioner has to find the structure.

Every random number comes from a counter-based hash (splitmix64 of seed and position), so
the parallel numba kernels give identical graphs for a seed whatever the thread count.
A 2.45M-node, 124M-edge graph (`synthetic-products`) takes about 60 s of CPU time on two
cores (edges: alias-table sampling, then O(E) bucketing; features: one pass) and peaks
at about 2 GB of memory.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields

import numba
import numpy as np

from gnnsys.datasets.edges import unique_undirected, upper_to_symmetric_csr
from gnnsys.datasets.splits import random_split
from gnnsys.graph import Graph, index_dtype

# Bump when the generator's output for given params changes: it is part of the cache key.
GENERATOR_VERSION = 1   # local_fraction = 0 reproduces version-1 graphs bit for bit


@dataclass(frozen=True)
class SyntheticParams:
    """Knobs of the generator; `datasets.yaml` presets and `params=` overrides set them."""

    num_nodes: int = 2000
    avg_degree: float = 10.0           # mean neighbours per node (directed entries / N)
    num_classes: int = 4               # communities; each community is one class
    num_features: int = 16
    power_law_exponent: float = 2.5    # of the degree distribution, P(k) ~ k^-gamma; > 2
    max_degree: int | None = None      # cap on expected degree; None = 2*sqrt(N*avg_degree)
    homophily: float = 0.7             # P(a non-local edge's second end is in the same class)
    local_fraction: float = 0.0        # share of edges drawn near their first end on a ring
    locality_scale: float = 50.0       # shortest local ring distance, in nodes
    locality_exponent: float = 1.0     # tail of local distances: P(d > x) = (scale / x)^this
    class_size_exponent: float = 0.0   # class c gets weight (c+1)^-s; 0 = equal sizes
    feature_noise: float = 3.0         # noise std relative to the centroid spread
    label_noise: float = 0.0           # share of nodes whose label is then redrawn uniformly
    seed: int = 0
    train_fraction: float = 0.6
    val_fraction: float = 0.2          # the rest is the test set

    def validate(self) -> "SyntheticParams":
        problems = []
        if self.num_nodes < 2:
            problems.append(f"num_nodes must be >= 2, got {self.num_nodes}")
        if not 0 < self.avg_degree < self.num_nodes:
            problems.append(f"avg_degree must be in (0, num_nodes), got {self.avg_degree}")
        if not 1 <= self.num_classes <= self.num_nodes:
            problems.append(f"num_classes must be in [1, num_nodes], got {self.num_classes}")
        if self.num_features < 1:
            problems.append(f"num_features must be >= 1, got {self.num_features}")
        if self.power_law_exponent <= 2.0:
            problems.append("power_law_exponent must be > 2 (finite mean degree), "
                            f"got {self.power_law_exponent}")
        if not 0.0 <= self.homophily <= 1.0:
            problems.append(f"homophily must be in [0, 1], got {self.homophily}")
        if not 0.0 <= self.local_fraction <= 1.0:
            problems.append(f"local_fraction must be in [0, 1], got {self.local_fraction}")
        if not self.locality_scale >= 1.0:
            problems.append(f"locality_scale must be >= 1 (nodes), got {self.locality_scale}")
        if not self.locality_exponent > 0.0:
            problems.append(f"locality_exponent must be > 0, got {self.locality_exponent}")
        if not 0.0 <= self.label_noise <= 1.0:
            problems.append(f"label_noise must be in [0, 1], got {self.label_noise}")
        if self.feature_noise < 0:
            problems.append(f"feature_noise must be >= 0, got {self.feature_noise}")
        if self.max_degree is not None and self.max_degree < 1:
            problems.append(f"max_degree must be >= 1 or null, got {self.max_degree}")
        if not (0 < self.train_fraction and 0 <= self.val_fraction
                and self.train_fraction + self.val_fraction < 1):
            problems.append("need train_fraction > 0, val_fraction >= 0 and their sum < 1, got "
                            f"{self.train_fraction} and {self.val_fraction}")
        if problems:
            raise ValueError("synthetic generator: " + "; ".join(problems))
        return self

    @classmethod
    def from_dict(cls, values: dict) -> "SyntheticParams":
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - allowed)
        if unknown:
            raise KeyError(f"unknown synthetic parameter(s) {', '.join(unknown)}; "
                           f"allowed: {', '.join(sorted(allowed))}")
        return cls(**values).validate()

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- randomness
_GOLDEN = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1


def _mix64(z: int) -> int:
    """splitmix64 finaliser in Python, to derive one independent stream seed per purpose."""
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK64
    return z ^ (z >> 31)


def stream_seed(seed: int, stream: int) -> np.uint64:
    return np.uint64(_mix64((seed * _GOLDEN + stream * 0xD1B54A32D192ED03 + 1) & _MASK64))


@numba.njit(inline="always")
def _uniform(stream, counter):
    """Uniform double in [0, 1) at position `counter` of a stream: splitmix64, no state."""
    z = stream + (np.uint64(counter) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(inline="always")
def _gaussian(stream, counter):
    """Standard normal via Box-Muller from two uniforms at positions 2c and 2c+1."""
    u1 = 1.0 - _uniform(stream, 2 * counter)  # in (0, 1], so log() is finite
    u2 = _uniform(stream, 2 * counter + 1)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


# ----------------------------------------------------------------------------- node kernels
@numba.njit(parallel=True, cache=True)
def _pareto_propensity(stream, num_nodes, exponent, cap):
    theta = np.empty(num_nodes, np.float64)
    shape = 1.0 / (exponent - 1.0)
    for i in numba.prange(num_nodes):
        theta[i] = min((1.0 - _uniform(stream, i)) ** -shape, cap)
    return theta


@numba.njit(parallel=True, cache=True)
def _draw_classes(stream, num_nodes, class_cdf):
    labels = np.empty(num_nodes, np.int64)
    for i in numba.prange(num_nodes):
        labels[i] = np.searchsorted(class_cdf, _uniform(stream, i), side="right")
    return labels


@numba.njit(cache=True)
def _build_alias(weights, prob, alias, offset):
    """Vose alias table of `weights` into prob/alias[offset:offset+n] (alias ids relative)."""
    n = weights.size
    total = weights.sum()
    scaled = weights * (n / total)
    small = np.empty(n, np.int64)
    large = np.empty(n, np.int64)
    ns = 0
    nl = 0
    for i in range(n):
        if scaled[i] < 1.0:
            small[ns] = i
            ns += 1
        else:
            large[nl] = i
            nl += 1
    while ns > 0 and nl > 0:
        ns -= 1
        s = small[ns]
        g = large[nl - 1]
        prob[offset + s] = scaled[s]
        alias[offset + s] = g
        scaled[g] = scaled[g] + scaled[s] - 1.0
        if scaled[g] < 1.0:
            nl -= 1
            small[ns] = g
            ns += 1
    for k in range(nl):
        prob[offset + large[k]] = 1.0
        alias[offset + large[k]] = large[k]
    for k in range(ns):  # only left over through rounding
        prob[offset + small[k]] = 1.0
        alias[offset + small[k]] = small[k]


@numba.njit(cache=True)
def _community_alias_tables(theta, members, class_start):
    """One alias table per community over its members (in `members` order)."""
    prob = np.empty(members.size, np.float64)
    alias = np.empty(members.size, np.int64)
    for c in range(class_start.size - 1):
        lo, hi = class_start[c], class_start[c + 1]
        if hi > lo:
            _build_alias(theta[members[lo:hi]], prob, alias, lo)
    return prob, alias


@numba.njit(inline="always")
def _alias_draw(prob, alias, offset, size, r_index, r_coin):
    k = min(int(r_index * size), size - 1)
    if r_coin < prob[offset + k]:
        return k
    return alias[offset + k]


@numba.njit(parallel=True, cache=True)
def _sample_edge_pairs(stream, first_edge, num_edges, labels, global_prob, global_alias,
                       members, class_start, class_prob, class_alias, homophily,
                       local_fraction, scale, tail_inverse, mass_end, out_u, out_v):
    """Edge e's two ends from five uniforms at counters 5e..5e+4 (e counted from first_edge).

    The first end is drawn by theta; the second is local with probability local_fraction
    (ids are then ring positions), else in the first end's class with probability
    homophily, else by theta over all nodes. With local_fraction = 0 no draw changes from
    version 1. mass_end[i] = theta[0] + ... + theta[i]: node i owns the mass interval
    (mass_end[i-1], mass_end[i]]. A local edge steps d * mean(theta) of mass from the
    edge of u's interval, so a hub's own width does not swallow its local edges.
    """
    n = labels.size
    total = mass_end[n - 1]
    unit = total / n
    for j in numba.prange(num_edges):
        base = 5 * (first_edge + j)
        u = _alias_draw(global_prob, global_alias, 0, n,
                        _uniform(stream, base), _uniform(stream, base + 1))
        r = _uniform(stream, base + 2)
        if r < local_fraction:
            step = min(scale * (1.0 - _uniform(stream, base + 3)) ** -tail_inverse,
                       0.5 * n) * unit
            if _uniform(stream, base + 4) < 0.5:
                target = mass_end[u] + step
            else:
                target = mass_end[u] - (mass_end[u] - mass_end[u - 1] if u > 0
                                        else mass_end[0]) - step
            target = target % total
            v = min(np.searchsorted(mass_end, target), n - 1)
        elif (r - local_fraction) < homophily * (1.0 - local_fraction):
            c = labels[u]
            lo = class_start[c]
            k = _alias_draw(class_prob, class_alias, lo, class_start[c + 1] - lo,
                            _uniform(stream, base + 3), _uniform(stream, base + 4))
            v = members[lo + k]
        else:
            v = _alias_draw(global_prob, global_alias, 0, n,
                            _uniform(stream, base + 3), _uniform(stream, base + 4))
        out_u[j] = u
        out_v[j] = v


@numba.njit(parallel=True, cache=True)
def _class_features(stream, labels, centroids, noise, scale):
    n, f = labels.size, centroids.shape[1]
    x = np.empty((n, f), np.float32)
    for i in numba.prange(n):
        c = labels[i]
        for j in range(f):
            x[i, j] = (centroids[c, j] + noise * _gaussian(stream, i * f + j)) * scale
    return x


@numba.njit(parallel=True, cache=True)
def _redraw_labels(stream, labels, share, num_classes):
    """Node i's label becomes uniform over the classes when its first uniform < share."""
    out = labels.copy()
    for i in numba.prange(labels.size):
        if _uniform(stream, 2 * i) < share:
            out[i] = min(int(_uniform(stream, 2 * i + 1) * num_classes), num_classes - 1)
    return out


@numba.njit(parallel=True, cache=True)
def _gaussian_matrix(stream, rows, cols):
    out = np.empty((rows, cols), np.float64)
    for i in numba.prange(rows):
        for j in range(cols):
            out[i, j] = _gaussian(stream, i * cols + j)
    return out


# ----------------------------------------------------------------------------- generator
(_STREAM_THETA, _STREAM_CLASS, _STREAM_EDGES, _STREAM_CENTROIDS, _STREAM_NOISE,
 _STREAM_LABEL_NOISE, _STREAM_SHUFFLE) = range(7)
STAGES = ("degrees + classes", "sample edges", "dedup + symmetrize", "features", "split")


def generate(params: SyntheticParams, name: str = "synthetic", split: int = 0,
             progress: bool | None = None) -> Graph:
    """Build the graph for `params`; `split` offsets the seed of the random split only.

    progress: show a tqdm bar over the stages (default: only for graphs over 5M edges).
    """
    params = params.validate()
    n = params.num_nodes
    if progress is None:
        progress = n * params.avg_degree > 5e6
    bar = _StageBar(name, progress)
    started = time.perf_counter()

    bar.stage(STAGES[0])
    theta = _degree_propensities(params)
    ring = params.local_fraction > 0
    shuffle = _ring_shuffle(params) if ring else None
    # On the ring, ids are ring positions until the final shuffle and classes are arcs.
    labels = _class_arcs(params) if ring else _class_labels(params)
    members = np.argsort(labels, kind="stable")
    class_start = np.searchsorted(labels[members], np.arange(params.num_classes + 1))
    global_prob = np.empty(n, np.float64)
    global_alias = np.empty(n, np.int64)
    _build_alias(theta, global_prob, global_alias, 0)
    class_prob, class_alias = _community_alias_tables(theta, members, class_start)
    tables = (labels, global_prob, global_alias, members, class_start, class_prob,
              class_alias, float(params.homophily), float(params.local_fraction),
              float(params.locality_scale), 1.0 / params.locality_exponent, np.cumsum(theta))

    def sampler(stream, first, count, out_u, out_v, tables=tables):
        _sample_edge_pairs(stream, first, count, *tables, out_u, out_v)

    bar.stage(STAGES[1])
    upper_indptr, upper_cols = _sample_unique_edges(params, sampler, bar, shuffle)
    del theta, global_prob, global_alias, class_prob, class_alias, tables, sampler
    if ring:
        labels = _shuffled(labels, shuffle)

    bar.stage(STAGES[2])
    indptr, indices = upper_to_symmetric_csr(upper_indptr, upper_cols, n)
    del upper_indptr, upper_cols

    bar.stage(STAGES[3])
    x = _features(params, labels)
    if params.label_noise > 0:
        labels = _redraw_labels(stream_seed(params.seed, _STREAM_LABEL_NOISE), labels,
                                float(params.label_noise), params.num_classes)

    bar.stage(STAGES[4])
    train_idx, val_idx, test_idx = random_split(
        n, params.train_fraction, params.val_fraction, seed=params.seed + 1000 * split)
    bar.close()

    meta = {"source": "synthetic", "generator_version": GENERATOR_VERSION,
            "params": params.to_dict(), "split": split,
            "generate_seconds": round(time.perf_counter() - started, 2)}
    return Graph(indptr=indptr, indices=indices, x=x, y=labels, train_idx=train_idx,
                 val_idx=val_idx, test_idx=test_idx, num_classes=params.num_classes,
                 name=name, metric="accuracy", meta=meta)


def _degree_propensities(params: SyntheticParams) -> np.ndarray:
    n = params.num_nodes
    max_degree = params.max_degree or 2.0 * math.sqrt(n * params.avg_degree)
    max_degree = min(max_degree, n - 1)
    # Cap theta so that the expected degree, avg_degree * theta / mean(theta), stays under
    # max_degree; the mean moves a little with the cap, so refine the cap twice.
    stream = stream_seed(params.seed, _STREAM_THETA)
    cap = np.inf
    theta = _pareto_propensity(stream, n, params.power_law_exponent, cap)
    for _ in range(2):
        cap = max(1.0, max_degree * theta.mean() / params.avg_degree)
        theta = _pareto_propensity(stream, n, params.power_law_exponent, cap)
    return theta


def _class_labels(params: SyntheticParams) -> np.ndarray:
    weights = (np.arange(params.num_classes) + 1.0) ** -params.class_size_exponent
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0
    return _draw_classes(stream_seed(params.seed, _STREAM_CLASS), params.num_nodes, cdf)


def _class_arcs(params: SyntheticParams) -> np.ndarray:
    """Class of each ring position: class c holds one arc, sized by its Zipf weight."""
    weights = (np.arange(params.num_classes) + 1.0) ** -params.class_size_exponent
    ends = np.cumsum(weights / weights.sum()) * params.num_nodes
    positions = np.arange(params.num_nodes) + 0.5
    return np.minimum(np.searchsorted(ends, positions), params.num_classes - 1)


def _ring_shuffle(params: SyntheticParams) -> np.ndarray:
    """Node id of each ring position: a seeded random permutation."""
    return np.random.default_rng(int(stream_seed(params.seed, _STREAM_SHUFFLE))).permutation(
        params.num_nodes).astype(index_dtype(params.num_nodes))


def _shuffled(labels: np.ndarray, node_of_position: np.ndarray) -> np.ndarray:
    out = np.empty_like(labels)
    out[node_of_position] = labels
    return out


def _sample_unique_edges(params: SyntheticParams, sampler, bar, node_of_position=None):
    """Sample pairs until the distinct undirected edges reach N*avg_degree/2 (within 0.5%).

    node_of_position: relabel each new pair's ends through it (the ring shuffle).

    Duplicates and self loops cost a few percent (more with heavy hubs), so the first round
    samples the target and later rounds top up the shortfall, scaled by the observed loss.
    """
    n = params.num_nodes
    target = int(round(n * params.avg_degree / 2))
    stream = stream_seed(params.seed, _STREAM_EDGES)
    dtype = index_dtype(n)
    kept_u = np.empty(0, dtype)
    kept_v = np.empty(0, dtype)
    drawn, to_draw = 0, target
    upper_indptr, upper_cols = np.zeros(n + 1, np.int64), np.empty(0, dtype)
    for _round in range(4):
        new_u = np.empty(to_draw, dtype)
        new_v = np.empty(to_draw, dtype)
        sampler(stream, drawn, to_draw, new_u, new_v)
        if node_of_position is not None:
            new_u = node_of_position[new_u]
            new_v = node_of_position[new_v]
        drawn += to_draw
        before = upper_cols.size
        u = np.concatenate([kept_u, new_u]) if kept_u.size else new_u
        v = np.concatenate([kept_v, new_v]) if kept_v.size else new_v
        del new_u, new_v
        upper_indptr, upper_cols = unique_undirected(u, v, n)
        del u, v
        got = upper_cols.size
        bar.note(f"{got:,}/{target:,} undirected edges")
        if got >= 0.995 * target or got >= n * (n - 1) // 2:
            break
        gain = max((got - before) / to_draw, 0.05)
        to_draw = int(math.ceil((target - got) / gain))
        kept_u = np.repeat(np.arange(n, dtype=dtype), np.diff(upper_indptr))
        kept_v = upper_cols
    return upper_indptr, upper_cols


def _features(params: SyntheticParams, labels: np.ndarray) -> np.ndarray:
    centroids = _gaussian_matrix(stream_seed(params.seed, _STREAM_CENTROIDS),
                                 params.num_classes, params.num_features)
    scale = 1.0 / math.sqrt(1.0 + params.feature_noise ** 2)   # unit variance per column
    return _class_features(stream_seed(params.seed, _STREAM_NOISE), labels, centroids,
                           float(params.feature_noise), scale)


class _StageBar:
    """A tqdm bar with one tick per generation stage (silent when disabled or when stderr
    is no terminal)."""

    def __init__(self, name: str, enabled: bool):
        from ..runlog import on_terminal, progress
        self._bar = None
        if enabled and on_terminal():
            self._bar = progress(total=len(STAGES), desc=f"generating {name}", unit="stage")
        self._started = False

    def stage(self, label: str):
        if self._bar is None:
            return
        if self._started:
            self._bar.update(1)
        self._started = True
        self._bar.set_postfix_str(label)

    def note(self, text: str):
        if self._bar is not None:
            self._bar.set_postfix_str(text)

    def close(self):
        if self._bar is not None:
            self._bar.update(1)
            self._bar.close()
