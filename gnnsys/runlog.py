"""The run directory: metrics as JSON lines, atomic checkpoints, progress bars (on a
terminal only).

Every training mode writes through this module so that `gnnsys report`, `--resume` and
fault recovery read one format:

    run_dir/config.yaml         the validated config of the run
    run_dir/metrics.jsonl       a JSON object per line, each of a `kind` (KINDS): start
                                (once), epoch, event (resume, early_stop), final (once);
                                epochs counted from 1, as the console counts them
    run_dir/checkpoint.pt       the latest checkpoint (written to a temp file, then renamed)
    run_dir/.lock               held (flock) by the one run using the directory
    run_dir/tensorboard/        with run.tensorboard: TensorBoard events of the epoch and
                                final records' numbers (step = the epoch, from 1;
                                final/<key>), the config

Checkpoints hold tensors and plain data only and are loaded weights-only (no pickle);
metrics lines are written in one write each, whole or not at all (a short write is
truncated away), non-finite numbers as null.

Epoch numbers in the log (`epoch`, `best_epoch`, `from_epoch`) count from 1; the start
record says so (`epochs_from: 1`). A log without that key was written by an older gnnsys,
which counted from 0: `read_metrics` shifts its numbers, so every reader sees one count.
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import math
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from common.files import atomic_write_bytes, open_own, remove_dead_temps
from partition.format import MANIFEST

from .errors import ConfigError, NoSpaceForOutput

CHECKPOINT = "checkpoint.pt"
CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
KINDS = ("start", "epoch", "event", "final")
EPOCHS_FROM = 1          # the start record's `epochs_from`: the first epoch's number


def atomic_torch_save(path: str | os.PathLike, obj) -> None:
    """torch.save of tensors and plain data (what weights_only=True loads), atomically."""
    atomic_write_bytes(path, torch_bytes(obj))


def torch_bytes(obj) -> bytes:
    """What torch.save writes of tensors and plain data (what weights_only=True loads)."""
    import io
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


# the names a run directory's own files and folders have (RunDir, lock)
RUN_FILES = (CONFIG, METRICS, CHECKPOINT, TENSORBOARD, ".lock", "previous")
RUN_MARKS = (METRICS, CHECKPOINT, ".lock")      # a folder with any of them is a run's


def check_output(path: str | os.PathLike, flag: str = "--out", needed=()) -> Path:
    """The one check of a path a command writes at the user's word (predict, export,
    report --out): not a directory, and no file a run needs, i.e. a run directory's own
    files (RUN_FILES), anything in a partition directory, whatever command made them, or
    in `needed` (files or folders: the run's dataset). A link counts as its target."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; give the path of a file to write")
    target = path.resolve()
    for keep in map(Path, needed):
        if keep.resolve() in (target, *target.parents):
            where = "would replace" if keep.resolve() == target else "is inside"
            raise ConfigError(f"{flag} {path} {where} {keep}, which the run needs; write it "
                              "elsewhere")
    for folder in target.parents:
        first = target.relative_to(folder).parts[0]
        if (folder / MANIFEST).is_file() and (folder / "part-0").is_dir():
            raise ConfigError(f"{flag} {path} is inside the partition directory {folder}, "
                              "whose files runs read; write it elsewhere")
        if first in RUN_FILES and any(os.path.lexists(folder / n) for n in RUN_MARKS):
            raise ConfigError(f"{flag} {path} would replace {folder / first}, which the run in "
                              f"{folder} needs; write it elsewhere")
    if path.parent.exists() and not path.parent.is_dir():
        raise ConfigError(f"{flag} {path}: {path.parent} is a file, not a directory")
    return path


def write_output(path: str | os.PathLike, data, flag: str = "--out", needed=()) -> None:
    """`data` (as atomic_write_bytes takes it) into the file a user named (check_output),
    atomically; a failure names the
    flag and the path, not the temporary file, and a full disk says it is the disk."""
    path = check_output(path, flag, needed)
    try:
        atomic_write_bytes(path, data)
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpaceForOutput(f"no space left on the device holding {flag} {path} "
                                   f"({_free_space(path)}); free space there or write {flag} "
                                   "elsewhere (the run itself is unchanged)") from None
        raise OSError(err.errno, err.strerror, f"{flag} {path}") from None


def _free_space(path: Path) -> str:
    """'mounted at M, N MB free' of the file system `path` is on."""
    import shutil
    mount = path.resolve().parent
    while not mount.exists():
        mount = mount.parent
    free = shutil.disk_usage(mount).free
    while not os.path.ismount(mount):
        mount = mount.parent
    return f"the file system mounted at {mount}, {free / 2**20:.0f} MB free"


class RunDir:
    """One run's directory. Only rank 0 should write (pass `writer=False` elsewhere)."""

    def __init__(self, path: str | os.PathLike, writer: bool = True):
        self.path = Path(path)
        self.writer = writer
        self._lock = None
        self.board = None            # run.tensorboard's SummaryWriter: save_config opens it
        self._first_epoch = EPOCHS_FROM    # the first epoch this run (re)does
        self._kept_epoch = None            # a resumed run's last kept epoch record
        if writer:
            if self.path.is_symlink() and not self.path.exists():
                raise ConfigError(f"run.dir {self.path} is a link to nowhere (-> "
                                  f"{os.readlink(self.path)}); remove it or pick another run.dir")
            if self.path.exists() and not self.path.is_dir():
                raise ConfigError(f"run.dir {self.path} is a file, not a directory; pick "
                                  "another run.dir")
            self.path.mkdir(parents=True, exist_ok=True)

    def lock(self, wait_s: float = 0.0) -> None:
        """Own the directory for this run: a second run on it fails (after `wait_s`, e.g.
        while a killed worker's process goes away; the lock is the OS's, so a dead run
        holds it no longer); temp files of killed writes go."""
        if not self.writer:
            return
        fd = open_own(self.path / ".lock", os.O_RDWR)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                owner = os.read(fd, 32).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise RuntimeError(f"run directory {self.path} is in use by another run (pid "
                                   f"{owner}); wait for it to finish or set another run.dir") \
                    from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock = fd
        remove_dead_temps(self.path)

    def unlock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)               # closing releases the flock
            self._lock = None

    def close(self) -> None:
        """Release the directory: the TensorBoard events flushed, then the lock."""
        if self.board is not None:
            self.board.close()                 # (twice: a no-op)
        self.unlock()

    def start(self, resume: bool, also=()) -> None:
        """A fresh run (resume=False) in a used directory moves the old run's files (and
        those named in `also`: `gnnsys report`'s charts) aside into previous/<timestamp>/
        rather than mixing or deleting them. Called once the run's set-up passed: a refused
        run changes nothing here."""
        if not self.writer or resume:
            return
        old = [self.path / n for n in (METRICS, CHECKPOINT, CONFIG, TENSORBOARD, *also)
               if os.path.lexists(self.path / n)]
        if old:
            stamp, n = time.strftime("%Y%m%d-%H%M%S"), 0
            keep = self.path / "previous" / stamp
            while keep.exists():                   # two runs within a second
                n += 1
                keep = self.path / "previous" / f"{stamp}-{n}"
            keep.mkdir(parents=True)
            for f in old:
                os.replace(f, keep / f.name)

    # ----------------------------------------------------------------- config
    def save_config(self, config) -> None:
        if self.writer:
            text = yaml.safe_dump(config.to_dict(), sort_keys=False)
            atomic_write_bytes(self.path / CONFIG, text.encode())
            if config.run.tensorboard and self.board is None:
                _check_writable(self.path / TENSORBOARD)
                # purge_step: a resumed run hides the events of the epochs it redoes and the
                # last run's final/ ones, which share the step of the last epoch kept: that
                # epoch's numbers are written again
                kept = self._kept_epoch
                self.board = summary_writer()(self.path / TENSORBOARD, purge_step=(
                    kept["epoch"] if kept else self._first_epoch))
                self.board.add_text("config", f"```yaml\n{text}```", self._first_epoch)
                if kept:
                    numbers = {k: v for k, v in kept.items() if k != "time"}
                    for tag, value in scalars(numbers).items():
                        self.board.add_scalar(tag, value, kept["epoch"])

    # ----------------------------------------------------------------- metrics
    def log(self, kind: str, record: dict) -> None:
        """Append one record of `kind` (KINDS) as a line of JSON."""
        if kind not in KINDS:
            raise ValueError(f"run-log record kind {kind!r}; one of {', '.join(KINDS)}")
        if not self.writer:
            return
        line = json_line({"kind": kind, "time": round(time.time(), 3), **record}) + "\n"
        data, path = line.encode(), self.path / METRICS
        fd = open_own(path, os.O_WRONLY | os.O_APPEND)
        try:
            before = os.fstat(fd).st_size
            try:
                written = os.write(fd, data)   # one append: a crash leaves no torn record
            except OSError as err:             # e.g. a full disk: name the file
                os.ftruncate(fd, before)       # (a write may fail after some bytes landed)
                raise OSError(err.errno, err.strerror, str(path)) from None
            if written < len(data):            # a full disk cut the record short: take
                os.ftruncate(fd, before)       # back its first part, no torn line stays
                raise OSError(errno.ENOSPC, f"No space left on device ({written} of "
                              f"{len(data)} bytes of a record written, then removed)", str(path))
        finally:
            os.close(fd)
        if self.board is not None and kind in ("epoch", "final"):
            step = record["epoch"] if kind == "epoch" else record["epochs"]
            for tag, value in scalars(record, "final/" if kind == "final" else "").items():
                self.board.add_scalar(tag, value, step)
            self.board.flush()                 # on screen while the run goes on

    def truncate_metrics_after(self, epoch: int) -> None:
        """On resume, drop records of epochs after `epoch` (counted from 1: the checkpoint's
        last), which will be redone; an older log is rewritten counted from 1 too."""
        self._first_epoch = epoch + 1
        if not self.writer or not (self.path / METRICS).exists():
            return
        keep = [r for r in read_metrics(self.path) if r.get("epoch", 0) <= epoch]
        self._kept_epoch = next((r for r in reversed(keep) if r.get("kind") == "epoch"
                                 and r.get("epoch") == epoch), None)
        text = "".join(json.dumps(r) + "\n" for r in keep)
        atomic_write_bytes(self.path / METRICS, text.encode())

    # ----------------------------------------------------------------- checkpoints
    def save_checkpoint(self, state: dict) -> Path:
        """Write `state` (must hold 'epoch') atomically; a crash mid-write keeps the old one."""
        path = self.path / CHECKPOINT
        if self.writer:
            atomic_torch_save(path, state)
        return path

    def load_checkpoint(self) -> dict | None:
        path = self.path / CHECKPOINT
        if not path.exists():
            return None
        _regular(path)
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # a checkpoint we cannot read must not be silently ignored
            # torch's own text for pickled objects advises weights_only=False: never say that
            why = ("it holds Python objects beyond tensors and plain data, which gnnsys never "
                   "loads" if isinstance(err, pickle.UnpicklingError) else err)
            raise RuntimeError(f"checkpoint {path} is unreadable ({why}); delete it to start "
                               "over or restore it from a backup") from None


