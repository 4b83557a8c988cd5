"""Query events of a finished temporal run (`RunResult.predict(queries=...)`, `gnnsys
predict --queries`): read from a mapping or a .csv / .npz / .parquet file into exact
columns, and their times checked against the event stream the run's memory is of. The
one place gnnsys parses temporal queries; a bad file is one line (PredictError)."""
from __future__ import annotations

import numpy as np

from ..errors import PredictError
from ..tables import read_columns
from ..temporal_graph import exact_time

QUERY_COLUMNS = ("src", "dst", "t")


def read_queries(queries) -> dict:
    """Query events {"src", "dst" (exact integer ids), "t" (float64)} from a mapping or a
    .csv (a header naming the columns), .npz or .parquet file; a bad one is one line."""
    return read_columns(queries, QUERY_COLUMNS, "query")


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
