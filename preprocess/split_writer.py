"""One split of a data-bin, written row by row (``mdsfair-preprocess``).

:class:`SplitEncoder` reads a split's raw lines in chunks of
``--chunk-size`` (with ``--shards``, only its shard's share,
:func:`lines_of_shard`) and encodes them in order, in this process or in the
worker pool all splits share. :func:`binarize_split` writes each encoded
cluster as one row of every file of the split (:class:`SplitFiles`: the
token, structure and side-data streams, ``ids.txt``, ``summary.txt``, the
other references and the skip report), counts it (:class:`SplitCounts`) and
returns the split's report; a refused line is raised with its file and line,
or skipped and counted with ``--skip-bad``.
"""

import os
import time
from collections import Counter
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np
from tqdm import tqdm

from mdsfair.data.manifest import STRUCTURE_STREAMS
from mdsfair.data.side_data import SideDataSpec
from mdsfair.preprocess.accounting import SplitLog
from mdsfair.preprocess.config import PreprocessConfig
from mdsfair.preprocess.pipeline import ClusterEncoder, EncodedCluster
from mdsfair.preprocess.references import MultiReferenceWriter
from mdsfair.preprocess.structure import InputFormatError, iter_raw_lines
from mdsfair.preprocess.worker_pool import LineResult, OrderedWorkerPool, encode_lines


def lines_of_shard(lines: Iterator[Tuple[int, bytes]], index: int, count: int) -> Iterator[Tuple[int, bytes]]:
    """The raw lines of shard ``index`` of ``count``: the non-blank lines
    ``index``, ``index + count``, ``index + 2 count``, ... (round-robin, so
    every cluster lands in exactly one shard and the shards differ in size by
    at most one cluster, however the input is ordered). Line numbers stay
    those of the input file, so errors name the file's own lines."""
    for position, item in enumerate(lines):
        if position % count == index:
            yield item


class SplitEncoder:
    """Encodes the raw lines of a split in order: in this process
    (``--workers 1``) or in an :class:`OrderedWorkerPool` shared by all splits.
    :attr:`stage_seconds` sums the CPU seconds of every process per stage."""

    def __init__(self, args: PreprocessConfig, data_dir: str, subword_manifest: Dict[str, str]):
        self.args = args
        self.data_dir = data_dir
        self.subword_manifest = subword_manifest
        self.pool = self.encoder = None
        if args.workers > 1:
            self.pool = OrderedWorkerPool(args.workers, args, data_dir, subword_manifest)
        else:
            self.encoder = ClusterEncoder(args, data_dir, subword_manifest)
        self.reading_seconds = 0.0
        self._planned: List[Tuple[str, bool]] = []

    @property
    def stage_seconds(self) -> Counter:
        seconds = Counter(self.pool.stage_seconds if self.pool is not None else self.encoder.stage_seconds)
        seconds["structure"] += self.reading_seconds  # reading the raw lines happens here
        return seconds

    def _chunks(self, path: str) -> Iterator[List[Tuple[int, bytes]]]:
        lines = iter_raw_lines(path)
        shard = getattr(self.args, "shard_selection", {}).get(path)  # (index, count) with --shards
        if shard is not None:
            lines = lines_of_shard(lines, *shard)
        while True:
            start = time.process_time()
            chunk = [item for _, item in zip(range(self.args.chunk_size), lines)]
            self.reading_seconds += time.process_time() - start
            if not chunk:
                return
            yield chunk

    def plan(self, splits: List[Tuple[str, bool]]) -> None:
        """The ``(path, require_summary)`` of every split this encoder will be
        called on, in order (required with workers): their chunks are handed
        out as one feed, so no worker waits at the end of a split for the others."""
        if self.pool is None:
            return
        self._planned = list(splits)

        def feed():
            for path, require_summary in splits:
                for chunk in self._chunks(path):
                    yield path, require_summary, chunk
                yield None

        self.pool.start(feed())

    def __call__(self, path: str, require_summary: bool) -> Iterator[Tuple[int, LineResult]]:
        if self.pool is not None:
            planned = self._planned.pop(0) if self._planned else None
            if planned != (path, require_summary):
                raise RuntimeError(f"SplitEncoder: split {(path, require_summary)} asked for, {planned} planned")
            yield from self.pool.next_split()
            return
        for chunk in self._chunks(path):
            yield from encode_lines(self.encoder, path, chunk, require_summary)

    def close(self, terminate: bool = False) -> None:
        if self.pool is not None:
            self.pool.close(terminate)


