"""Tables of a user's ({column: array}): a finished run's (predictions, query scores,
embeddings) written as the file a user names: .npz, .parquet or .csv, checked and written
through runlog's one writer of a user's output (`check_output` / `write_output`), so no
--out replaces what a run needs; and the node pairs a user hands in (temporal queries,
link pairs), read from those formats into exact columns (`read_columns`)."""
from __future__ import annotations

import numpy as np

from pathlib import Path

from .errors import PredictError
from .runlog import check_output, write_output

# the columns a 2-d array becomes in a .parquet file: <prefix>_0, <prefix>_1, ...
COLUMN_PREFIX = {"scores": "score", "embedding": "embedding", "partner": "partner",
                 "score": "score"}


# rows a .csv or .parquet output is written in at a time: the text of a few MB, not of
# the whole table (ten million query scores would be gigabytes of strings)
OUTPUT_ROWS = 65536


def write_table(path, table: dict, needed=()) -> None:
    """`table` as .npz (arrays as they are), .parquet or .csv (one column per array; a
    2-d one as <prefix>_0, <prefix>_1, ..., COLUMN_PREFIX; a .csv with a header, floats
    to the digits that read back the same), streamed OUTPUT_ROWS rows at a time into a
    temp file, renamed once whole, where it replaces nothing a run or `needed` needs
    (runlog.check_output)."""
    suffix = table_format(path, needed)
    if suffix == ".npz":
        write_output(path, lambda f: np.savez(f, **table), needed=needed)
        return
    columns = {}
    for name, v in table.items():
        if v.ndim == 2:
            columns.update({f"{COLUMN_PREFIX[name]}_{c}": v[:, c] for c in range(v.shape[1])})
        else:
            columns[name] = v
    rows = len(next(iter(columns.values()))) if columns else 0
    pieces = [slice(lo, lo + OUTPUT_ROWS) for lo in range(0, rows, OUTPUT_ROWS)]
    if suffix == ".csv":
        formats = ["%d" if v.dtype.kind in "iub" else "%.9g" if v.dtype.itemsize <= 4
                   else "%.17g" for v in columns.values()]

        def fill(f):
            f.write((",".join(columns) + "\n").encode())
            for piece in pieces:
                cells = [np.char.mod(fmt, v[piece]) for fmt, v in zip(formats, columns.values())]
                f.write(("\n".join(map(",".join, zip(*cells))) + "\n").encode())
        write_output(path, fill, needed=needed)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    def fill(f):
        schema = pa.table({k: v[:0] for k, v in columns.items()}).schema
        with pq.ParquetWriter(f, schema) as writer:
            for piece in pieces:
                writer.write_table(pa.table({k: v[piece] for k, v in columns.items()},
                                            schema=schema))
    write_output(path, fill, needed=needed)


def table_format(path, needed=()) -> str:
    """The suffix of a predictions file, checked: .npz, .csv, or .parquet where pyarrow
    imports; and the path (runlog.check_output)."""
    suffix = check_output(path, needed=needed).suffix
    if suffix not in (".npz", ".parquet", ".csv"):
        raise PredictError(f"{path}: predictions are written as .npz, .parquet or .csv")
    if suffix == ".parquet":
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise PredictError(f"{path}: writing .parquet needs pyarrow (pip install "
                               '"gnnsys[predict]"); or write .npz or .csv') from None
    return suffix


def read_columns(source, wanted: tuple, what: str) -> dict:
    """The columns `wanted` of a user's table of node pairs (a "query" or "pair" file:
    `what`), from a mapping or a .csv (a header naming the columns), .npz or .parquet
    file: "src" and "dst" node ids (int64, or uint64 where ids pass 2^63 - 1), "t"
    float64 where wanted; a bad one is one line."""
    listed = ", ".join(wanted)
    if isinstance(source, dict):
        name, columns = f"{what} table", dict(source)
    else:
        name, named = str(source), _read_columns(Path(source), listed, what)
        names = [n for n, _ in named]
        twice = [c for c in wanted if names.count(c) > 1]
        if twice:
            raise PredictError(f"{name} has {names.count(twice[0])} columns named "
                              f"{twice[0]!r}; which one is meant is a guess: give each of "
                              f"{listed} once")
        columns = dict(named)
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise PredictError(f"{name} has no column {missing[0]!r}; a {what} file needs columns "
                          f"{listed} (docs/DATA.md)")
    from .datasets.bundles import exact_ids
    out = {c: np.asarray(columns[c]).reshape(-1) for c in wanted}
    if not len(out["src"]) or len({len(v) for v in out.values()}) != 1:
        raise PredictError(f"{name}: {listed} must be equally long and not empty "
                          f"(got {', '.join(str(len(v)) for v in out.values())})")
    for c in ("src", "dst"):
        v = out[c]
        if v.dtype.kind == "f" and np.all(np.abs(v) < 2 ** 53) and np.all(v == np.round(v)):
            v = v.astype(np.int64)          # a float holds whole numbers exactly below 2^53
        if v.dtype.kind not in "iu":
            raise PredictError(f"{name}: column {c!r} must hold integer node ids, "
                              f"got {v.dtype}")
        out[c] = exact_ids(v)
    if "t" in out:
        if out["t"].dtype.kind not in "iuf" or not np.all(np.isfinite(out["t"])):
            raise PredictError(f"{name}: column 't' must hold finite times")
        out["t"] = out["t"].astype(np.float64)
    return out


def _read_columns(path: Path, listed: str, what: str) -> list:
    """[(column name, values)] of a table file, in the file's order (names may repeat)."""
    if not path.exists():
        raise PredictError(f"{path}: no such {what} file")
    if not path.is_file():              # a FIFO would block the read, a directory fail it
        kind = "a directory" if path.is_dir() else "not a regular file (a pipe or a device)"
        raise PredictError(f"{path} is {kind}, not a {what} file; give a .csv, .npz or "
                          f".parquet file with columns {listed}")
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
                          f'"gnnsys[predict]"); or write the {what} file as .csv or .npz') from None
    except (ValueError, OSError) as err:
        raise PredictError(f"{path} is not a readable {what} file ({' '.join(str(err).split())}"
                          f"); write columns {listed} as .csv, .npz or .parquet") from None
    raise PredictError(f"{path}: {what} files are .csv (a header {listed.replace(', ', ',')}), "
                       ".npz or .parquet")


def _read_csv(path: Path) -> list:
    """A CSV table file's columns: a header of names (quoted or not, after a UTF-8 byte
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
