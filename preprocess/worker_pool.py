"""The ordered process pool of ``mdsfair-preprocess``: ``--workers`` forked
processes that encode chunks of raw lines with
:class:`mdsfair.preprocess.pipeline.ClusterEncoder`, their results handed back
one cluster at a time in input order (:class:`OrderedWorkerPool`), and
:func:`call_in_child`, which runs one function in a forked child that Ctrl-C
stops at once (SentencePiece's trainer).

The chunks in flight are bounded (:data:`CHUNKS_IN_FLIGHT_PER_WORKER`), so
memory does not grow with the input; one feed of chunks serves every split,
so no worker waits at the end of a split. Workers ignore SIGINT: the parent
stops them (:mod:`mdsfair.preprocess.interrupts`).
"""

from __future__ import annotations

import collections
import itertools
import multiprocessing
import queue
import traceback
from collections import Counter
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple

from mdsfair.preprocess.interrupts import ignore_sigint_in_child, sigint_delivered_after
from mdsfair.preprocess.pipeline import ClusterEncoder
from mdsfair.preprocess.structure import InputFormatError

if TYPE_CHECKING:
    from mdsfair.preprocess.config import PreprocessConfig

# A worker's answer for one raw line: (EncodedCluster, empty documents dropped)
# or ("error", InputFormatError), so the parent decides whether to raise or count.
LineResult = Tuple[object, object]


def encode_lines(
    encoder: ClusterEncoder, path: str, lines: List[Tuple[int, bytes]], require_summary: bool
) -> Iterator[Tuple[int, LineResult]]:
    """Encode a chunk of raw lines for writing, in order, each as soon as it
    is done (:meth:`ClusterEncoder.encode_raw_lines`; word ids and character
    counts, only needed by the producers, are dropped to keep what crosses
    processes small)."""
    for line_number, item in encoder.encode_raw_lines(lines, path, require_summary):
        if isinstance(item, InputFormatError):
            yield line_number, ("error", item)
            continue
        encoded, dropped = item
        encoded.line = line_number
        encoded.word_ids = encoded.symbol_chars = None
        yield line_number, (encoded, dropped)


# ------------------------------------------------------------ worker processes

_WORKER: Dict[str, ClusterEncoder] = {}


def _picklable(error: BaseException) -> BaseException:
    import pickle

    try:
        pickle.dumps(error)
        return error
    except Exception:
        return RuntimeError(f"mdsfair-preprocess worker failed:\n{traceback.format_exc()}")


def limit_blas_threads(threads: int) -> None:
    """Keep this process's BLAS libraries (numpy's, which runs spaCy's matrix
    products) to ``threads`` threads from now on."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(threads, user_api="blas")


def _worker_main(tasks, results, args: PreprocessConfig, data_dir: str, subword_manifest: Dict[str, str]) -> None:
    """Worker process: encode chunks of raw lines and send every cluster back
    as soon as it is done, then the chunk's CPU seconds per stage.

    Messages: ``(chunk, position, line_number, LineResult)`` per line (the
    result ``("exception", error)`` when encoding failed; the worker then
    stops), ``(chunk, "done", None, stage_seconds)`` per chunk and
    ``(-1, "exception", None, error)`` when the worker cannot start.
    """
    ignore_sigint_in_child()  # Ctrl-C reaches the whole process group: the parent stops the workers
    try:
        limit_blas_threads(1)  # the workers share the cores; numpy's BLAS would start one thread per core in each
        encoder = _WORKER["encoder"] = ClusterEncoder(args, data_dir, subword_manifest)
    except BaseException as e:  # report, never hang the parent
        results.put((-1, "exception", None, _picklable(e)))
        return
    while True:
        task = tasks.get()
        if task is None:
            return
        chunk_index, path, require_summary, chunk = task
        encoder.stage_seconds.clear()
        encoded_lines = encode_lines(encoder, path, chunk, require_summary)
        for position, (line_number, _) in enumerate(chunk):
            try:
                encoded_line_number, result = next(encoded_lines)
                assert encoded_line_number == line_number
            except BaseException as e:
                results.put((chunk_index, position, line_number, ("exception", _picklable(e))))
                return
            results.put((chunk_index, position, line_number, result))
        results.put((chunk_index, "done", None, dict(encoder.stage_seconds)))


def call_in_child(function, *args, **kwargs):
    """``function(*args, **kwargs)`` in a forked child process, waited for
    here, so that Ctrl-C stops it at once. For SentencePiece's trainer: its
    C++ code reads the Python sentence iterator and then trains without
    returning to Python, so in this process Ctrl-C waited for the whole
    training (minutes on a large corpus), and one that came while the
    iterator ran was lost (the run went on and finished). The child ignores
    SIGINT; on Ctrl-C here it is terminated and :class:`KeyboardInterrupt`
    raised. An exception in the child is raised here."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)

    def child():
        ignore_sigint_in_child()
        try:
            sender.send(("ok", function(*args, **kwargs)))
        except BaseException as error:  # noqa: BLE001 (sent to the parent)
            sender.send(("error", _picklable(error)))

    process = context.Process(target=child, daemon=True)
    try:
        with sigint_delivered_after():  # a Ctrl-C during the fork is raised here, after it
            process.start()
        sender.close()
        try:
            kind, payload = receiver.recv()
        except EOFError:
            process.join()
            raise RuntimeError(
                f"{getattr(function, '__name__', function)} died in process {process.pid} "
                f"(exit code {process.exitcode}); out of memory?"
            ) from None
        process.join()
    except BaseException:
        if process.is_alive():
            process.terminate()
            process.join()
        raise
    finally:
        sender.close()
        receiver.close()
    if kind == "error":
        raise payload
    return payload


