"""The cyclic garbage collector paused while one burst of work runs (a backend request,
the responder's memory-cache prefill of a user's groups).

Such a burst allocates tens of thousands of objects that live until it ends (entries,
member lists, names, group views), so the collector kept running its older generations
over them and found nothing: 15-20 % of the backend's CPU for a cold initgroups of
bigroupuser (the backend alone, A/B with gc.disable), 3 % of the responder's INITGR
answer (162 M -> 157 M instructions, valgrind, tests/bench/test_bench_prefill.py's
fixture). What a burst builds holds no cycles that outlive it: reference counting frees
it at the end as before.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0  # bursts running under paused() (the backend: one executor thread per domain)
_was_enabled = False


@contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block; it resumes, if it was on before the first,
    when the last of the blocks running at once (other threads') ends, also on error."""
    release = hold()
    try:
        yield
    finally:
        release()


def hold() -> Callable[[], None]:
    """:func:`paused` beyond one block: the collector off until the function returned
    is called (once; later calls do nothing). For a burst that spans awaits: the
    backend's request and the work it leaves for after its answer, which frees what
    the request built. Resumed in between, the first allocation collected the young
    generation, every object the request built and the answer still held: 7.9 ms of
    a cold initgroups of bigroupuser's 101 ms, before its answer (gc.callbacks,
    testing.replay)."""
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    done = False

    def release() -> None:
        global _holders
        nonlocal done
        with _lock:
            if done:
                return
            done = True
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()

    return release
