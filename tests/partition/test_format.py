"""On-disk parts: round trip, owner lookup, and corrupt/mismatched directories named."""
import json

import numpy as np
import pytest

from gnnsys.testing import tiny_graph
from partition.build import build_partitions
from partition.format import PartitionBook, PartitionError, PartitionSet


@pytest.fixture()
def parts_dir(tmp_path):
    g = tiny_graph(num_nodes=300, seed=2)
    path = tmp_path / "tiny-metis-3"
    build_partitions(g, path, method="metis", num_parts=3, fanouts=[5, 5], batch_size=32,
                     extra={"settings": {"partition.num_parts": 3}})
    return g, path


def test_round_trip_preserves_graph_features_and_splits(parts_dir):
    g, path = parts_dir
    ps = PartitionSet(path)
    ps.verify()
    orig = np.concatenate([ps.array(k, "orig_ids") for k in range(3)])
    assert sorted(orig.tolist()) == list(range(g.num_nodes))
    indptr, indices = ps.full_csr()
    dst = np.repeat(np.arange(g.num_nodes), np.diff(indptr))
    ei = g.edge_index()
    assert set(zip(orig[indices].tolist(), orig[dst].tolist())) == \
        set(zip(ei[0].tolist(), ei[1].tolist()))
    x = np.concatenate([ps.array(k, "x") for k in range(3)])
    np.testing.assert_array_equal(x, g.x[orig])
    y = np.concatenate([ps.array(k, "y") for k in range(3)])
    np.testing.assert_array_equal(y, g.y[orig])
    train = ps.global_split("train_idx")
    assert sorted(orig[train].tolist()) == sorted(g.train_idx.tolist())
    for k in range(3):   # each part lists only the training ids it owns
        lo, hi = ps.book.range(k)
        own = ps.array(k, "train_idx")
        assert ((own >= lo) & (own < hi)).all()
    assert isinstance(ps.array(0, "indices"), np.memmap)
    assert ps.manifest["quality"]["num_parts"] == 3


def test_partition_book_owner_and_local():
    book = PartitionBook(np.array([0, 3, 3, 7]))
    ids = np.array([0, 2, 3, 6])
    assert book.owner(ids).tolist() == [0, 0, 2, 2]
    assert book.local(ids).tolist() == [0, 2, 0, 3]
    assert book.size(1) == 0 and book.range(2) == (3, 7)


def test_truncated_file_is_named(parts_dir):
    _, path = parts_dir
    victim = path / "part-1" / "indices.npy"
    victim.write_bytes(victim.read_bytes()[:-4])
    with pytest.raises(PartitionError, match="part-1/indices.npy has .* bytes"):
        PartitionSet(path).verify(checksums=False)


def test_flipped_byte_fails_checksum(parts_dir):
    _, path = parts_dir
    victim = path / "part-2" / "x.npy"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    PartitionSet(path).verify(parts=[0, 1])          # other parts are fine
    with pytest.raises(PartitionError, match="part-2/x.npy does not match its sha256"):
        PartitionSet(path).verify()


def test_mismatch_and_missing_manifest_are_named(parts_dir, tmp_path):
    _, path = parts_dir
    PartitionSet(path).check_matches({"partition.num_parts": 3})
    with pytest.raises(PartitionError, match="built with partition.num_parts=3 but the config "
                       "has partition.num_parts=4; rebuild it"):
        PartitionSet(path).check_matches({"partition.num_parts": 4})
    with pytest.raises(PartitionError, match="does not record sampler.batch_size"):
        PartitionSet(path).check_matches({"sampler.batch_size": 32})
    with pytest.raises(PartitionError, match="not a partition directory"):
        PartitionSet(tmp_path / "nowhere")
    manifest = path / "manifest.json"
    data = json.loads(manifest.read_text())
    data["format_version"] = 99
    manifest.write_text(json.dumps(data))
    with pytest.raises(PartitionError, match="format version 99"):
        PartitionSet(path)


def test_missing_part_file_and_unparsable_manifest_are_named(parts_dir):
    _, path = parts_dir
    (path / "part-0" / "y.npy").unlink()
    with pytest.raises(PartitionError, match=r"part-0/y.npy is missing; delete .* and "
                                             "partition again"):
        PartitionSet(path).verify(checksums=False)
    (path / "manifest.json").write_text('{"format_version": 1, "offsets": [0, ')
    with pytest.raises(PartitionError, match=r"manifest.json is corrupt .*partition again"):
        PartitionSet(path)


@pytest.mark.parametrize("edit", ["num_classes", "offsets", "files", "no digest"])
def test_an_edited_manifest_is_refused_when_opened(parts_dir, edit):
    """The part files' checksums cannot catch an edit to the manifest itself: a lower
    num_classes failed deep in training (IndexError: Target N is out of bounds). Nor a
    label file changed at the same size with its recorded sha256 edited to match: the
    digest covers the files table too."""
    from common.files import file_digest
    _, path = parts_dir
    manifest = path / "manifest.json"
    data = json.loads(manifest.read_text())
    if edit == "num_classes":
        data["num_classes"] = 1
    elif edit == "offsets":
        data["offsets"][1] -= 1
    elif edit == "files":
        labels = path / "part-0" / "y.npy"
        y = np.load(labels)
        np.save(labels, (y + 1) % data["num_classes"])      # same size, other labels
        data["files"]["part-0/y.npy"]["sha256"] = file_digest(labels)
        assert data["files"]["part-0/y.npy"]["bytes"] == labels.stat().st_size
    else:
        del data["sha256"]
    manifest.write_text(json.dumps(data))
    why = "was built by an older version" if edit == "no digest" else "was edited or is corrupt"
    with pytest.raises(PartitionError, match=f"manifest.json {why}.*delete .* and partition "
                                             "again"):
        PartitionSet(path)