TORN_LINES_NAMED = 3     # more torn lines than this are counted in one warning


def read_metrics(path: str | os.PathLike) -> list[dict]:
    file = Path(path) / METRICS
    if not file.exists():
        return []
    _regular(file)
    records, torn = [], []
    for n, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:      # torn by a crash or a full disk: skip, say so
                torn.append(n)
                continue
            if not isinstance(record, dict):
                raise ConfigError(f"{file}:{n} is not a gnnsys run record (a JSON "
                                  f"{type(record).__name__}, not an object); is this a "
                                  "gnnsys run directory?")
            records.append(record)
    # a crash tears a line or two; a file with no record at all is not a run log (random
    # bytes, another program's file): one line, not a warning per line
    if torn and not records:
        raise ConfigError(f"{file} holds no gnnsys run record (none of its {len(torn)} "
                          "lines is JSON); is this a gnnsys run directory?")
    log = logging.getLogger(__name__)
    for n in torn[:TORN_LINES_NAMED]:
        log.warning("%s:%d is not valid JSON; skipped", file, n)
    if len(torn) > TORN_LINES_NAMED:
        log.warning("%s: %d more lines are not valid JSON; skipped", file,
                    len(torn) - TORN_LINES_NAMED)
    return _renamed(_count_from_one(records))


