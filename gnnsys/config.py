"""Run configuration: dataclasses are the single source of truth for the YAML schema.

Every knob lives in exactly one dataclass with a default and a one-line comment. Loading
walks the dataclasses, so an unknown key or a value of the wrong type fails up front with
one line that names the key and lists what is allowed (no second, hand-kept schema).

    cfg = load_config("run.yaml", overrides=["train.epochs=3"])
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import os
import re
import stat
import typing
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

import yaml

from .errors import ConfigError, OverrideError
from .yaml_numbers import read_yaml
from .mode import MODES, mode_class
from .mode_choices import MODE_CHOICES


def setting(default=None, range: str | None = None, *, factory=None, resumable: bool = False):
    """A config field whose metadata says its allowed `range` (RULES: null, where a key
    allows it, is always fine) and whether `--resume` may change it (the checkpoint's model,
    data and partitions were made with the old values of the rest)."""
    meta = {"range": range, "resumable": resumable}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# ----------------------------------------------------------------------------- sections
@dataclass
class DatasetConfig:
    name: str | None = None              # a datasets.yaml entry (`gnnsys datasets` lists them); default synthetic-small
    path: str | None = None              # instead of name: your own bundle, .npz or .npy directory (docs/DATA.md)
    task: str | None = None              # node | link (older: node_classification | link_prediction); default: the mode's
    # data directory; default $GNNSYS_DATA or ~/.cache/gnnsys
    root: str | None = setting(None, resumable=True)
    split: int = setting(0, ">= 0")      # which standard split, for multi-split datasets
    params: dict = field(default_factory=dict)   # synthetic generators' parameters; own data: train_fraction, val_fraction of its random split
    normalize_features: str = "none"     # none | row (rows sum to 1, as PyG's NormalizeFeatures) | standard
    feature_dtype: str = "float32"       # float32 | float16 (minibatch: SALIENT++'s storage, half the bytes)

    def __post_init__(self):
        # A path's dataset is named after its file; a saved config repeats that name.
        stem = Path(self.path).stem if self.path else "synthetic-small"
        if self.path and self.name not in (None, stem):
            raise ConfigError(f"config keys 'dataset.name' ({self.name!r}) and 'dataset.path' "
                              "exclude each other: a path's dataset is named after its file; "
                              "drop one of them")
        self.name = self.name or stem


@dataclass
class ModelConfig:
    # minibatch: sage | gcn | gat | mlp | linkx; fullgraph: gcn | sage | mlp | linkx;
    # temporal: tgn | jodie | apan (models/registry.py),
    # or a minibatch model class of your own by import path, module:Class (models/own.py)
    arch: str = "sage"
    hidden: int = setting(256, ">= 1")   # hidden channels
    layers: int = setting(2, ">= 1")     # message-passing layers (= number of fanouts)
    dropout: float = setting(0.5, "in [0, 1)")
    heads: int = setting(4, ">= 1")      # attention heads (gat, temporal attention)
    norm: str = "none"                   # none | layer | batch (not fullgraph); temporal ignores it
    residual: bool = False               # add each hidden->hidden layer's input to its output (minibatch)


@dataclass
class SamplerConfig:
    fanouts: list = field(default_factory=lambda: [15, 10])   # per hop, seed outward; -1 = all
    batch_size: int = setting(1024, ">= 1")  # seeds per batch (per worker)
    eval_batch_size: int = setting(4096, ">= 1", resumable=True)  # seeds per batch in layer-wise inference
    device: str = setting("auto", resumable=True)  # where the sampler reads: auto | cpu | cuda
    # numba / torch threads; default: the cores available (temporal training may use fewer
    # torch threads: temporal.train_torch_threads)
    threads: int | None = setting(None, ">= 1", resumable=True)
    prefetch: int = setting(2, ">= 0", resumable=True)  # batches prepared ahead by the background thread
    drop_last: bool = False


@dataclass
class TrainConfig:
    epochs: int = setting(10, ">= 1", resumable=True)
    lr: float = setting(0.003, "> 0", resumable=True)
    weight_decay: float = setting(0.0, ">= 0", resumable=True)
    optimizer: str = "adam"              # adam (weight_decay as L2) | adamw (decoupled decay)
    seed: int = setting(0, "in [0, 2**63)")   # seeds sampling, init and shuffling
    eval_every: int = setting(1, ">= 1", resumable=True)  # evaluate on the validation split every N epochs
    patience: int = setting(0, ">= 0")   # stop after this many epochs without a better
                                         # validation metric (0 = run every epoch)
    device: str = "auto"                 # where the model trains: auto | cpu | cuda
    precision: str = "fp32"              # fp32 | bf16: bf16 autocast of the training steps (gnnsys/precision.py)
    compile: bool = False                # torch.compile the model's parts (temporal mode)
    progress: bool = setting(True, resumable=True)  # bars on a terminal; epoch lines print anyway


@dataclass
class RunConfig:
    dir: str = setting("runs/default", "a non-empty path", resumable=True)  # checkpoints + metrics.jsonl go here
    resume: bool = setting(False, resumable=True)  # continue from the last checkpoint in `dir`
    # epochs between (atomic) checkpoints; 0 = never
    checkpoint_every: int = setting(1, ">= 0", resumable=True)
    # also write TensorBoard event files to `dir`/tensorboard/ (pip install "gnnsys[tensorboard]")
    tensorboard: bool = setting(False, resumable=True)


@dataclass
class ClusterConfig:
    workers: int = setting(1, ">= 1", resumable=True)  # trainer actors (one per device); 1 = no Ray
    address: str | None = setting(None, resumable=True)  # Ray address; None = start a local cluster
    cpus_per_worker: int = setting(1, ">= 1", resumable=True)
    gpus_per_worker: float = setting(0.0, ">= 0", resumable=True)
    backend: str = setting("auto", resumable=True)  # auto | gloo | nccl
    # collective / actor timeout before a clear error
    timeout_s: float = setting(300.0, ">= 1", resumable=True)   # < 1 s: rendezvous fails
    start_timeout_s: float = setting(180.0, "> 0", resumable=True)  # how long starting the workers may take
    # worker deaths to recover from (restart from checkpoint)
    max_failures: int = setting(1, ">= 0", resumable=True)
    # fault-test hook "RANK:EPOCH": that worker exits mid-epoch (epochs count from 1, as
    # the epoch lines do) on the first attempt only
    fail_at: str | None = setting(None, resumable=True)
    # ray: one process per worker (Ray actors); threads: K ranks as threads of this process
    # (no Ray, no worker recovery: tests, scripts, notebooks)
    launcher: str = setting("ray", resumable=True)


@dataclass
class PartitionConfig:
    method: str = "metis"                # metis | random | stream
    num_parts: int | None = setting(None, ">= 1")  # default: cluster.workers
    dir: str | None = setting(None, resumable=True)  # default: <data root>/parts/<dataset>-...-<digest>
    seed: int = setting(0, "in [0, 2**63)")   # partitioner seed (not train.seed: reruns share parts)


@dataclass
class CacheConfig:
    policy: str = "vip"                  # none | degree | vip
    replication: float = setting(0.1, "in [0, 1]")  # alpha: cache alpha*N/K remote rows per worker
    # share of local rows on the GPU (+ cache if distributed)
    device_fraction: float = setting(0.15, "in [0, 1]")


@dataclass
class TemporalConfig:
    memory_dim: int = setting(100, ">= 1")
    time_dim: int = setting(100, ">= 1")
    embedding_dim: int = setting(100, ">= 1")
    num_neighbors: int = setting(10, ">= 1")  # most recent neighbours for temporal attention
    neighbor_strategy: str = "recent"    # recent | uniform
    exchange: str = "dedup"              # dedup (Sven) | naive (one row per occurrence)
    ownership: str = "range"             # range | hash | balanced
    edge_feat_dim: int = setting(0, ">= 0")  # 0 = the dataset's own (if any); >0 = zero-pad to this
    mailbox_size: int = setting(0, ">= 0")  # mails kept per vertex; 0 = model default (APAN 10, else 1)
    eval_negatives: int = setting(9, ">= 1")  # negatives per positive for MRR (AP uses the first)
    # random | historical | inductive (DyGLib's): the evaluation negatives val_ap selects by
    # and test_ap / test_mrr use; the test also reports AP / AUC under all three
    eval_negative_strategy: str = "random"
    # final test: also rank each positive against every possible destination (bipartite:
    # every destination node, else every node) as test_mrr_all / test_hits10_all
    rank_all: bool = True
    # random | mixed: each training positive also gets a destination busy in its batch
    # (another event's) and a historical negative (a pair seen earlier in training, not in
    # its batch) whose source also meets a random destination, so the scorer learns "met,
    # not now", "popular, not this one" and "idle now", each for what it is
    train_negative_strategy: str = "random"
    # the link scorer also sees how often / when last the pair met, and how many events
    # each end had since
    pair_history: bool = False
    # torch threads of the training steps; 0 = auto: 1 below 800 events per worker's batch
    # (TemporalMode.training_torch_threads), else as sampler.threads
    train_torch_threads: int = setting(0, ">= 0")


@dataclass
class QuantizationConfig:
    mode: str = "none"                   # none | uniform | adaptive
    bits: list = field(default_factory=lambda: [2, 4, 8])
    uniform_bits: int = 8                # bit-width in uniform mode
    assign_every: int = setting(50, ">= 1")  # epochs between adaptive re-assignments
    group_size: int = setting(100, ">= 1")  # messages per assignment group
    lam: float = setting(0.5, "in [0, 1]")  # time vs variance trade-off of the bi-objective
    # per-key MILP time limit (HiGHS); best point so far after
    solver_time_limit_s: float = setting(30.0, "> 0")
    profile_points: int = setting(50, ">= 2")  # message sizes timed per link for the alpha-beta model


@dataclass
class FullGraphConfig:
    overlap: bool = setting(True, resumable=True)  # central nodes compute while marginal ones communicate
    quantization: QuantizationConfig = field(default_factory=QuantizationConfig)


@dataclass
class LinkConfig:
    # held-out shares of the undirected edges (a pair and its reverse go together); a
    # dataset that ships its own split (link bundles) keeps it
    val: float = setting(0.05, "in [0, 1)")
    test: float = setting(0.10, "in [0, 1)")
    split_seed: int = setting(0, "in [0, 2**63)")  # the edge split's seed (not train.seed: reruns share it)
    decoder: str = "dot"                 # dot (GAE) | mlp (OGB's: an MLP over h_u * h_v)
    # > 0: a learned vector of this width per node is the encoder's input instead of the
    # features (graphs without features of their own, e.g. ogbl_ddi, as OGB's GraphSAGE)
    node_embedding: int = setting(0, ">= 0")
    # training negatives, one per positive edge (u, v) -> (u, w): w uniform over the
    # nodes, or drawn by training degree (popular nodes as often as they appear in edges)
    negatives: str = "uniform"
    # positive pairs an epoch trains on, drawn afresh each epoch from the training edges
    # (0 = all of them: a graph of tens of millions of edges takes hours an epoch)
    epoch_pairs: int = setting(0, ">= 0")
    # MRR ranks each held-out positive (u, v) against this many (u, w), w uniform, seeded
    eval_negatives: int = setting(100, ">= 1")
    metric: str = "auc"                  # selects the best epoch: auc | ap | mrr | hits20 | hits50 | hits100


@dataclass
class Config:
    mode: str = "minibatch"              # minibatch | temporal | fullgraph | link (gnnsys.mode.MODES)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    run: RunConfig = field(default_factory=RunConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    temporal: TemporalConfig = field(default_factory=TemporalConfig)
    fullgraph: FullGraphConfig = field(default_factory=FullGraphConfig)
    link: LinkConfig = field(default_factory=LinkConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _choices() -> dict:
    """Key -> allowed values of every fixed-set key, read from the module that dispatches
    on them (imported here: they load torch, and gnnsys/__init__ imports this), or for a
    key a mode's package dispatches on, from `mode_choices` (no mode package is loaded to
    check a config). What one mode supports of these is its own check (Mode.check_config)."""
    from partition import build, temporal as ownership
    from samplers import fused_gpu, temporal as neighbours

    from . import optimizers, precision
    from .datasets import for_run
    from .distributed import comm, launcher
    from .models import norm, registry
    return {**MODE_CHOICES, "link.decoder": tuple(registry.DECODERS), "model.norm": norm.NORMS, "sampler.device": fused_gpu.DEVICES,
            "train.device": fused_gpu.DEVICES,     # one vocabulary for both
            "train.precision": precision.PRECISIONS,
            "train.optimizer": tuple(optimizers.OPTIMIZERS),
            "dataset.normalize_features": for_run.NORMALIZATIONS,
            "dataset.feature_dtype": for_run.FEATURE_DTYPES,
            "cluster.backend": comm.BACKENDS, "cluster.launcher": launcher.LAUNCHERS,
            "partition.method": build.METHODS,
            "temporal.neighbor_strategy": neighbours.NEIGHBOR_STRATEGIES,
            "temporal.ownership": ownership.OWNERSHIPS,
            "temporal.eval_negative_strategy": neighbours.NEGATIVE_STRATEGIES}


# ----------------------------------------------------------------------------- parsing
def _build(cls, data, where: str):
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"unknown config key '{path}'{hint}; allowed: {', '.join(names)}")
        kwargs[key] = _convert(hints[key], value, path)
    return cls(**kwargs)


def _convert(hint, value, path):
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, path)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return None
        hint = next(a for a in args if a is not type(None))
        origin = typing.get_origin(hint)
    target = origin or hint
    if target is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{path}' must be true or false, got {value!r}")
        return value
    if target is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key '{path}' must be an integer, got {value!r}")
        return value
    if target is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config key '{path}' must be a number, got {value!r}")
        return float(value)
    if target is str:
        if not isinstance(value, str):
            raise ConfigError(f"config key '{path}' must be a string, got {value!r}")
        return value
    if target is list:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(f"config key '{path}' must be a list, got {value!r}")
        return list(value)
    if target is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{path}' must be a mapping, got {value!r}")
        return dict(value)
    return value


RULES = {">= 0": lambda v: v >= 0, ">= 1": lambda v: v >= 1, ">= 2": lambda v: v >= 2,
         "> 0": lambda v: v > 0, "in [0, 1]": lambda v: 0 <= v <= 1,
         "in [0, 1)": lambda v: 0 <= v < 1, "in [0, 2**63)": lambda v: 0 <= v < 2 ** 63, "a non-empty path": lambda v: bool(str(v).strip())}


@functools.cache                        # the schema is fixed: walked once
def fields(cls=None, prefix: str = "") -> dict:
    """Dotted key -> dataclasses.Field of every leaf setting (sections walked)."""
    out, hints = {}, typing.get_type_hints(cls or Config)
    for f in dataclasses.fields(cls or Config):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            out.update(fields(hint, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = f
    return out


def resumable(key: str) -> bool:
    """Whether a resumed run may change the dotted `key` (its field's metadata)."""
    f = fields().get(key)
    return f is not None and f.metadata.get("resumable", False)


def validate(cfg: Config) -> Config:
    """Cross-field checks; raises ConfigError naming the key and the allowed values."""
    if cfg.mode not in MODES:                  # first: the rest depend on it
        raise ConfigError(f"config key 'mode' is {cfg.mode!r}; allowed: {', '.join(MODES)}")
    for key, values in _choices().items():
        value = attrgetter(key)(cfg)
        if value not in values:
            raise ConfigError(f"config key '{key}' is {value!r}; allowed: "
                              f"{', '.join(map(str, values))}")
    mode = mode_class(cfg.mode)
    mode.check_config(cfg)
    from .datasets.registry import task_and_kind
    if cfg.dataset.task is not None and task_and_kind(cfg.dataset.task) != (mode.task,
                                                                            mode.data_kind):
        raise ConfigError(f"config key 'dataset.task' is {cfg.dataset.task!r} but mode "
                          f"'{cfg.mode}' trains {mode.task} prediction on {mode.data_kind} "
                          "data; drop dataset.task or pick a mode of that task")
    if cfg.dataset.path and cfg.dataset.task is None:   # saved with the run: how it was read
        cfg.dataset.task = mode.task
    for key, f in fields().items():
        rule, value = f.metadata.get("range"), attrgetter(key)(cfg)
        if rule and value is not None and not RULES[rule](value):
            raise ConfigError(f"config key '{key}' must be {rule}, got {value!r}")
    s = cfg.sampler
    if not s.fanouts or any((not isinstance(f, int)) or isinstance(f, bool) or f == 0 or f < -1
                            for f in s.fanouts):
        raise ConfigError(f"config key 'sampler.fanouts' is {s.fanouts!r}; use a list of "
                          "positive integers (or -1 for all neighbours), e.g. [15, 10]")
    if cfg.cluster.fail_at is not None and not re.fullmatch(r"\d+:0*[1-9]\d*", cfg.cluster.fail_at):
        raise ConfigError(f"config key 'cluster.fail_at' is {cfg.cluster.fail_at!r}; use "
                          "RANK:EPOCH, e.g. 1:2 (a fault test: that worker dies in that "
                          "epoch; epochs count from 1)")
    c = cfg.cluster
    if c.launcher == "ray" and not (c.address or os.environ.get("RAY_ADDRESS")):
        from .distributed.launcher import PRIVATE_CLUSTER_MIN_CPUS
        most = max(os.cpu_count() or 1, PRIVATE_CLUSTER_MIN_CPUS)
        if c.workers > most:
            raise ConfigError(f"config key 'cluster.workers' is {c.workers}: a private Ray "
                              f"cluster on this machine ({os.cpu_count()} cores) runs one "
                              f"process per worker (~250 MB each); use at most {most}, "
                              "cluster.launcher: threads, or a real cluster (cluster.address)")
    if cfg.cluster.workers == 1:               # it runs here: know it now
        import numba
        if (s.threads or 0) > numba.config.NUMBA_NUM_THREADS:
            raise ConfigError(f"config key 'sampler.threads' is {s.threads}, more than the "
                              f"{numba.config.NUMBA_NUM_THREADS} threads numba runs here "
                              "(NUMBA_NUM_THREADS, default: the cores); use at most that")
        if s.device == "cuda":
            from numba import cuda             # (numba's CUDA simulator stands in for tests)
            if not cuda.is_available():
                raise ConfigError("config key 'sampler.device' is 'cuda' but no CUDA GPU is "
                                  "visible; use 'auto' or 'cpu'")
        import torch
        if cfg.train.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("config key 'train.device' is 'cuda' but torch sees no CUDA GPU "
                              f"(torch {torch.__version__}); use 'auto' or 'cpu', or install "
                              "a CUDA build of torch")
    widths = MODE_CHOICES["fullgraph.quantization.uniform_bits"]
    bits = cfg.fullgraph.quantization.bits
    if not bits or any(b not in widths for b in bits):
        raise ConfigError(f"config key 'fullgraph.quantization.bits' is {bits!r}; "
                          f"allowed values: {', '.join(map(str, widths))}")
    return cfg


def _apply_override(data: dict, item: str) -> str:
    """Set one `key.sub=value` in the raw config; returns the dotted key."""
    key, equals, raw = item.partition("=")
    parts = key.strip().split(".")
    if not equals or not all(parts):
        raise OverrideError(f"override '{item}' must look like key.sub=value, e.g. "
                            "train.epochs=3")
    try:
        value = read_yaml(raw)
    except yaml.YAMLError:
        raise OverrideError(f"override '{item}': the value is not valid YAML; quote strings, "
                            "close brackets, e.g. sampler.fanouts=[5,5]") from None
    if isinstance(value, str) and not raw.strip().startswith(("'", '"')):
        value = raw.strip()             # a plain string as typed: YAML would cut it at ' #'

    node = data
    for part in parts[:-1]:
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise OverrideError(f"override '{item}': '{part}' is not a section")
    node[parts[-1]] = value
    return ".".join(parts)


# A dataset named on the command line replaces the file's: `--set dataset.path=my.npz` on
# a config that names a dataset trains on the file, and `--set dataset.name=X` on a config
# with a path trains on X (in a file, or both on the command line, the two still clash).
REPLACES = {"dataset.path": "dataset.name", "dataset.name": "dataset.path"}


def from_dict(data: dict | None, overrides=()) -> Config:
    data = copy.deepcopy(data or {})          # overrides never reach the caller's dict
    overridden = {_apply_override(data, item): item for item in overrides}
    for key in overridden:
        replaced = REPLACES.get(key)
        if replaced and replaced not in overridden:     # the override made data["dataset"]
            data["dataset"].pop(replaced.split(".")[1], None)
    try:
        return validate(_build(Config, data, ""))
    except ConfigError as err:
        item = _override_named(str(err), overridden)
        if item is None:
            raise
        raise OverrideError(f"--set {item}: {err}") from None


def _override_named(message: str, overridden: dict) -> str | None:
    """The override (as typed) of the key, or of a key under the section, a message
    names first: a typo on the command line is the command line's, not the YAML file's."""
    named = re.search(r"'([^']+)'", message)
    for key, item in overridden.items():
        if named and (key == named[1] or key.startswith(named[1] + ".")):
            return item
    return None


def load_config(path: str | os.PathLike | None = None, overrides=()) -> Config:
    """Read and validate a YAML run config (None = all defaults)."""
    data = {}
    if path is not None:
        path = Path(path)
        if path.is_dir() or not path.exists():
            what = "is a directory" if path.is_dir() else "does not exist"
            raise ConfigError(f"config file {path} {what}; pass the path of a YAML file")
        try:
            data = read_yaml(_config_text(path))
        except (yaml.YAMLError, UnicodeDecodeError) as err:
            raise ConfigError(f"{path} is not valid YAML: {' '.join(str(err).split())}") from None
        if data is None:                # an empty file would train every default
            raise ConfigError(f"config file {path} is empty; write at least the settings "
                              "that differ from the defaults (e.g. configs/quickstart.yaml)")
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
    try:
        return from_dict(data, overrides)
    except OverrideError:
        raise
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}" if path else str(err)) from None


def _config_text(path: Path) -> str:
    """The config file's text. A pipe is read (<(...), /dev/stdin), but opened without
    waiting for a writer: a named pipe that no one writes to reads as empty, not for ever.
    A device (/dev/zero, a terminal) is refused, but /dev/null reads as the empty file
    it is."""
    if os.path.realpath(path) == os.devnull:
        return ""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise ConfigError(f"config file {path} is not a regular file (a device); pass "
                              "the path of a YAML file")
        os.set_blocking(fd, True)
        data = f.read()
    if not data and stat.S_ISFIFO(mode):
        raise ConfigError(f"config file {path} is a pipe that nothing was written to; pass "
                          "the path of a YAML file")
    return data.decode()
