"""The one partition cache (`gnnsys partition` / ensure_partitions): built once, reused,
any changed setting or graph named, never silently reused; full-graph reads the same parts;
`gnnsys report` draws the charts."""
import copy
import json
import re

import numpy as np
import pytest

from gnnsys.cli import main
from gnnsys.config import from_dict
from gnnsys.partition_cache import ensure_partitions, fullgraph_parts, parts_dir, vertex_parts
from gnnsys.testing import tiny_graph
from partition.build import assign_parts
from partition.format import PartitionError, manifest_digest

BASE = {"dataset": {"name": "synthetic-tiny"}, "model": {"layers": 2},
        "sampler": {"fanouts": [5, 5], "batch_size": 64}, "cluster": {"workers": 2}}


def config_for(tmp_path, overrides=(), mode="minibatch", **partition):
    data = copy.deepcopy({**BASE, "mode": mode, "partition": partition})
    data["dataset"]["root"] = str(tmp_path / "data")
    return from_dict(data, list(overrides))       # (overrides edit `data` in place)


def test_partitions_are_built_once_then_reused(tmp_path):
    config = config_for(tmp_path, method="random")
    first = ensure_partitions(config, progress=False)
    assert first.path == parts_dir(config) and first.num_parts == 2
    stamp = (first.path / "manifest.json").stat().st_mtime_ns
    again = ensure_partitions(config, progress=False)
    assert (again.path / "manifest.json").stat().st_mtime_ns == stamp
    # a new training seed is no reason to partition again
    ensure_partitions(config_for(tmp_path, ["train.seed=7"], method="random"), progress=False)
    assert (again.path / "manifest.json").stat().st_mtime_ns == stamp
    rebuilt = ensure_partitions(config, force=True, progress=False)
    assert (rebuilt.path / "manifest.json").stat().st_mtime_ns != stamp
    # other sampler settings: the default location is another directory, built anew
    other = ensure_partitions(config_for(tmp_path, ["sampler.fanouts=[4, 4]"], method="random"),
                              progress=False)
    assert other.path != rebuilt.path and other.manifest["settings"]["sampler.fanouts"] == [4, 4]


@pytest.mark.parametrize("override, stored, wanted", [
    ("sampler.fanouts=[4, 4]", "[5, 5]", "[4, 4]"),
    ("sampler.batch_size=32", "64", "32"),
    ("partition.method=stream", "'random'", "'stream'"),
    ("partition.num_parts=3", "2", "3"),
    ("partition.seed=1", "0", "1"),
    ("dataset.normalize_features=row", "'none'", "'row'"),
    ("dataset.feature_dtype=float16", "'float32'", "'float16'"),
])
def test_a_changed_setting_is_named_never_silently_reused(tmp_path, override, stored, wanted):
    path = tmp_path / "shared-parts"
    ensure_partitions(config_for(tmp_path, method="random", dir=str(path)), progress=False)
    changed = config_for(tmp_path, [override], method="random", dir=str(path))
    name = override.split("=")[0]
    message = (f"{path} was built with {name}={stored} but the config has {name}={wanted}; "
               "rebuild it (`gnnsys partition --config <run.yaml> --force`) or set partition.dir")
    with pytest.raises(PartitionError, match=re.escape(message)):
        ensure_partitions(changed, progress=False)
    assert ensure_partitions(changed, force=True, progress=False).manifest["settings"][name] \
        == json.loads(wanted.replace("'", '"'))


def test_full_graph_reads_parts_built_for_any_sampler(tmp_path):
    path = tmp_path / "shared-parts"
    built = ensure_partitions(config_for(tmp_path, method="random", dir=str(path)), progress=False)
    other_sampler = ["sampler.fanouts=[3, 3, 3]", "sampler.batch_size=8",
                     "dataset.normalize_features=row"]
    reused = ensure_partitions(config_for(tmp_path, other_sampler, "fullgraph", method="random",
                                          dir=str(path)), progress=False)
    assert reused.manifest["created"] == built.manifest["created"]
    with pytest.raises(PartitionError, match="seed=0 but the config has partition.seed=2"):
        ensure_partitions(config_for(tmp_path, ["partition.seed=2"], "fullgraph", method="random",
                                     dir=str(path)), progress=False)