def count_lines(path: str) -> int:
    """Lines of a file (a last line without newline counts), fast: bytes, no decoding."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + int(last != b"\n")


class Progress:
    """The per-split progress bar: advances per line (a cluster or a skipped
    line) against the split's line count, with the ETA that gives and the
    source words per second as postfix."""

    def __init__(self, split: str, path: str, disable: bool):
        self.disable = disable
        total = None if disable else count_lines(path)
        self.bar = tqdm(desc=split, total=total, unit=" clusters", disable=disable, dynamic_ncols=True)
        self.line = 0
        self.words = 0
        self.start = self.last_postfix = time.perf_counter()

    def update(self, line_number: int, words: int) -> None:
        if self.disable:
            return
        self.words += words
        self.bar.update(line_number - self.line)
        self.line = line_number
        now = time.perf_counter()
        if now - self.last_postfix >= 0.5:
            self.bar.set_postfix_str(f"{self.words / (now - self.start):,.0f} words/s", refresh=False)
            self.last_postfix = now

    def close(self) -> None:
        if not self.disable:
            self.bar.update(max(self.bar.total - self.line, 0))  # trailing blank lines
            elapsed = time.perf_counter() - self.start
            self.bar.set_postfix_str(f"{self.words / max(elapsed, 1e-9):,.0f} words/s", refresh=False)
        self.bar.close()


def requires_summary(args: PreprocessConfig, split: str) -> bool:
    """Whether every cluster of ``split`` must have a summary (training splits)."""
    return split in args.train_splits and not args.allow_empty_summary


class SplitFiles:
    """The files of one split in the data-bin folder ``args.destdir``, one
    row per example: the indexed streams ``{split}.source``, ``.target``, the
    structure streams (:data:`~mdsfair.data.manifest.STRUCTURE_STREAMS`) and
    the side data, ``{split}.ids.txt`` and ``{split}.summary.txt``; the
    other references (:class:`MultiReferenceWriter`, which adds a row per
    further reference with ``--multi-reference each`` in a training split)
    and the skip report and repeated ids (:class:`SplitLog`)."""

    def __init__(
        self, args: PreprocessConfig, split: str, path: str, specs: List[SideDataSpec], subword_manifest: Dict[str, str]
    ):
        from fairseq.data import Dictionary

        from mdsfair.data.indexed import ArrayWriter, token_dtype

        prefix = os.path.join(args.destdir, split)
        tokens = token_dtype(len(Dictionary.load(os.path.join(args.destdir, "dict.txt"))))
        self.streams = {
            "source": ArrayWriter(prefix + ".source", tokens),
            "target": ArrayWriter(prefix + ".target", tokens),
        }
        for stream in STRUCTURE_STREAMS:
            self.streams[stream] = ArrayWriter(f"{prefix}.{stream}", np.int32)
        for spec in specs:
            self.streams[spec.name] = ArrayWriter(f"{prefix}.{spec.name}", spec.numpy_dtype)
        self.side_data_names = [spec.name for spec in specs]
        self.log = SplitLog(prefix, split, path, args.skip_bad)
        self.references = MultiReferenceWriter(
            prefix, args.multi_reference == "each" and split in args.train_splits, args.destdir, subword_manifest
        )
        self.prefix = prefix

    def write(self, encoded: EncodedCluster, ids_file, summary_file) -> Counter:
        """Write ``encoded``'s row (and its further references' rows); returns
        the counts the extra rows add (:meth:`MultiReferenceWriter.add`)."""
        self.streams["source"].add(encoded.tokens)
        self.streams["target"].add(encoded.target)
        for stream, ids in zip(STRUCTURE_STREAMS, (encoded.doc_ids, encoded.para_ids, encoded.sent_ids)):
            self.streams[stream].add(ids)
        for name in self.side_data_names:
            self.streams[name].add(encoded.side_data[name])
        ids_file.write(encoded.id.replace("\n", " ") + "\n")
        summary_file.write(encoded.summary.replace("\n", " ") + "\n")
        self.log.written(encoded)
        return self.references.add(encoded, self.streams, self.side_data_names, ids_file, summary_file)

    def finalize(self) -> None:
        """Write the index of every stream."""
        for writer in self.streams.values():
            writer.finalize()

    def abort(self) -> None:
        """Close every file of a failed run (its staging folder is removed)."""
        for writer in self.streams.values():
            writer.abort()
        self.references.abort()
        self.log.abort()

    def close(self, split: str) -> Dict:
        """Close the reference files and the skip report; returns their
        entries of the split's report."""
        report = self.references.close(split)
        report.update(self.log.close())
        return report


