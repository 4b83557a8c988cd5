"""Query events of a finished temporal run (`RunResult.predict(queries=...)`, `gnnsys
predict --queries`): read from a mapping or a .csv / .npz / .parquet file into exact
columns, and their times checked against the event stream the run's memory is of. The
one place gnnsys parses temporal queries; a bad file is one line (PredictError)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import PredictError
from ..temporal_graph import exact_time

QUERY_COLUMNS = ("src", "dst", "t")


def read_queries(queries) -> dict:
    """Query events {"src", "dst" (node ids: int64, or uint64 where ids pass 2^63 - 1),
    "t" (float64)} from a mapping or a .csv (a header naming the columns), .npz or
    .parquet file; a bad one is one line."""
    if isinstance(queries, dict):
        name, columns = "queries", dict(queries)
    else:
        name, named = str(queries), _read_columns(Path(queries))
        names = [n for n, _ in named]
        twice = [c for c in QUERY_COLUMNS if names.count(c) > 1]
        if twice:
            raise PredictError(f"{name} has {names.count(twice[0])} columns named "
                              f"{twice[0]!r}; which one is meant is a guess: give each of "
                              "src, dst, t once")
        columns = dict(named)
    missing = [c for c in QUERY_COLUMNS if c not in columns]
    if missing:
        raise PredictError(f"{name} has no column {missing[0]!r}; query events need columns "
                          "src, dst, t (docs/DATA.md)")
    from ..datasets.bundles import exact_ids
    out = {c: np.asarray(columns[c]).reshape(-1) for c in QUERY_COLUMNS}
    if not len(out["src"]) or len({len(v) for v in out.values()}) != 1:
        raise PredictError(f"{name}: src, dst and t must be equally long and not empty "
                          f"(got {', '.join(str(len(v)) for v in out.values())})")
    for c in ("src", "dst"):
        v = out[c]
        if v.dtype.kind == "f" and np.all(np.abs(v) < 2 ** 53) and np.all(v == np.round(v)):
            v = v.astype(np.int64)          # a float holds whole numbers exactly below 2^53
        if v.dtype.kind not in "iu":
            raise PredictError(f"{name}: column {c!r} must hold integer node ids, "
                              f"got {v.dtype}")
        out[c] = exact_ids(v)
    if out["t"].dtype.kind not in "iuf" or not np.all(np.isfinite(out["t"])):
        raise PredictError(f"{name}: column 't' must hold finite times")
    out["t"] = out["t"].astype(np.float64)
    return out


def _read_columns(path: Path) -> list:
    """[(column name, values)] of a query file, in the file's order (names may repeat)."""
    if not path.exists():
        raise PredictError(f"{path}: no such query file")
    if not path.is_file():              # a FIFO would block the read, a directory fail it
        what = "a directory" if path.is_dir() else "not a regular file (a pipe or a device)"
        raise PredictError(f"{path} is {what}, not a query file; give a .csv, .npz or "
                          ".parquet file with columns src, dst, t")
    try:
        if path.suffix == ".csv":
            return _read_csv(path)
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return [(k, data[k]) for k in data.files]
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq
            table = pq.ParquetFile(path).read()    # read_table refuses repeated names
            return [(k, table.column(i).to_numpy()) for i, k in enumerate(table.column_names)]
    except ImportError:
        raise PredictError(f"{path}: reading .parquet needs pyarrow (pip install "
                          '"gnnsys[predict]"); or write the queries as .csv or .npz') from None
    except (ValueError, OSError) as err:
        raise PredictError(f"{path} is not a readable query file ({' '.join(str(err).split())}"
                          "); write columns src, dst, t as .csv, .npz or .parquet") from None
    raise PredictError(f"{path}: query files are .csv (a header src,dst,t), .npz or .parquet")


def _read_csv(path: Path) -> list:
    """A CSV query file's columns: a header of names (quoted or not, after a UTF-8 byte
    order mark or not), then numbers, parsed as the file streams by (no copy of its
    text); ids too large for a float64's 53 bits read again exactly."""
    import csv
    import warnings
    with open(path, encoding="utf-8-sig", newline="") as f:
        names = [n.strip() for n in next(csv.reader([f.readline()], skipinitialspace=True), [])]
        body = f.tell()

        def read(**how):
            f.seek(body)
            with warnings.catch_warnings():     # "no data": said below, in one line
                warnings.simplefilter("ignore", UserWarning)
                return np.loadtxt(f, delimiter=",", quotechar='"', ndmin=2, **how)

        data = read(dtype=np.float64)
        if not len(data):
            return [(n, np.zeros(0)) for n in names]
        if data.shape[1] != len(names):
            raise ValueError(f"{data.shape[1]} values a row under {len(names)} names")
        columns = [(n, data[:, i]) for i, n in enumerate(names)]
        for i, (n, v) in enumerate(columns):
            if n in ("src", "dst") and np.any(np.abs(v) >= 2 ** 53):
                for dtype in (np.int64, np.uint64):      # the one that holds every id
                    try:
                        columns[i] = (n, read(usecols=i, dtype=dtype)[:, 0])
                        break
                    except ValueError:
                        pass
    return columns


def check_times(t: np.ndarray, events, what: str = "query time") -> None:
    """Query times are finite, start at validation's end (the memory the checkpoint holds
    is as of then) and stay within what the models' float32 clocks hold (seconds since
    the first event). `what`: a query file's times (named by row), or one time."""
    lo, hi = events.val
    start = events.t0 + (events.t[hi - 1] if hi > lo else 0.0)
    latest = events.t0 + float(np.finfo(np.float32).max)

    def named(i):
        return f"{what} t={exact_time(t[i])}" + (f" (row {i})" if what == "query time" else "")

    if len(bad := np.flatnonzero(~np.isfinite(t))):
        raise PredictError(f"{named(bad[0])} is not a finite number; give a time in the "
                          f"dataset's own units, from t={exact_time(start)}")
    if len(early := np.flatnonzero(t < start)):
        raise PredictError(f"{named(early[0])} is before the end of the run's validation "
                          f"events (t={exact_time(start)}): the run's memory is as of then, "
                          "so queries start there")
    if len(late := np.flatnonzero(t > latest)):
        raise PredictError(f"{named(late[0])} is past the latest time the models' float32 "
                          f"clocks hold (t={exact_time(latest)}: the first event's + 3.4e38 "
                          "seconds); give a time in the dataset's own units")