def test_a_manifest_from_before_the_settings_is_stale(tmp_path):
    config = config_for(tmp_path, method="random")
    manifest = ensure_partitions(config, progress=False).path / "manifest.json"
    data = json.loads(manifest.read_text())
    del data["settings"]
    data["sha256"] = manifest_digest(data)            # as an older version wrote it
    manifest.write_text(json.dumps(data))
    with pytest.raises(PartitionError, match=r"does not record dataset.name \(built by an older "
                       r"version\), so it may not match; rebuild it"):
        ensure_partitions(config, progress=False)


@pytest.mark.parametrize("method", ["metis", "random", "stream"])
def test_full_graph_assignment_is_the_partitioners(tmp_path, method):
    graph = tiny_graph(num_nodes=200, avg_degree=5, num_features=4, seed=5)
    config = config_for(tmp_path, ["cluster.workers=3", "partition.seed=3"], "fullgraph",
                        method=method, dir=str(tmp_path / "parts"))
    parts = fullgraph_parts(config, graph, progress=False)
    assert parts.dtype == np.int64
    np.testing.assert_array_equal(parts, assign_parts(graph, method, 3, seed=3))
    np.testing.assert_array_equal(vertex_parts(ensure_partitions(config, graph)), parts)


def test_parts_of_another_graph_are_refused_and_one_part_needs_none(tmp_path):
    config = config_for(tmp_path, mode="fullgraph", method="random", dir=str(tmp_path / "parts"))
    ensure_partitions(config, tiny_graph(num_nodes=120, seed=1), progress=False)
    with pytest.raises(PartitionError, match="was built from another graph than this run's"):
        fullgraph_parts(config, tiny_graph(num_nodes=120, seed=2), progress=False)
    single = config_for(tmp_path, ["cluster.workers=1"], "fullgraph", dir=str(tmp_path / "one"))
    assert not fullgraph_parts(single, tiny_graph(num_nodes=50), progress=False).any()
    assert not (tmp_path / "one").exists()


def test_temporal_mode_has_no_partitions(tmp_path):
    config = from_dict({"mode": "temporal", "dataset": {"name": "synthetic-tiny"},
                        "model": {"arch": "tgn"}})
    with pytest.raises(PartitionError, match="mode 'temporal' keeps its own vertex ownership"):
        ensure_partitions(config, progress=False)


def test_the_mode_names_the_settings_its_partitions_are_read_by(tmp_path):
    """`Mode.partition_keys`, not the mode's name, says which settings a mode's partitions
    on disk must match: all of them (minibatch: VIP row order, stored rows) or the
    assignment's alone (full-graph); None reads none."""
    from gnnsys.mode import mode_class
    from gnnsys.partition_cache import ALL_SETTINGS, ASSIGNMENT_SETTINGS, partition_settings
    config = config_for(tmp_path, mode="minibatch", method="random")
    assert tuple(partition_settings(config)) == ALL_SETTINGS
    assert set(ASSIGNMENT_SETTINGS) < set(ALL_SETTINGS)
    assert mode_class("minibatch").partition_keys == ALL_SETTINGS
    assert mode_class("fullgraph").partition_keys == ASSIGNMENT_SETTINGS
    assert mode_class("temporal").partition_keys is None
    fullgraph = config_for(tmp_path, mode="fullgraph", method="random",
                           dir=str(tmp_path / "parts"))
    ensure_partitions(fullgraph, tiny_graph(num_nodes=120, seed=1), progress=False)
    other_fanouts = copy.deepcopy(fullgraph)
    other_fanouts.sampler.fanouts = [3, 3]           # not a setting full-graph reads
    ensure_partitions(other_fanouts, tiny_graph(num_nodes=120, seed=1), progress=False)
    as_minibatch = copy.deepcopy(other_fanouts)
    as_minibatch.mode = "minibatch"
    with pytest.raises(PartitionError, match="sampler.fanouts"):
        ensure_partitions(as_minibatch, tiny_graph(num_nodes=120, seed=1), progress=False)


