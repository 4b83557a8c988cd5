import importlib
import re

import pytest

from gnnsys.config import Config, ConfigError, fields, from_dict, load_config
from gnnsys.mode import MODES
from gnnsys.models import registry


def test_defaults_are_valid():
    cfg = from_dict({})
    assert isinstance(cfg, Config)
    assert cfg.mode == "minibatch" and cfg.sampler.fanouts == [15, 10]


def test_quickstart_config_loads(repo_root):
    cfg = load_config(repo_root / "configs" / "quickstart.yaml")
    assert cfg.dataset.name == "synthetic-small"
    assert cfg.model.layers == len(cfg.sampler.fanouts)


@pytest.mark.parametrize("data, words", [
    ({"modell": {}}, ["unknown config key 'modell'", "did you mean 'model'", "allowed:"]),
    ({"model": {"hiden": 3}}, ["'model.hiden'", "hidden"]),
    ({"model": {"arch": "mlpp"}}, ["'model.arch'", "sage, gcn, gat, mlp"]),
    ({"train": {"epochs": "ten"}}, ["'train.epochs'", "integer"]),
    ({"train": {"lr": -1}}, ["'train.lr'", "> 0"]),
    ({"sampler": {"fanouts": [15, 0]}}, ["'sampler.fanouts'", "positive"]),
    ({"model": {"layers": 3}}, ["'model.layers' is 3", "2 hops"]),
    ({"fullgraph": {"quantization": {"bits": [3]}}}, ["'fullgraph.quantization.bits'"]),
    ({"fullgraph": {"quantization": {"uniform_bits": 3}}},
     ["'fullgraph.quantization.uniform_bits' is 3; allowed: 2, 4, 8"]),
    ({"train": {"progress": "yes"}}, ["'train.progress'", "true or false"]),
    ({"cache": {"policy": "lru"}}, ["'cache.policy'", "none, degree, vip"]),
    ({"model": {"residual": True}}, ["'model.residual'", "layers >= 3", "2 layers"]),
    ({"mode": "fullgraph", "model": {"residual": True, "layers": 3}},
     ["'model.residual' is True but mode 'fullgraph' supports: False"]),
    ({"fullgraph": {"layer_norm": True}},          # removed: model.norm is the one knob
     ["unknown config key 'fullgraph.layer_norm'", "allowed: overlap, quantization"]),
])
def test_bad_values_name_the_key(data, words):
    with pytest.raises(ConfigError) as err:
        from_dict(data)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_overrides_apply_and_validate():
    cfg = from_dict({}, overrides=["train.epochs=3", "sampler.fanouts=[5, 5]"])
    assert cfg.train.epochs == 3 and cfg.sampler.fanouts == [5, 5]
    with pytest.raises(ConfigError, match="key.sub=value"):
        from_dict({}, overrides=["train.epochs"])


