"""The one way loaders read an .npz or .npy directory (no pickle; a corrupt file or a
missing array is a DatasetError naming the file)."""
import zipfile
from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError


class NpzArrays(dict):
    """An .npz file's arrays; a missing one is a DatasetError naming the file, not a KeyError."""

    def __init__(self, path, arrays, fix: str):
        super().__init__(arrays)
        self.path, self.fix = path, fix

    def __missing__(self, key):
        raise DatasetError(f"{self.path} has no array '{key}'; {self.fix}")


def read_npz(path, fix: str) -> NpzArrays:
    """All arrays of `path`, an .npz file or a directory of .npy files (memory-mapped, one
    per array); `fix` says what to do about a bad file (e.g. copy it again)."""
    path = Path(path)
    if path.exists() and not (path.is_dir() or path.is_file()):   # a FIFO would block
        raise DatasetError(f"{path} is not a regular file (a device or a pipe); give an .npz "
                           f"file or a directory of .npy files; {fix}")
    if path.is_file():
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic[:4] != b"PK\x03\x04":      # numpy would call anything else pickled data
            raise DatasetError(f"{path} is not a readable .npz (not a zip archive, which an "
                               f".npz is); {fix}")
    try:
        if path.is_dir():
            return NpzArrays(path, {file.stem: np.load(file, mmap_mode="r", allow_pickle=False)
                                    for file in sorted(Path(path).glob("*.npy"))}, fix)
        with np.load(path, allow_pickle=False) as data:
            return NpzArrays(path, {key: data[key] for key in data.files}, fix)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as err:
        reason = " ".join(str(err).split())
        raise DatasetError(f"{path} is not a readable .npz ({type(err).__name__}: "
                           f"{reason}); {fix}") from None
