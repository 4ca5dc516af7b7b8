"""Ctrl-C (SIGINT) held off over short stretches that must not be cut in two.

Python runs a signal's handler in the main thread at the next bytecode, which
can be inside code that swallows the :class:`KeyboardInterrupt`: the at-fork
hooks (logging releases its locks there, and an exception in an at-fork hook is
printed as "Exception ignored" and dropped) or between two renames of a swap.
A handler that only records the signal is swapped in for the stretch; the
caller decides what a recorded Ctrl-C means afterwards. Blocking the signal
with ``pthread_sigmask`` is not enough: the mask is per thread, and a signal
sent to the process group is delivered to any other thread (tqdm's monitor,
a queue feeder) that does not block it.
"""

import contextlib
import signal
import threading
from typing import Iterator, List


@contextlib.contextmanager
def sigint_recorded() -> Iterator[List[int]]:
    """Within the block, SIGINT is recorded in the yielded list instead of
    raising. Outside the main thread (where handlers cannot be set) the block
    runs unchanged."""
    received: List[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def sigint_delivered_after() -> Iterator[None]:
    """Hold SIGINT over the block and deliver it to the previous handler after
    it (a :class:`KeyboardInterrupt` with Python's default handler). For
    forking children: the caller stops the children on the way out."""
    with sigint_recorded() as received:
        yield
    if received:
        signal.raise_signal(signal.SIGINT)


def ignore_sigint_in_child() -> None:
    """First step of a forked child: Ctrl-C reaches the whole process group
    and the parent stops its children, so the child ignores SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
