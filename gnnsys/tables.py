"""A finished run's tables (predictions, query scores, embeddings: {column: array}) as the
file a user names: .npz, .parquet or .csv, checked and written through runlog's one
writer of a user's output (`check_output` / `write_output`), so no --out replaces what a
run needs."""
from __future__ import annotations

import numpy as np

from .errors import PredictError
from .runlog import check_output, write_output

# the columns a 2-d array becomes in a .parquet file: <prefix>_0, <prefix>_1, ...
COLUMN_PREFIX = {"scores": "score", "embedding": "embedding"}


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
