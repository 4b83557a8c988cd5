"""File safety for everything gnnsys writes: temp files named so that a killed writer's
leftovers are found and removed, atomic writes of a file or a whole directory, the modes
the user's umask gives, files opened never through a symbolic link, checksums.

Used by the partition format, the graph cache, the run directory (its lock and
checkpoints) and the launcher. Depends on numpy only; never imports gnnsys or torch.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

TEMP = ".gnnsys-tmp."


def temp_prefix(path: Path) -> str:
    """Temporary siblings of `path` are named `.gnnsys-tmp.<pid>.<name>.<random>`: a prefix
    no one else's file has, and the pid that tells whether the writer still lives."""
    return f"{TEMP}{os.getpid()}.{path.name}."


def remove_dead_temps(directory: Path) -> None:
    """Delete the temporary files and directories (named by temp_prefix, nothing else) that
    killed gnnsys writers left in `directory`: their pid no longer runs on this machine."""
    for entry in directory.glob(TEMP + "*") if directory.is_dir() else ():
        pid = entry.name[len(TEMP):].split(".")[0]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)


def umask() -> int:
    """The process's umask, read without changing it (os.umask would, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def user_mode(path, directory: bool = False) -> None:
    """One policy for every file and folder gnnsys writes: the modes the user's umask
    gives (temp files and folders start private, 0600 / 0700, until they are swapped in)."""
    os.chmod(path, (0o777 if directory else 0o666) & ~umask())


def open_own(path: Path, flags: int) -> int:
    """os.open (O_CREAT) of a file gnnsys writes in place (a lock, metrics.jsonl), never
    through a symbolic link: one planted there would have gnnsys overwrite its target.
    Created with the modes the user's umask gives, as everything gnnsys writes."""
    try:
        return os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise OSError(err.errno, "is a symbolic link, which gnnsys never writes through; "
                      "remove the link", str(path)) from None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # another user's process: alive
        pass
    return True


@contextlib.contextmanager
def atomic_directory(path: Path):
    """Build a directory at a temporary sibling path, then swap it in for `path` in one
    rename; on any error the temporary is removed and an existing `path` is untouched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_temps(path.parent)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(path), dir=path.parent))
    try:
        yield tmp
        for part in (tmp, *tmp.rglob("*")):
            if not part.is_symlink():
                user_mode(part, directory=part.is_dir())
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data) -> None:
    """`data` (bytes, or a function that writes into a binary file, for output too large
    to hold twice) into `path` through a temp file beside it, renamed once synced."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), dir=path.parent)
    try:
        user_mode(tmp)                  # mkstemp's file is 0600
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise



def save_array(file: Path, arr) -> None:
    """np.save, and a failed write (a full disk: numpy says only "N requested and M
    written") is an OSError naming the file."""
    try:
        np.save(file, np.ascontiguousarray(arr), allow_pickle=False)
    except OSError as err:
        raise OSError(err.errno or errno.ENOSPC, err.strerror or str(err), str(file)) from None


def file_digest(path: Path, chunk_bytes: int = 1 << 23) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()
