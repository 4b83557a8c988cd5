"""The on-disk partition format, its manifest, and the id -> owner lookup.

    parts_dir/manifest.json        what was partitioned and how, the id ranges, the
                                   quality report, and every file's size and sha256
    parts_dir/part-<k>/indptr.npy  CSR of the rows part k owns (local row i = global id
                                   offsets[k] + i), starting at 0
                      indices.npy  their columns, as global (relabelled) ids
                      x.npy        features of the owned rows (if the graph has any);
                                   sparse ones as x_indptr, x_indices, x_data, x_shape
                      y.npy        labels of the owned rows
                      train_idx.npy, val_idx.npy, test_idx.npy   owned split ids (global)
                      orig_ids.npy the dataset's id of each owned row

Arrays are plain .npy, loaded memory-mapped. A directory is written under a temporary
name and renamed into place when complete, so a crash never leaves a half-written one
that looks valid; a later corruption (truncated or edited file) is caught by the sizes
and checksums in the manifest, and the error names the file.

Depends on numpy, scipy and `common.files` (atomic writes, checksums); never imports
gnnsys or torch.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from common.files import atomic_directory, file_digest, save_array

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SPLITS = ("train_idx", "val_idx", "test_idx")


class PartitionError(ValueError):
    """A partition directory that is missing, corrupt, or made for another config."""


class StalePartitions(PartitionError):
    """A partition directory written by an older version of the format."""


@dataclass(frozen=True)
class PartitionBook:
    """Contiguous id ranges: part k owns [offsets[k], offsets[k+1])."""

    offsets: np.ndarray   # int64 [K+1]

    @property
    def num_parts(self) -> int:
        return self.offsets.size - 1

    @property
    def num_nodes(self) -> int:
        return int(self.offsets[-1])

    def owner(self, ids) -> np.ndarray:
        return np.searchsorted(self.offsets, np.asarray(ids), side="right") - 1

    def local(self, ids, part: int | None = None) -> np.ndarray:
        ids = np.asarray(ids)
        start = self.offsets[part] if part is not None else self.offsets[self.owner(ids)]
        return ids - start

    def range(self, part: int) -> tuple[int, int]:
        return int(self.offsets[part]), int(self.offsets[part + 1])

    def size(self, part: int) -> int:
        return int(self.offsets[part + 1] - self.offsets[part])


def graph_fingerprint(indptr: np.ndarray, num_features: int) -> str:
    """Cheap identity of the source graph: sha256 of its degree sequence and shape."""
    h = hashlib.sha256(np.ascontiguousarray(indptr).tobytes())
    h.update(f"{indptr.size - 1}:{int(indptr[-1])}:{num_features}".encode())
    return h.hexdigest()[:16]


def write_parts(path: str | os.PathLike, *, indptr, indices, offsets, x=None, y=None,
                splits: dict | None = None, orig_ids=None, manifest_extra: dict | None = None,
                progress=None) -> Path:
    """Write a relabelled graph (ids already contiguous per part) as a parts directory.

    progress: optional callable wrapping an iterable (e.g. a progress bar), one step per part.
    """
    path = Path(path)
    offsets = np.asarray(offsets, dtype=np.int64)
    num_parts = offsets.size - 1
    splits = splits or {}
    with atomic_directory(path) as tmp:
        files = {}
        steps = range(num_parts) if progress is None else progress(range(num_parts))
        for k in steps:
            lo, hi = int(offsets[k]), int(offsets[k + 1])
            arrays = {"indptr": indptr[lo:hi + 1] - indptr[lo],
                      "indices": indices[indptr[lo]:indptr[hi]]}
            if sp.issparse(x):
                rows = x[lo:hi]
                arrays.update(x_indptr=rows.indptr, x_indices=rows.indices, x_data=rows.data,
                              x_shape=np.array(rows.shape))
            elif x is not None:
                arrays["x"] = x[lo:hi]
            if y is not None:
                arrays["y"] = y[lo:hi]
            for name in SPLITS:
                if splits.get(name) is not None:
                    ids = np.asarray(splits[name])
                    arrays[name] = np.sort(ids[(ids >= lo) & (ids < hi)]).astype(np.int64)
            if orig_ids is not None:
                arrays["orig_ids"] = orig_ids[lo:hi]
            part_dir = tmp / f"part-{k}"
            part_dir.mkdir()
            for name, arr in arrays.items():
                file = part_dir / f"{name}.npy"
                save_array(file, arr)
                files[f"part-{k}/{name}.npy"] = {"bytes": file.stat().st_size,
                                                 "sha256": file_digest(file)}
        manifest = {"format_version": FORMAT_VERSION, "created": time.time(),
                    "num_parts": num_parts, "num_nodes": int(offsets[-1]),
                    "num_edges": int(indices.size), "offsets": offsets.tolist(),
                    "num_features": 0 if x is None else int(x.shape[1]),
                    **(manifest_extra or {}), "files": files}
        manifest["sha256"] = manifest_digest(manifest)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return path


def manifest_digest(manifest: dict) -> str:
    """sha256 of the manifest without this digest: the part files' checksums cannot
    catch an edit to the manifest itself (offsets, num_classes, ...), which failed deep
    in training (IndexError: Target N is out of bounds)."""
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class PartitionSet:
    """A parts directory opened for reading; arrays are memory-mapped on access."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        manifest_file = self.path / MANIFEST
        if not manifest_file.exists():
            raise PartitionError(f"{self.path} is not a partition directory (no {MANIFEST}); "
                                 "run `gnnsys partition --config <run.yaml>` to create it")
        try:
            self.manifest = json.loads(manifest_file.read_text())
        except json.JSONDecodeError as err:
            raise PartitionError(f"{manifest_file} is corrupt ({err}); delete {self.path} "
                                 "and partition again") from None
        if not isinstance(self.manifest, dict):
            raise PartitionError(f"{manifest_file} is corrupt (not a JSON object); delete "
                                 f"{self.path} and partition again")
        if self.manifest.get("format_version") != FORMAT_VERSION:
            raise StalePartitions(f"{self.path}: partition format version "
                                 f"{self.manifest.get('format_version')} is not supported "
                                 f"(expected {FORMAT_VERSION}); delete it and partition again")
        if "sha256" not in self.manifest:
            raise StalePartitions(f"{manifest_file} was built by an older version (no sha256 "
                                  f"of itself); delete {self.path} and partition again")
        if self.manifest["sha256"] != manifest_digest(self.manifest):
            raise PartitionError(f"{manifest_file} was edited or is corrupt (its sha256 does "
                                 f"not match); delete {self.path} and partition again")
        self.book = PartitionBook(np.asarray(self.manifest["offsets"], dtype=np.int64))

    @property
    def num_parts(self) -> int:
        return self.book.num_parts

    # ------------------------------------------------------------------ checks
    def verify(self, parts=None, checksums: bool = True) -> None:
        """Check sizes (and sha256) of the files of `parts` (default all) against the
        manifest; raises PartitionError naming the first bad file."""
        wanted = None if parts is None else {f"part-{k}/" for k in parts}
        for rel, info in self.manifest["files"].items():
            if wanted is not None and rel[:rel.index("/") + 1] not in wanted:
                continue
            file = self.path / rel
            hint = f"; delete {self.path} and partition again"
            if not file.exists():
                raise PartitionError(f"partition file {file} is missing{hint}")
            size = file.stat().st_size
            if size != info["bytes"]:
                raise PartitionError(f"partition file {file} has {size} bytes, the manifest "
                                     f"says {info['bytes']}: it is corrupt{hint}")
            if checksums and file_digest(file) != info["sha256"]:
                raise PartitionError(f"partition file {file} does not match its sha256 "
                                     f"checksum in the manifest: it is corrupt{hint}")

    def check_matches(self, settings: dict, fix: str = "partition again") -> None:
        """Raise PartitionError naming the first of `settings` (name -> value) that the
        manifest records with another value, or does not record (an older build)."""
        recorded = self.manifest.get("settings", {})
        hint = f"rebuild it ({fix}) or set partition.dir to another directory"
        for name, want in settings.items():
            if name not in recorded:
                raise PartitionError(f"{self.path} does not record {name} (built by an older "
                                     f"version), so it may not match; {hint}")
            if recorded[name] != want:
                raise PartitionError(f"{self.path} was built with {name}={recorded[name]!r} "
                                     f"but the config has {name}={want!r}; {hint}")

    # ------------------------------------------------------------------ arrays
    def array(self, part: int, name: str, mmap: bool = True):
        """One array of one part, or None if the part has no such array."""
        if not 0 <= part < self.num_parts:
            raise PartitionError(f"{self.path} has parts 0..{self.num_parts - 1}, not {part}")
        file = self.path / f"part-{part}" / f"{name}.npy"
        if f"part-{part}/{name}.npy" not in self.manifest["files"]:
            return None
        try:
            return np.load(file, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise PartitionError(f"cannot read partition file {file} ({err}); delete "
                                 f"{self.path} and partition again") from None

    def features(self, part: int):
        """The part's feature rows: dense (memory-mapped), a CSR matrix, or None."""
        if self.array(part, "x_shape") is None:
            return self.array(part, "x")
        return sp.csr_matrix((self.array(part, "x_data"), self.array(part, "x_indices"),
                              self.array(part, "x_indptr")),
                             shape=tuple(int(n) for n in self.array(part, "x_shape")))

    def full_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole graph's CSR in relabelled ids, stitched from every part's rows
        (each sampler needs the full topology; features stay partitioned)."""
        indptrs = [self.array(k, "indptr") for k in range(self.num_parts)]
        ends = np.cumsum([0] + [int(p[-1]) for p in indptrs])
        indptr = np.concatenate([np.asarray(p[:-1]) + ends[k] for k, p in enumerate(indptrs)]
                                + [np.array([ends[-1]])]).astype(np.int64)
        indices = np.concatenate([self.array(k, "indices") for k in range(self.num_parts)])
        return indptr, indices

    def global_split(self, name: str) -> np.ndarray:
        """A split (train_idx/val_idx/test_idx) over all parts, in relabelled ids."""
        pieces = [self.array(k, name) for k in range(self.num_parts)]
        pieces = [np.asarray(p) for p in pieces if p is not None]
        return np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int64)