def test_load_config_reports_the_file(tmp_path):
    bad = tmp_path / "run.yaml"
    bad.write_text("model: {arch: sage, layres: 2}\n")
    with pytest.raises(ConfigError, match=r"run\.yaml: unknown config key 'model.layres'"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(tmp_path / "list.yaml")


# key -> (module, constant) that implements the choice and so defines its allowed values
OWNERS = {
    "sampler.device": ("samplers.fused_gpu", "DEVICES"),
    "train.device": ("samplers.fused_gpu", "DEVICES"),
    "dataset.normalize_features": ("gnnsys.datasets.for_run", "NORMALIZATIONS"),
    "dataset.feature_dtype": ("gnnsys.datasets.for_run", "FEATURE_DTYPES"),
    "model.norm": ("gnnsys.models.norm", "NORMS"),
    "cluster.backend": ("gnnsys.distributed.comm", "BACKENDS"),
    "cluster.launcher": ("gnnsys.distributed.launcher", "LAUNCHERS"),
    "partition.method": ("partition.build", "METHODS"),
    "temporal.neighbor_strategy": ("samplers.temporal", "NEIGHBOR_STRATEGIES"),
    "temporal.ownership": ("partition.temporal", "OWNERSHIPS"),
}
# keys a mode's package dispatches on: declared in gnnsys.mode_choices (config loads no
# mode package), read from there by the module that dispatches
MODE_KEY_DISPATCHERS = {
    "cache.policy": ("gnnsys.minibatch.store.policy", "POLICIES"),
    "temporal.exchange": ("gnnsys.temporal.exchange", "EXCHANGES"),
    "temporal.train_negative_strategy": ("gnnsys.temporal.batch", "TRAIN_NEGATIVE_STRATEGIES"),
    "fullgraph.quantization.mode": ("gnnsys.fullgraph.assign", "QUANTIZATION_MODES"),
    "fullgraph.quantization.uniform_bits": ("gnnsys.fullgraph.quantize", "SUPPORTED_BITS"),
}


@pytest.mark.parametrize("key", sorted(OWNERS) + sorted(set(MODE_KEY_DISPATCHERS) -
                                                        {"fullgraph.quantization.uniform_bits"}))
def test_the_owning_module_defines_the_allowed_values(key, monkeypatch):
    from gnnsys import mode_choices
    if key in OWNERS:
        owner = importlib.import_module(OWNERS[key][0])
        values = getattr(owner, OWNERS[key][1])
    else:
        values = mode_choices.MODE_CHOICES[key]
    with pytest.raises(ConfigError) as err:
        from_dict({}, overrides=[f"{key}=brand-new"])
    assert str(err.value) == f"--set {key}=brand-new: config key '{key}' is 'brand-new'; " \
        f"allowed: {', '.join(values)}"
    if key in OWNERS:
        monkeypatch.setattr(owner, OWNERS[key][1], values + ("brand-new",))
    else:
        monkeypatch.setitem(mode_choices.MODE_CHOICES, key, values + ("brand-new",))
    assert from_dict({}, overrides=[f"{key}=brand-new"])


@pytest.mark.parametrize("key", sorted(MODE_KEY_DISPATCHERS))
def test_a_mode_package_dispatches_on_the_values_config_allows(key):
    from gnnsys.mode_choices import MODE_CHOICES
    module, name = MODE_KEY_DISPATCHERS[key]
    assert getattr(importlib.import_module(module), name) is MODE_CHOICES[key]


def test_full_graph_rules_are_the_modes_own_check():
    """The generic `validate` holds no full-graph rule: FullGraphMode.check_config does."""
    from gnnsys.fullgraph.mode import FullGraphMode
    threads_on_gpu = {"cluster": {"workers": 2, "launcher": "threads"},
                      "train": {"device": "cuda"}}
    with pytest.raises(ConfigError, match="full-graph mode with cluster.workers > 1 on a "
                                          "GPU needs a process per worker"):
        from_dict({"mode": "fullgraph", "model": {"arch": "gcn"}, **threads_on_gpu})
    assert from_dict(threads_on_gpu).mode == "minibatch"         # not another mode's rule
    config = from_dict({"mode": "fullgraph", "model": {"arch": "gcn"}})
    config.cluster.workers, config.cluster.launcher, config.train.device = 2, "threads", "cuda"
    with pytest.raises(ConfigError, match="needs a process per worker"):
        FullGraphMode.check_config(config)


# what each mode trains, written out here so the test checks the code, not itself
TRAINS = {"minibatch": {"sage", "gcn", "gat", "mlp", "linkx"},
          "temporal": {"tgn", "jodie", "apan"}, "fullgraph": {"gcn", "sage", "mlp", "linkx"},
          "link": {"sage", "gcn", "gat", "mlp", "linkx"}}     # the minibatch models encode


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("arch", sorted(set().union(*TRAINS.values())))
def test_every_mode_and_arch_combination(mode, arch):
    if arch in TRAINS[mode]:
        assert from_dict({"mode": mode, "model": {"arch": arch}}).model.arch == arch
        return
    with pytest.raises(ConfigError) as err:
        from_dict({"mode": mode, "model": {"arch": arch}})
    assert str(err.value) == (f"config key 'model.arch' is '{arch}' but mode '{mode}' "
                              f"supports: {', '.join(registry.archs(mode))}")


@pytest.mark.parametrize("mode", MODES)
def test_a_mode_trains_what_the_model_registry_names(mode):
    """model.arch's vocabulary is the registry's: one line there adds a model."""
    from gnnsys.mode import mode_class
    with pytest.raises(ConfigError, match="but mode"):
        from_dict({"mode": mode, "model": {"arch": "new-net"}})
    assert mode_class(mode).supports["model.arch"] == registry.archs(mode)
    assert TRAINS[mode] == set(registry.archs(mode))


def test_a_temporal_config_must_name_its_arch():
    with pytest.raises(ConfigError, match="'model.arch' is 'sage' but mode 'temporal'"):
        from_dict({"mode": "temporal"})


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm", ["none", "layer", "batch"])
def test_norm_is_one_knob_and_fullgraph_refuses_batch_norm(mode, norm):
    data = {"mode": mode, "model": {"arch": "gcn" if mode != "temporal" else "tgn", "norm": norm}}
    if mode == "fullgraph" and norm == "batch":    # its statistics would span partitions
        with pytest.raises(ConfigError) as err:
            from_dict(data)
        assert str(err.value) == ("config key 'model.norm' is 'batch' but mode 'fullgraph' "
                                  "supports: none, layer")
        return
    assert from_dict(data).model.norm == norm


@pytest.mark.parametrize("key, value", [
    ("fullgraph.quantization.assign_every", 0), ("fullgraph.quantization.group_size", 0),
    ("fullgraph.quantization.profile_points", 0), ("train.weight_decay", -0.1),
    ("cache.replication", 1.5), ("cache.device_fraction", 1.2),
    ("cache.device_fraction", -0.1), ("run.checkpoint_every", -1),
])
def test_out_of_range_values_from_the_issue_are_refused(key, value):
    with pytest.raises(ConfigError, match=f"'{key}' must be"):
        from_dict({}, overrides=[f"{key}={value}"])


def numeric_keys(cls=Config, prefix=""):
    """Every int / float field of the config dataclasses (Optional ones included)."""
    import dataclasses
    import typing
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint, key = hints[f.name], prefix + f.name
        if dataclasses.is_dataclass(hint):
            yield from numeric_keys(hint, key + ".")
        elif {int, float} & set(typing.get_args(hint) or (hint,)):
            yield key


def test_numeric_keys_are_found():
    assert {"train.lr", "sampler.threads", "fullgraph.quantization.lam"} <= set(numeric_keys())


def test_every_numeric_key_has_a_range():
    fixed_sets = {"fullgraph.quantization.uniform_bits"}      # checked as a choice
    missing = {k for k in numeric_keys() if not fields()[k].metadata.get("range")} - fixed_sets
    assert not missing, f"numeric config keys without a range check: {sorted(missing)}"


# a value just outside each kind of range
JUST_OUTSIDE = {">= 0": -1, ">= 1": 0, ">= 2": 1, "> 0": 0, "in [0, 1]": 1.5, "in [0, 1)": 1.0,
                "in [0, 2**63)": 2 ** 63}


@pytest.mark.parametrize("key", sorted(set(numeric_keys()) - {"fullgraph.quantization.uniform_bits"}))
def test_each_range_is_enforced(key):
    bad = JUST_OUTSIDE[fields()[key].metadata["range"]]
    with pytest.raises(ConfigError) as err:
        from_dict({}, overrides=[f"{key}={bad}"])
    assert f"'{key}'" in str(err.value)


@pytest.mark.parametrize("key", sorted(fields()))
def test_resume_refuses_exactly_the_settings_marked_frozen(tmp_path, key):
    """Every field: a resumed run that changes it is refused unless its metadata says
    `resumable`; the model, data and partitions of the checkpoint depend on the rest."""
    from gnnsys.training import resume_changes
    old = from_dict({}).to_dict()
    new = from_dict({}).to_dict()
    section = new
    *parents, name = key.split(".")
    for part in parents:
        section = section[part]
    section[name] = ("changed", section[name])      # any value unlike the old one
    if fields()[key].metadata.get("resumable"):
        assert key in resume_changes(old, new, tmp_path) or key == "run.resume"
    else:
        with pytest.raises(ConfigError, match=f"with changed {key} "):
            resume_changes(old, new, tmp_path)


def test_the_settings_a_resume_may_change():
    assert sorted(k for k, f in fields().items() if f.metadata.get("resumable")) == sorted(
        ["train.epochs", "train.lr", "train.weight_decay", "train.eval_every", "train.progress",
         "sampler.prefetch", "sampler.threads", "sampler.eval_batch_size", "sampler.device",
         "fullgraph.overlap", "dataset.root", "partition.dir"]
        + [f"run.{k}" for k in ("dir", "resume", "checkpoint_every", "tensorboard")]
        + [f"cluster.{k}" for k in ("workers", "address", "cpus_per_worker", "gpus_per_worker",
                                    "backend", "timeout_s", "start_timeout_s", "max_failures",
                                    "fail_at", "launcher")])


def test_a_directory_or_binary_config_is_one_clear_line(tmp_path):
    with pytest.raises(ConfigError, match="is a directory; pass the path of a YAML file"):
        load_config(tmp_path)
    binary = tmp_path / "run.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(binary)


@pytest.mark.parametrize("item, words", [
    ("=3", "must look like key.sub=value"), ("train..epochs=3", "must look like"),
    ("train.epochs", "must look like"), ("sampler.fanouts=[5,", "not valid YAML"),
    ("train.epochs.x=3", "'epochs' is not a section"),
])
def test_malformed_overrides_are_one_line(item, words):
    with pytest.raises(ConfigError) as err:
        from_dict({"train": {"epochs": 2}}, overrides=[item])
    assert words in str(err.value) and "\n" not in str(err.value)


def test_values_as_a_user_types_them(tmp_path):
    """1e-3 is a number (YAML 1.1 reads it as a string), 1:2 a string (YAML 1.1: 62, in
    base 60), 010 not octal; '#' in a --set value is kept."""
    from gnnsys.config import load_config
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  lr: 1e-3\ncluster:\n  fail_at: 1:2\n")
    assert load_config(path).train.lr == 0.001
    assert load_config(path).cluster.fail_at == "1:2"
    assert load_config(path, ["cluster.fail_at=0:3"]).cluster.fail_at == "0:3"
    with pytest.raises(ConfigError, match="'train.epochs' must be an integer, got '010'"):
        load_config(path, ["train.epochs=010"])
    assert load_config(path, ["run.dir=runs/exp #1"]).run.dir == "runs/exp #1"
    assert load_config(path, ["run.dir='quoted #2'"]).run.dir == "quoted #2"
    with pytest.raises(ConfigError, match="'train.lr' must be a number, got 'fast'"):
        load_config(path, ["train.lr=fast"])


@pytest.mark.parametrize("override, message", [
    ("train.seed=99999999999999999999", "'train.seed' must be in [0, 2**63)"),
    ("cluster.fail_at=banana", "'cluster.fail_at' is 'banana'; use RANK:EPOCH"),
    ("cluster.fail_at=1:0", "'cluster.fail_at' is '1:0'; use RANK:EPOCH"),
    ("sampler.threads=100000", "'sampler.threads' is 100000, more than the"),
    ("cluster.workers=64", "'cluster.workers' is 64: a private Ray cluster on this machine"),
    ("cluster.timeout_s=0.01", "'cluster.timeout_s' must be >= 1, got 0.01"),
])
def test_values_that_would_fail_deep_inside_are_refused_up_front(override, message):
    from gnnsys.config import load_config
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])