class SplitCounts:
    """The counts of a split's report, line by line."""

    def __init__(self, path: str):
        self.path = path
        self.counts = Counter()
        self.skipped = Counter()
        self.longest = 0

    def line(self) -> None:
        """A line read: a cluster or a refused line."""
        self.counts["lines"] += 1

    def skip(self, error: InputFormatError) -> None:
        """A line skipped with ``--skip-bad``, counted by its reason."""
        self.skipped[error.reason] += 1

    def add(self, encoded: EncodedCluster, dropped: int, extra_rows: Counter) -> None:
        """A written cluster: ``dropped`` the empty documents left out of it,
        ``extra_rows`` what its further references' rows add
        (:meth:`SplitFiles.write`)."""
        counts = self.counts
        counts["empty_documents_dropped"] += dropped
        counts["clusters"] += 1
        counts["documents"] += encoded.num_documents
        counts["paragraphs"] += encoded.num_paragraphs
        counts["sentences"] += encoded.num_sentences
        counts["source_tokens"] += len(encoded.tokens)
        counts["target_tokens"] += len(encoded.target)
        counts["unknown_tokens"] += encoded.num_unknown
        counts["empty_summaries"] += int(not encoded.summary)
        counts["bidi_controls_removed"] += encoded.bidi_controls_removed
        self.longest = max(self.longest, len(encoded.tokens))
        counts.update(extra_rows)

    def report(self) -> Dict:
        """The split's report (before the reference and skip-report entries)."""
        counts, clusters = self.counts, self.counts["clusters"]
        # bidirectional-text controls the "clean" normalisation removed (mdsfair.preprocess.structure.BIDI_CONTROLS):
        # an entry only where there were some
        removed = {"bidi_controls_removed": counts["bidi_controls_removed"]} if counts["bidi_controls_removed"] else {}
        return {
            "input": self.path,
            "lines": counts["lines"],
            "clusters": clusters,
            "examples": clusters + counts["examples"],
            "documents": counts["documents"],
            "paragraphs": counts["paragraphs"],
            "sentences": counts["sentences"],
            "source_tokens": counts["source_tokens"],
            "target_tokens": counts["target_tokens"],
            "unknown_tokens": counts["unknown_tokens"],
            "source_tokens_max": int(self.longest),
            # the mean of the per-cluster lengths, as a correctly rounded quotient
            "source_tokens_mean": counts["source_tokens"] / clusters if clusters else 0.0,
            "skipped": dict(self.skipped),
            "empty_documents_dropped": counts["empty_documents_dropped"],
            "empty_summaries": counts["empty_summaries"],
            "truncated": 0,
            **removed,
        }


def write_rows(
    args: PreprocessConfig,
    results: Iterable[Tuple[int, LineResult]],
    files: SplitFiles,
    counts: SplitCounts,
    progress: Progress,
) -> float:
    """Write the encoded clusters of ``results`` in input order into
    ``files``; a refused line is raised, or with ``--skip-bad`` skipped and
    counted. Returns the CPU seconds spent writing."""
    writing = 0.0
    with (
        open(files.prefix + ".ids.txt", "w", encoding="utf-8") as ids_file,
        open(files.prefix + ".summary.txt", "w", encoding="utf-8") as summary_file,
    ):
        for line_number, result in results:
            counts.line()
            if result[0] == "error":
                progress.update(line_number, 0)
                if not args.skip_bad:
                    raise result[1]
                counts.skip(result[1])
                files.log.skipped(result[1])
                continue
            start = time.process_time()
            encoded, dropped = result
            counts.add(encoded, dropped, files.write(encoded, ids_file, summary_file))
            writing += time.process_time() - start
            progress.update(line_number, encoded.num_words)
    return writing


def binarize_split(
    args: PreprocessConfig,
    split: str,
    path: str,
    specs: List[SideDataSpec],
    encode_split: SplitEncoder,
    stage_seconds: Optional[Counter] = None,
) -> Dict:
    """Write one split with ``encode_split``; returns its report. The CPU
    seconds spent writing are added to ``stage_seconds["binarization"]``."""
    files = SplitFiles(args, split, path, specs, encode_split.subword_manifest)
    counts = SplitCounts(path)
    progress = Progress(split, path, args.no_progress_bar)
    try:
        writing = write_rows(args, encode_split(path, requires_summary(args, split)), files, counts, progress)
    except BaseException:
        files.abort()
        raise
    finally:
        progress.close()
    start = time.process_time()
    files.finalize()
    writing += time.process_time() - start
    if stage_seconds is not None:
        stage_seconds["binarization"] += writing
    report = counts.report()
    report.update(files.close(split))
    return report