# epoch keys an older gnnsys logged under another name: full-graph's phase seconds
RENAMED_KEYS = {"time_comm": "comm_s", "time_quant": "quant_s", "time_central": "central_s",
                "time_marginal": "marginal_s", "time_wait": "wait_s", "time_epoch": "step_s"}


def _renamed(records: list[dict]) -> list[dict]:
    """The epoch records with RENAMED_KEYS' old names (each rank's too) read as today's."""
    def rename(record: dict) -> dict:
        return {RENAMED_KEYS.get(k, k): v for k, v in record.items()}
    out = []
    for r in records:
        if r.get("kind") == "epoch" and any(k in RENAMED_KEYS for k in r):
            r = rename(r)
            if isinstance(r.get("workers"), list):
                r["workers"] = [rename(w) if isinstance(w, dict) else w for w in r["workers"]]
        out.append(r)
    return out


# where each kind of record holds epoch numbers
_EPOCH_KEYS = {"epoch": ("epoch",), "event": ("epoch", "best_epoch", "from_epoch"),
               "final": ("best_epoch",)}


def _count_from_one(records: list[dict]) -> list[dict]:
    """The records of a log an older gnnsys wrote (its start record has no `epochs_from`:
    epochs counted from 0) with their epoch numbers counted from 1, as this one writes them."""
    first = next((r for r in records if r.get("kind") == "start"), None)
    if first is None or "epochs_from" in first:
        return records
    out = []
    for r in records:
        r = dict(r)
        if r.get("kind") == "start":
            r["epochs_from"] = EPOCHS_FROM
        for key in _EPOCH_KEYS.get(r.get("kind"), ()):
            if isinstance(r.get(key), int) and not isinstance(r[key], bool):
                r[key] += 1
        out.append(r)
    return out