def test_cli_partition_prebuilds_full_graph_parts_where_partition_dir_says(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    where = tmp_path / "elsewhere" / "parts"
    config = config_for(tmp_path, mode="fullgraph", method="random", dir=str(where))
    cfg.write_text(json.dumps(config.to_dict()))
    assert main(["partition", "--config", str(cfg)]) == 0
    assert f"{where}: 2 parts (random)" in capsys.readouterr().out
    assert (where / "manifest.json").exists() and not (tmp_path / "data" / "parts").exists()


def test_cli_partition_verify_and_report(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(json.dumps({"dataset": {"name": "synthetic-tiny",
                                           "root": str(tmp_path / "data")},
                               "model": {"layers": 2}, "sampler": {"fanouts": [5, 5]},
                               "cluster": {"workers": 2}, "partition": {"method": "metis"}}))
    assert main(["partition", "--config", str(cfg), "--verify"]) == 0
    assert "2 parts (metis), edge cut" in capsys.readouterr().out
    victim = next((tmp_path / "data" / "parts").glob("*/part-0/x.npy"))
    victim.write_bytes(victim.read_bytes()[:-8])
    assert main(["partition", "--config", str(cfg)]) == 2        # bad input: corrupt parts
    assert "part-0/x.npy has" in capsys.readouterr().err

    run = tmp_path / "run"
    run.mkdir()
    lines = [{"kind": "epoch", "epoch": e, "loss": 1.0 / (e + 1), "val_acc": 0.5 + e / 10, "workers": [
        {"rank": r, "remote_rows": 10, "cache_hits": 5, "bytes_recv": 100,
         "fetch_wait_s": 0.1, "batch_wait_s": 0.1, "allreduce_s": 0.1} for r in (0, 1)]}
        for e in range(3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main(["report", str(run)]) == 0
    assert (run / "loss.png").stat().st_size > 0
    assert (run / "metrics.png").stat().st_size > 0
    assert main(["report", str(tmp_path / "missing")]) == 2             # bad input


@pytest.mark.parametrize("name", ["y", "train_idx", "val_idx", "test_idx", "orig_ids"])
def test_a_tampered_label_or_split_file_is_caught(tmp_path, name):
    """Every file of a part is in the manifest's checksums, labels and splits included: a
    same-size edit is refused, naming the file."""
    from gnnsys.partition_cache import ensure_partitions
    from partition.format import PartitionError, PartitionSet
    config = from_dict({"cluster": {"workers": 2}, "partition": {"dir": str(tmp_path / "p")},
                        "dataset": {"name": "synthetic-tiny", "root": str(tmp_path / "d")}})
    ensure_partitions(config, progress=False)
    file = tmp_path / "p" / "part-1" / f"{name}.npy"
    values = np.load(file)
    np.save(file, values[::-1].copy() if len(values) > 1 else values + 1)
    with pytest.raises(PartitionError, match=f"part-1/{name}.npy does not match its sha256"):
        PartitionSet(tmp_path / "p").verify(parts=[1])


def test_gnnsys_own_cache_from_an_older_version_is_rebuilt_a_users_is_not(tmp_path):
    config = config_for(tmp_path, method="random")
    manifest = ensure_partitions(config, progress=False).path / "manifest.json"
    data = json.loads(manifest.read_text())
    del data["sha256"]                       # as versions before the digest wrote it
    manifest.write_text(json.dumps(data))
    assert "sha256" in ensure_partitions(config, progress=False).manifest
    mine = config_for(tmp_path, method="random", dir=str(tmp_path / "mine"))
    manifest = ensure_partitions(mine, progress=False).path / "manifest.json"
    manifest.write_text(json.dumps(data))
    with pytest.raises(PartitionError, match="was built by an older version"):
        ensure_partitions(mine, progress=False)
