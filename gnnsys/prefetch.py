"""Prepare items in a background thread while the consumer works on the previous one
(minibatches in the minibatch mode, event batches in the temporal mode)."""
from __future__ import annotations

import queue
import threading

_DONE = object()


def prefetched(iterator, depth: int, name: str = "gnnsys-batch-prep"):
    """Run `iterator` in a background thread, `depth` items ahead (0 = inline). Errors
    raised while producing surface in the consuming thread; closing the consumer early
    stops the producer."""
    if depth <= 0:
        yield from iterator
        return
    box: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce():
        try:
            for item in iterator:
                if stop.is_set():
                    return
                box.put(item)
            box.put(_DONE)
        except BaseException as err:  # hand the error to the consumer
            box.put(err)

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = box.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():      # unblock a producer waiting on a full queue
            try:
                box.get_nowait()
            except queue.Empty:
                thread.join(timeout=0.01)
