import pytest

from gnnsys.config import Config, ConfigError, from_dict, load_config


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
    ({"model": {"arch": "mlp"}}, ["'model.arch'", "sage, gcn, gat"]),
    ({"train": {"epochs": "ten"}}, ["'train.epochs'", "integer"]),
    ({"train": {"lr": -1}}, ["'train.lr'", "> 0"]),
    ({"sampler": {"fanouts": [15, 0]}}, ["'sampler.fanouts'", "positive"]),
    ({"model": {"layers": 3}}, ["'model.layers' is 3", "2 hops"]),
    ({"fullgraph": {"quantization": {"bits": [3]}}}, ["'fullgraph.quantization.bits'"]),
    ({"train": {"progress": "yes"}}, ["'train.progress'", "true or false"]),
    ({"cache": {"policy": "lru"}}, ["'cache.policy'", "none, degree, vip"]),
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