def _regular(file: Path) -> None:
    """A run's file that is a pipe or a device would block its reader (or never end)."""
    if not file.is_file():
        raise ConfigError(f"{file} is not a regular file (a pipe, a device or a folder); "
                          "is this a gnnsys run directory?")


def _records(run) -> list[dict]:
    """A run directory's records, or `run` itself when it is a list of them already read
    (a reader of several kinds reads, and warns about torn lines, once)."""
    return run if isinstance(run, list) else read_metrics(run)


def epochs(run: str | os.PathLike | list) -> list[dict]:
    """The epoch records, the last of each epoch (a resumed run redoes some), in order."""
    by_epoch = {r["epoch"]: r for r in _records(run) if r.get("kind") == "epoch"}
    return [by_epoch[e] for e in sorted(by_epoch)]


def start(run: str | os.PathLike | list) -> dict | None:
    """The run's start record (mode, workers, each rank's set-up), or None."""
    return next((r for r in _records(run) if r.get("kind") == "start"), None)


def final(run: str | os.PathLike | list) -> dict | None:
    """The final record of the last run that finished here, or None."""
    return next((r for r in reversed(_records(run)) if r.get("kind") == "final"), None)


def lock_holder(path: str | os.PathLike) -> str | None:
    """The pid (as the lock file says, '?' if unreadable) of the run training in `path`
    now, or None when no run holds its lock."""
    try:
        fd = os.open(Path(path) / ".lock", os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None                        # never locked, or not ours to read
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)   # let go at once by the close
        return None
    except BlockingIOError:
        return os.read(fd, 32).decode(errors="replace").strip() or "?"
    finally:
        os.close(fd)