# Chunks handed out per worker and not yet written. Results are written in
# input order, so a worker that finishes early runs ahead only this far while
# another one is on a slow chunk (clusters differ 10x in length); the raw lines
# and encoded clusters in flight are what memory holds beyond the models.
CHUNKS_IN_FLIGHT_PER_WORKER = 4


class OrderedWorkerPool:
    """``workers`` forked processes that encode chunks of raw lines.

    Results come back one cluster at a time, in input order, so progress is
    shown per cluster; at most ``chunks_in_flight`` chunks are handed out at a
    time, so memory stays flat however long the input is (raw lines are read
    as they are needed, not loaded whole).
    """

    def __init__(
        self,
        workers: int,
        args: PreprocessConfig,
        data_dir: str,
        subword_manifest: Dict[str, str],
        chunks_in_flight: Optional[int] = None,
    ):
        context = multiprocessing.get_context("fork")
        self.tasks = context.Queue()
        self.results = context.Queue()
        self.chunks_in_flight = chunks_in_flight or CHUNKS_IN_FLIGHT_PER_WORKER * workers
        self.processes = [
            context.Process(
                target=_worker_main, args=(self.tasks, self.results, args, data_dir, subword_manifest), daemon=True
            )
            for _ in range(workers)
        ]
        try:
            with sigint_delivered_after():  # a Ctrl-C during the forks is raised here, after them
                for process in self.processes:
                    process.start()
        except BaseException:
            for process in self.processes:
                if process.is_alive():
                    process.terminate()
                    process.join()
            raise
        self.stage_seconds: Counter = Counter()
        self._feed: Optional[Iterator] = None
        self._next_chunk = self._current = 0  # next chunk handed out, next chunk whose results are yielded
        self._sizes: Dict[int, int] = {}  # lines of each chunk in flight
        self._buffered: Dict[Tuple[int, object], Tuple[int, object]] = {}  # results that came early
        self._split_ends: collections.deque = collections.deque()  # first chunk after each split handed out

    def _receive(self):
        while True:
            try:
                return self.results.get(timeout=1.0)
            except queue.Empty:
                # A worker exits 0 only when told to or after reporting an error.
                dead = [p for p in self.processes if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(
                        f"mdsfair-preprocess worker process {dead[0].pid} died (exit code {dead[0].exitcode}); "
                        "out of memory?"
                    )

    def start(self, feed: Iterator[Optional[Tuple[str, bool, List[Tuple[int, bytes]]]]]) -> None:
        """Encode the chunks of ``feed``: ``(path, require_summary, chunk)``
        items, ``None`` after the last chunk of each split. Chunks are handed
        out as results are taken (:meth:`next_split`), across split
        boundaries, so the workers start on the next split while the last
        chunks of this one finish, instead of waiting for them."""
        if self._feed is not None:
            raise RuntimeError("OrderedWorkerPool.start: the previous feed is not finished")
        self._feed = iter(feed)
        self._split_ends.clear()

    def _hand_out(self) -> None:
        """Put chunks of the feed into the task queue up to the in-flight limit."""
        while self._feed is not None and len(self._sizes) < self.chunks_in_flight:
            item = next(self._feed, StopIteration)
            if item is StopIteration:
                self._feed = None
            elif item is None:
                self._split_ends.append(self._next_chunk)
            else:
                path, require_summary, chunk = item
                self._sizes[self._next_chunk] = len(chunk)
                self.tasks.put((self._next_chunk, path, require_summary, chunk))
                self._next_chunk += 1

    def next_split(self) -> Iterator[Tuple[int, LineResult]]:
        """``(line_number, LineResult)`` for every line of the feed's next split, in order."""
        position = 0
        while True:
            self._hand_out()
            if self._split_ends and self._current == self._split_ends[0]:
                self._split_ends.popleft()
                return
            if self._current not in self._sizes:
                raise RuntimeError("OrderedWorkerPool: the feed ended inside a split (no None after its chunks)")
            size = self._sizes[self._current]
            key = (self._current, position if position < size else "done")
            if key not in self._buffered:
                chunk_index, kind, line_number, payload = self._receive()
                if chunk_index < 0:
                    raise payload
                self._buffered[(chunk_index, kind)] = (line_number, payload)
                continue
            line_number, payload = self._buffered.pop(key)
            if key[1] == "done":
                self.stage_seconds.update(payload)
                del self._sizes[self._current]
                self._current, position = self._current + 1, 0
            elif isinstance(payload[0], str) and payload[0] == "exception":
                raise payload[1]
            else:
                position += 1
                yield line_number, payload

    def imap(
        self, path: str, require_summary: bool, chunks: Iterator[List[Tuple[int, bytes]]]
    ) -> Iterator[Tuple[int, LineResult]]:
        """``(line_number, LineResult)`` for every line of ``chunks`` (one split), in order."""
        self.start(itertools.chain(((path, require_summary, chunk) for chunk in chunks), [None]))
        yield from self.next_split()

    def close(self, terminate: bool = False) -> None:
        for process in self.processes:
            if terminate:
                process.terminate()
            else:
                self.tasks.put(None)
        for process in self.processes:
            process.join(timeout=None if not terminate else 5)
        for q in (self.tasks, self.results):
            q.cancel_join_thread()
            q.close()