def events(run: str | os.PathLike | list, name: str) -> list[dict]:
    """The event records named `name` (resume, early_stop), in order."""
    return [r for r in _records(run) if r.get("kind") == "event" and r["event"] == name]


def _check_writable(folder: Path) -> None:
    """TensorBoard's writer opens its file in a thread of its own, whose failure is a
    traceback with a bytes path: a folder it cannot write to is one line here first."""
    try:
        folder.mkdir(exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as err:
        raise ConfigError(f"run.tensorboard: cannot write its events into {folder} "
                          f"({err.strerror or err}); make that a folder you can write to, "
                          "or set run.tensorboard: false") from None


def summary_writer():
    """torch's SummaryWriter class, or one line naming the fix if tensorboard is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError('run.tensorboard: true needs the tensorboard package; pip install '
                          '"gnnsys[tensorboard]" or set run.tensorboard: false') from None
    return SummaryWriter


def scalars(record: dict, prefix: str = "") -> dict:
    """Tag -> finite number of a record but its step ("epoch"): nested mappings as
    `bytes_by_bits/8`, each rank's values as `workers/rank1/epoch_s` (a straggler's curve)."""
    out = {}
    for key, value in record.items():
        if key == "workers" and isinstance(value, list):
            value = {f"rank{w['rank']}": w for w in value}
        if isinstance(value, dict):
            out.update(scalars(value, f"{prefix}{key}/"))
        elif (isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
              and key not in ("epoch", "rank") and math.isfinite(value)):
            out[f"{prefix}{key}"] = float(value)
    return out


def json_line(record: dict) -> str:
    """A record as strict JSON (what metrics.jsonl and `gnnsys train --json` print): NaN and
    infinities as null, tensors and numpy values as plain numbers."""
    return json.dumps(_finite(record), allow_nan=False, default=_jsonable)


def _finite(value):
    """NaN and infinities as null (JSON has no such numbers)."""
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _jsonable(value):
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


_compile_notice = None       # numba's listener, registered once per process


def announce_kernel_compiles() -> None:
    """Say once per process, when numba starts compiling one of gnnsys's kernels (a cache
    miss: a fresh install or an edited kernel), why the first batch waits: without it the
    bar sits still 10-25 s and then shows an ETA of hours."""
    global _compile_notice
    if _compile_notice is not None:
        return
    from numba.core import event
    from tqdm.auto import tqdm

    class CompileNotice(event.Listener):
        said = False
        compiles = 0

        def on_start(self, ev):
            func = getattr(ev.data.get("dispatcher"), "py_func", None)
            package = (getattr(func, "__module__", None) or "").split(".")[0]
            if package not in ("common", "samplers", "gnnsys"):
                return
            self.compiles += 1                 # an epoch that compiled is not the pace
            if not self.said:
                self.said = True
                tqdm.write("compiling kernels (first run only: numba caches them; the first "
                           "batch waits for it)", file=sys.stderr)

        def on_end(self, ev):
            pass

    _compile_notice = CompileNotice()
    event.register("numba:compile", _compile_notice)


def kernel_compiles() -> int:
    """How many of gnnsys's kernels this process has compiled since the notice was set up."""
    return _compile_notice.compiles if _compile_notice is not None else 0


def on_terminal(stream=None) -> bool:
    """Whether bars may be drawn: `stream` (default stderr) is a terminal, where they
    redraw in place, or this is a notebook, where tqdm draws a widget. A log file, a pipe
    or a Ray worker's captured output would keep every redraw."""
    from tqdm import autonotebook, std
    if autonotebook.tqdm is not std.tqdm:
        return True
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):       # no isatty, or closed
        return False


def progress(iterable=None, total=None, desc="", enabled=True, **kw):
    """A tqdm bar on stderr when it is a terminal (or a notebook's widget), else (or when
    disabled) a silent stand-in over the same iterable."""
    from tqdm.auto import tqdm
    return tqdm(iterable, total=total, desc=desc, disable=not (enabled and on_terminal()),
                file=sys.stderr, dynamic_ncols=True, leave=False, **kw)
