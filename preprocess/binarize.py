"""``mdsfair-preprocess``: raw JSONL splits -> a fairseq data-bin directory.

One command cleans and splits every cluster into documents, paragraphs and
sentences, encodes subwords (SentencePiece trained here, or GPT-2 BPE from
local files with a given ``dict.txt``), computes the requested side data and
writes fairseq mmap indexed datasets:

==========================  =================================================
``dict.txt``                shared source/target dictionary
``{split}.source``          source token ids, all documents concatenated
``{split}.target``          summary token ids
``{split}.doc/para/sent``   per source token: document, paragraph and
                            sentence index within the cluster (0-based,
                            paragraphs and sentences numbered across documents)
``{split}.{side}``          side data (see :mod:`mdsfair.data.side_data`)
``{split}.ids.txt``         the cluster id of each example
``{split}.summary.txt``     the cleaned reference summary of each example
``mdsfair.json``            manifest: subword model, side data, reports
==========================  =================================================

No special tokens are stored; the task adds ``<s>`` / ``</s>`` as the model
needs. With ``--title-document`` the cluster's title is stored as its first
document (one paragraph), so every model reads the title and the
paragraphs, as WikiSum inputs are built (Liu et al. 2018; Liu & Lapata 2019,
Section 4: "the title and L' = 24 paragraphs"). Nothing is truncated here (the
task applies and counts truncation); bad lines fail with file and line, or are skipped and counted with
``--skip-bad``. A closing report lists clusters, documents, paragraphs,
sentences, tokens, skipped lines by reason.

The command's flags, defaults and help are the fields of
:class:`mdsfair.preprocess.config.PreprocessConfig`, from which its parser is
built (:func:`get_parser`). Every cluster is encoded by
:class:`mdsfair.preprocess.pipeline.ClusterEncoder`, the encoder the hub uses
too. The input is streamed: the main process reads raw lines in chunks of
``--chunk-size``, hands at most four chunks per worker to ``--workers``
forked processes (:class:`mdsfair.preprocess.worker_pool.OrderedWorkerPool`:
one pool and one feed of chunks for all splits, so no worker waits at the end
of a split) and writes the clusters in
input order as they come back one by one, so memory does not grow with the
input and the progress bar (total from a line count) advances per cluster,
with words/s and an ETA. A worker encodes a chunk's clusters in order but
tells the side-data producers the whole chunk first, so spaCy parses the
chunk's sentences as one stream.

With ``--shards N`` the training clusters are dealt round-robin into N
data-bins ``DESTDIR/shard0`` ... ``DESTDIR/shard{N-1}`` for fairseq's
epoch-sharded training (``fairseq-train DESTDIR/shard0:DESTDIR/shard1:...``
reads shard ``(epoch - 1) % N`` in each epoch): one SentencePiece model and
``dict.txt``, trained once on the whole training split, in every shard; the
other splits (valid, test) only in ``shard0``, where fairseq reads them
(:func:`preprocess_shards`).
"""
from __future__ import annotations  # fairseq's Dictionary only in annotations: imported when used

import argparse
import contextlib
import copy
import logging
import os
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple

import numpy as np
from tqdm import tqdm

from mdsfair.argument_types import os_error_message
from mdsfair.data.manifest import MANIFEST_VERSION, STRUCTURE_STREAMS, default_text_normalization
from mdsfair.data.primera_layout import source_layout_manifest_entry
from mdsfair.data.side_data import SideDataSpec
from mdsfair.preprocess.accounting import SplitLog, check_training_split_has_a_cluster, sentencepiece_size_report
from mdsfair.preprocess.config import PreprocessConfig
from mdsfair.preprocess.destdir import (
    DestinationInUseError,
    DestinationRun,
    copy_into,
    finish_destdir,
    refuse_unusable_destination,
)
from mdsfair.preprocess.interrupts import sigint_recorded
from mdsfair.preprocess.pipeline import ClusterEncoder
from mdsfair.preprocess.references import MultiReferenceWriter, training_references
from mdsfair.preprocess.side_data import SIDE_DATA_PRODUCERS, add_producer_args, import_producers
from mdsfair.preprocess.structure import InputFormatError, clean_text, iter_raw_lines, split_paragraphs
from mdsfair.preprocess.subword import (
    SPM_MODEL_NAME,
    GPT2BPEEncoder,
    SentencePieceEncoder,
    dictionary_from_sentencepiece,
    train_sentencepiece,
)
from mdsfair.preprocess.worker_pool import LineResult, OrderedWorkerPool, call_in_child, encode_lines
from mdsfair.raw_contract import cluster_references, decode_cluster_line

if TYPE_CHECKING:
    from fairseq.data import Dictionary

logger = logging.getLogger("mdsfair.preprocess")


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


# ------------------------------------------------------------- the command


def _split_paths(args) -> Dict[str, str]:
    splits: Dict[str, str] = {}
    if args.input_dir:
        for name in os.listdir(args.input_dir):
            if name.endswith(".jsonl"):
                splits[name[: -len(".jsonl")]] = os.path.join(args.input_dir, name)
    for spec in args.split or []:
        if "=" not in spec:
            raise SystemExit(f"--split expects NAME=PATH, got {spec!r}")
        name, path = spec.split("=", 1)
        splits[name] = path
    if not splits:
        raise SystemExit("no input: give --input-dir with *.jsonl files or --split NAME=PATH")
    for name, path in splits.items():
        if not os.path.exists(path):
            raise SystemExit(f"split {name!r}: file not found: {path}")
    return splits


def _training_texts(path: str, lowercase: bool, multi_reference: str = "first"):
    """Paragraphs and the training references of the training split, for
    SentencePiece, of the lines the raw contract accepts
    (:func:`mdsfair.raw_contract.decode_cluster_line`: valid JSON of the right
    types, no lone surrogate, which SentencePiece's C++ code cannot take: it
    failed with a pybind11 traceback). A refused line is left out here and
    reported with file and line by the binarization pass (skipped and
    counted with ``--skip-bad``); this generator runs inside SentencePiece's
    trainer, which would turn an exception raised here into its own."""
    for line_number, raw in iter_raw_lines(path):
        try:
            obj = decode_cluster_line(raw, path, line_number, require_references=False)
        except InputFormatError:
            continue
        summaries = [clean_text(s, lowercase) for s in training_references(cluster_references(obj), multi_reference)]
        for document in obj["documents"]:
            yield from split_paragraphs(clean_text(document, lowercase))
        yield from summaries


def prepare_subwords(args, splits: Dict[str, str]) -> Dict[str, str]:
    """Train or copy the subword model and write ``dict.txt``; returns the
    subword manifest."""
    from fairseq.data import Dictionary

    dest = args.destdir
    if args.subword == "sentencepiece":
        spm_path = os.path.join(dest, SPM_MODEL_NAME)
        if args.spm_model:
            copy_into(args.spm_model, spm_path)
        else:
            if args.spm_train_split not in splits:
                raise SystemExit(
                    f"cannot train SentencePiece: no split {args.spm_train_split!r} (have {sorted(splits)}); "
                    "give --spm-model or --spm-train-split"
                )
            check_training_split_has_a_cluster(splits[args.spm_train_split], args)  # FILE:LINE before sentencepiece
            logger.info("training SentencePiece (asking for %d pieces) on %s", args.vocab_size, splits[args.spm_train_split])
            prefix = os.path.join(dest, SPM_MODEL_NAME[: -len(".model")])
            call_in_child(
                train_sentencepiece,
                _training_texts(splits[args.spm_train_split], args.lowercase, args.multi_reference),
                prefix,
                vocab_size=args.vocab_size,
                model_type=args.spm_model_type,
                seed=args.seed,
            )
        encoder = SentencePieceEncoder(spm_path)
        if args.dict:
            dictionary = Dictionary.load(args.dict)
            check_sentencepiece_dictionary(encoder, dictionary, args.dict)
        else:
            dictionary = dictionary_from_sentencepiece(encoder)
        if not args.spm_model:
            args.vocabulary_report = sentencepiece_size_report(
                args.vocab_size, encoder.processor.get_piece_size(), len(dictionary))
    else:
        missing = [f for f in ("gpt2_encoder_json", "gpt2_vocab_bpe", "dict") if not getattr(args, f)]
        if missing:
            raise SystemExit("--subword gpt2 needs " + ", ".join("--" + m.replace("_", "-") for m in missing))
        copy_into(args.gpt2_encoder_json, os.path.join(dest, "encoder.json"))
        copy_into(args.gpt2_vocab_bpe, os.path.join(dest, "vocab.bpe"))
        encoder = GPT2BPEEncoder(os.path.join(dest, "encoder.json"), os.path.join(dest, "vocab.bpe"))
        dictionary = Dictionary.load(args.dict)
    dictionary.save(os.path.join(dest, "dict.txt"))
    return encoder.manifest()


def check_sentencepiece_dictionary(encoder: SentencePieceEncoder, dictionary: Dictionary, path: str) -> None:
    """A ``--dict`` given with a SentencePiece model (e.g. the one
    ``mdsfair-import hiersumm`` writes) must have an entry for every ordinary
    and byte piece; user-defined pieces without an entry of their own (the
    hiersumm specials ``<S>`` ``</S>`` ``<PAD>``, which the import maps onto
    ``<s>`` ``</s>`` ``<pad>``) are listed in the log: a literal occurrence of
    one in the text becomes ``<unk>``."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    with open(encoder.model_path, "rb") as f:
        proto.ParseFromString(f.read())
    kinds = proto.SentencePiece.Type
    missing = [p.piece for p in proto.pieces if p.type in (kinds.NORMAL, kinds.BYTE) and p.piece not in dictionary.indices]
    if missing:
        raise ValueError(
            f"{path}: {len(missing)} pieces of {encoder.model_path} have no entry, e.g. {missing[:5]}; "
            "give the dict.txt that belongs to this SentencePiece model"
        )
    unlisted = [p.piece for p in proto.pieces if p.type == kinds.USER_DEFINED and p.piece not in dictionary.indices]
    if unlisted:
        logger.info("%s: user-defined pieces without an entry of their own (read as <unk> if they occur in the "
                    "text): %s", path, unlisted)


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


def binarize_split(
    args, split: str, path: str, specs: List[SideDataSpec], encode_split: "SplitEncoder",
    stage_seconds: Optional[Counter] = None,
) -> Dict:
    """Write one split with ``encode_split``; returns its report. The CPU
    seconds spent writing are added to ``stage_seconds["binarization"]``."""
    from fairseq.data import Dictionary

    from mdsfair.data.indexed import ArrayWriter, token_dtype

    dest = args.destdir
    dictionary = Dictionary.load(os.path.join(dest, "dict.txt"))
    prefix = os.path.join(dest, split)
    writers = {
        "source": ArrayWriter(prefix + ".source", token_dtype(len(dictionary))),
        "target": ArrayWriter(prefix + ".target", token_dtype(len(dictionary))),
    }
    for stream in STRUCTURE_STREAMS:
        writers[stream] = ArrayWriter(f"{prefix}.{stream}", np.int32)
    for spec in specs:
        writers[spec.name] = ArrayWriter(f"{prefix}.{spec.name}", spec.numpy_dtype)
    require_summary = requires_summary(args, split)
    split_log = SplitLog(prefix, split, path, args.skip_bad)
    references = MultiReferenceWriter(
        prefix, args.multi_reference == "each" and split in args.train_splits, dest, encode_split.subword_manifest)
    counts = Counter()
    skipped = Counter()
    longest = 0
    writing = 0.0
    progress = Progress(split, path, args.no_progress_bar)
    try:
        with open(prefix + ".ids.txt", "w", encoding="utf-8") as ids_file, open(
            prefix + ".summary.txt", "w", encoding="utf-8"
        ) as summary_file:
            for line_number, result in encode_split(path, require_summary):
                counts["lines"] += 1
                if result[0] == "error":
                    progress.update(line_number, 0)
                    if not args.skip_bad:
                        raise result[1]
                    skipped[result[1].reason] += 1
                    split_log.skipped(result[1])
                    continue
                start = time.process_time()
                encoded, dropped = result
                counts["empty_documents_dropped"] += dropped
                counts["clusters"] += 1
                counts["documents"] += encoded.num_documents
                counts["paragraphs"] += encoded.num_paragraphs
                counts["sentences"] += encoded.num_sentences
                counts["source_tokens"] += len(encoded.tokens)
                counts["target_tokens"] += len(encoded.target)
                counts["unknown_tokens"] += encoded.num_unknown
                counts["empty_summaries"] += int(not encoded.summary)
                longest = max(longest, len(encoded.tokens))
                writers["source"].add(encoded.tokens)
                writers["target"].add(encoded.target)
                writers["doc"].add(encoded.doc_ids)
                writers["para"].add(encoded.para_ids)
                writers["sent"].add(encoded.sent_ids)
                for spec in specs:
                    writers[spec.name].add(encoded.side_data[spec.name])
                ids_file.write(encoded.id.replace("\n", " ") + "\n")
                summary_file.write(encoded.summary.replace("\n", " ") + "\n")
                split_log.written(encoded)
                counts.update(references.add(encoded, writers, [spec.name for spec in specs], ids_file, summary_file))
                writing += time.process_time() - start
                progress.update(line_number, encoded.num_words)
    except BaseException:
        for writer in writers.values():  # the staging folder is removed; close its files first
            writer.abort()
        references.abort()
        split_log.abort()
        raise
    finally:
        progress.close()
    start = time.process_time()
    for writer in writers.values():
        writer.finalize()
    writing += time.process_time() - start
    if stage_seconds is not None:
        stage_seconds["binarization"] += writing
    clusters = counts["clusters"]
    report = {
        "input": path,
        "lines": counts["lines"],
        "clusters": clusters,
        "examples": clusters + counts["examples"],
        "documents": counts["documents"],
        "paragraphs": counts["paragraphs"],
        "sentences": counts["sentences"],
        "source_tokens": counts["source_tokens"],
        "target_tokens": counts["target_tokens"],
        "unknown_tokens": counts["unknown_tokens"],
        "source_tokens_max": int(longest),
        # the mean of the per-cluster lengths, as a correctly rounded quotient
        "source_tokens_mean": counts["source_tokens"] / clusters if clusters else 0.0,
        "skipped": dict(skipped),
        "empty_documents_dropped": counts["empty_documents_dropped"],
        "empty_summaries": counts["empty_summaries"],
        "truncated": 0,
    }
    report.update(references.close(split))
    report.update(split_log.close())
    return report


def get_parser() -> argparse.ArgumentParser:
    """``mdsfair-preprocess``'s parser, built from :class:`PreprocessConfig`
    (the flags of the side-data producers registered so far included)."""
    return PreprocessConfig.parser()


def format_report(reports: Dict[str, Dict]) -> str:
    """The closing report as a table, one row per split."""
    columns = [
        ("clusters", "clusters"), ("documents", "docs"), ("paragraphs", "paras"),
        ("sentences", "sents"), ("source_tokens", "src tok"), ("target_tokens", "tgt tok"),
        ("source_tokens_max", "src max"), ("unknown_tokens", "unk"),
    ]
    width = max([10] + [len(split) + 1 for split in reports if "/" in split])  # shard{k}/{split}: --shards
    header = f"{'split':<{width}}" + "".join(f"{title:>11}" for _, title in columns) + "  skipped / dropped"
    lines = [header, "-" * len(header)]
    for split, report in reports.items():
        row = f"{split:<{width}}" + "".join(f"{report[key]:>11,}" for key, _ in columns)
        skipped = ", ".join(f"{k}={v}" for k, v in sorted(report["skipped"].items())) or "none"
        row += f"  skipped: {skipped}; empty documents dropped: {report['empty_documents_dropped']}"
        row += f"; empty summaries: {report['empty_summaries']}"
        lines.append(row)
    lines.append("truncated: 0 (preprocessing keeps everything; the task truncates and counts)")
    lines.extend(split_notes(reports))
    return "\n".join(lines)


def split_notes(reports: Dict[str, Dict]) -> List[str]:
    """Closing-report lines on rows per reference, kept references, skip
    reports and repeated ids."""
    notes = []
    for split, report in reports.items():
        if report.get("examples", report["clusters"]) != report["clusters"]:
            notes.append(f"{split}: {report['examples']:,} examples from {report['clusters']:,} clusters "
                         "(--multi-reference each: one per reference)")
        if report.get("reference_files"):
            notes.append(f"{split}: {report['multi_reference_clusters']:,} clusters with several references, "
                         f"kept in {', '.join(report['reference_files'])}")
        if report.get("skip_report"):
            notes.append(f"{split}: skipped lines and dropped documents listed in {report['skip_report']}")
        if report.get("duplicate_ids"):
            notes.append(f"{split}: {len(report['duplicate_ids']):,} cluster ids occur more than once "
                         "(listed in mdsfair.json)")
    return notes


def producer_arguments(args: PreprocessConfig) -> Dict[str, object]:
    """The values of every side-data producer flag, recorded in the manifest
    so that inference (the hub) builds side data exactly as preprocessing did."""
    parser = argparse.ArgumentParser()
    # by producer name, not registration order (which depends on what imported the producers first)
    add_producer_args(parser, [SIDE_DATA_PRODUCERS[name] for name in sorted(SIDE_DATA_PRODUCERS)])
    return {action.dest: getattr(args, action.dest) for action in parser._actions if action.dest != "help"}


def with_destdir(args: PreprocessConfig, destdir: str) -> PreprocessConfig:
    """A copy of ``args`` writing into ``destdir`` (a staging folder, a shard);
    the producers' flags are shared, ``args`` is left as it is."""
    work = copy.copy(args)
    work.destdir = destdir
    return work


def preprocess(args: PreprocessConfig, stage_seconds: Optional[Counter] = None) -> Dict[str, Dict]:
    """Run the whole pipeline; returns the per-split reports. CPU seconds per
    stage (structure, which includes reading; subwords; side_data; binarization),
    summed over processes, are added to ``stage_seconds`` when given."""
    import_producers()
    unknown = [name for name in args.side_data if name not in SIDE_DATA_PRODUCERS]
    if unknown:
        raise SystemExit(f"unknown side data {unknown}; available: {sorted(SIDE_DATA_PRODUCERS)}")
    resolve_text_normalization(args)
    splits = _split_paths(args)
    if getattr(args, "shards", None) is not None:
        return preprocess_shards(args, splits, stage_seconds)
    # Locks --destdir, refuses it when in use; every file goes to a staging folder
    # that is moved in only when the run succeeded (preprocess/destdir.py).
    with DestinationRun(args) as destination:
        work = with_destdir(args, destination.staging)
        reports = _preprocess_into(work, splits, stage_seconds)
        args.vocabulary_report = work.vocabulary_report
        destination.commit(work.manifest)  # the manifest last, whole or not at all
    return reports


def resolve_text_normalization(args: PreprocessConfig) -> None:
    """``--text-normalization``: the subword model's default when not given
    (:func:`mdsfair.data.manifest.default_text_normalization`); ``whitespace``
    with SentencePiece is refused (its model is trained on mdsfair's cleaned
    text and starts every sentence as a new word)."""
    if getattr(args, "text_normalization", None) is None:
        args.text_normalization = default_text_normalization(args.subword)
    elif args.subword == "sentencepiece" and args.text_normalization != "clean":
        raise ValueError(
            f"--text-normalization {args.text_normalization} is for the byte-level BPE of an imported checkpoint "
            "(--subword gpt2); SentencePiece is trained on mdsfair's cleaned text and starts every sentence as a "
            "new word: use --text-normalization clean (its default)")


def check_source_layout_dictionary(args: PreprocessConfig) -> None:
    """``--source-layout primera`` with a ``--dict``: that file must hold
    ``<doc-sep>`` (checked before any subword or encoding work)."""
    if getattr(args, "source_layout", None) == "primera" and args.dict:
        from fairseq.data import Dictionary

        source_layout_manifest_entry("primera", Dictionary.load(args.dict), args.dict)


def recorded_layout(args: PreprocessConfig) -> Optional[Dict[str, object]]:
    """The manifest's ``source_layout`` entry for ``--source-layout``, its
    ``<doc-sep>`` id that of the ``dict.txt`` just written (None when the
    option is not given)."""
    if getattr(args, "source_layout", None) is None:
        return None
    from fairseq.data import Dictionary

    written = os.path.join(args.destdir, "dict.txt")
    described = args.dict or "the dict.txt built from the SentencePiece model (give --dict)"
    return source_layout_manifest_entry(args.source_layout, Dictionary.load(written), described)


#: The name of shard ``k``'s data-bin inside ``--destdir`` with ``--shards``
#: (as fairseq's own sharded data-bins are named: ``data-bin/shard0``, ...).
SHARD_NAME = "shard{}"


def lines_of_shard(lines: Iterator[Tuple[int, bytes]], index: int, count: int) -> Iterator[Tuple[int, bytes]]:
    """The raw lines of shard ``index`` of ``count``: the non-blank lines
    ``index``, ``index + count``, ``index + 2 count``, ... (round-robin, so
    every cluster lands in exactly one shard and the shards differ in size by
    at most one cluster, however the input is ordered). Line numbers stay
    those of the input file, so errors name the file's own lines."""
    for position, item in enumerate(lines):
        if position % count == index:
            yield item


def shard_directories(destdir: str, count: int) -> List[str]:
    """The data-bins ``--shards count`` writes, in epoch order."""
    return [os.path.join(destdir, SHARD_NAME.format(index)) for index in range(count)]


def count_clusters(path: str) -> int:
    """Non-blank lines of a raw JSONL split (what :func:`lines_of_shard` deals out)."""
    return sum(1 for _ in iter_raw_lines(path))


def preprocess_shards(args: PreprocessConfig, splits: Dict[str, str], stage_seconds: Optional[Counter] = None
                      ) -> Dict[str, Dict]:
    """``--shards N``: write N data-bins for fairseq's epoch-sharded training.

    Every shard folder is held as a ``--destdir`` is (lock, ownership check,
    staging folder; :class:`DestinationRun`), all of them from the start, so
    a folder in use is refused before any work. Shard 0 is written first: it
    trains the subword model on the whole training split (or copies the
    given one) and gets every split that is not a training split; shards
    1 ... N-1 get their share of the training splits, encoded with shard 0's
    SentencePiece model and ``dict.txt`` (byte-identical copies). Only when
    every shard is complete are they moved into place, one after the other.
    Returns the reports keyed ``shard{k}/{split}``; ``args.shard_data`` is the
    ``os.pathsep``-joined DATA path for fairseq-train."""
    count = args.shards
    if count < 1:
        raise ValueError(f"--shards must be at least 1, got {count}")
    if os.pathsep in args.destdir:
        raise ValueError(
            f"--destdir {args.destdir!r} contains {os.pathsep!r}, which fairseq reads as the separator of epoch "
            f"shards: the DATA path {os.pathsep.join(shard_directories(args.destdir, count))!r} could not be read "
            f"back; choose a --destdir without {os.pathsep!r}"
        )
    refuse_unusable_destination(args.destdir)
    sharded = sorted(split for split in splits if split in args.train_splits)
    if not sharded:
        raise ValueError(f"--shards {count}: no training split to shard (splits {sorted(splits)}, --train-splits "
                         f"{' '.join(args.train_splits)})")
    for split in sharded:
        clusters = count_clusters(splits[split])
        if clusters < count:
            raise ValueError(f"--shards {count}: {splits[split]} (split {split!r}) has {clusters} clusters, fewer "
                             "than the shards; every shard needs at least one")
    directories = shard_directories(args.destdir, count)
    created = not os.path.isdir(args.destdir)
    os.makedirs(args.destdir, exist_ok=True)
    reports: Dict[str, Dict] = {}
    try:
        with contextlib.ExitStack() as held:
            runs = [held.enter_context(DestinationRun(with_destdir(args, directory))) for directory in directories]
            works = []
            for index, destination in enumerate(runs):
                work = with_destdir(args, destination.staging)
                work.shard_selection = {splits[split]: (index, count) for split in sharded}
                shard_splits = dict(splits)
                if index > 0:  # the training splits' share; the shared subword model and dictionary of shard 0
                    shard_splits = {split: splits[split] for split in sharded}
                    if args.subword == "sentencepiece":
                        work.spm_model = os.path.join(runs[0].staging, SPM_MODEL_NAME)
                        work.dict = os.path.join(runs[0].staging, "dict.txt")
                logger.info("--shards %d: writing shard %d (%s)", count, index, directories[index])
                for split, report in _preprocess_into(work, shard_splits, stage_seconds).items():
                    reports[f"{SHARD_NAME.format(index)}/{split}"] = report
                    if split in sharded and report["clusters"] == 0:
                        raise ValueError(f"--shards {count}: shard {index} got no cluster of {splits[split]} (split "
                                         f"{split!r}; its lines were skipped as bad): use fewer shards")
                work.manifest["shard"] = {
                    "index": index, "count": count, "sharded_splits": sharded,
                    "data": os.pathsep.join(os.path.abspath(directory) for directory in directories),
                }
                if index > 0 and works[0].vocabulary_report is not None:  # the one shared model's report
                    work.manifest["vocabulary"] = works[0].vocabulary_report
                works.append(work)
            args.vocabulary_report = works[0].vocabulary_report
            with sigint_recorded() as interrupted:  # a Ctrl-C waits until every shard is in place
                for destination, work in zip(runs, works):
                    destination.commit(work.manifest)  # each shard's manifest last, whole or not at all
            if interrupted:
                logger.warning("Ctrl-C came while the finished shards were being moved into place; they were "
                               "completed first")
    except BaseException:
        if created and os.path.isdir(args.destdir) and not os.listdir(args.destdir):
            os.rmdir(args.destdir)
        raise
    args.shard_data = os.pathsep.join(directories)
    args.sharded_splits = sharded
    others = sorted(name for name in os.listdir(args.destdir)
                    if name.startswith("shard") and os.path.join(args.destdir, name) not in directories)
    if others:
        logger.warning("--shards %d: %s also holds %s, not part of this run's DATA path; left as they are",
                       count, args.destdir, ", ".join(others))
    return reports


def format_shard_summary(args: PreprocessConfig, reports: Dict[str, Dict]) -> str:
    """The closing lines of a ``--shards`` run: clusters per shard of each
    training split, where the other splits went, the DATA path to train on."""
    count, first = args.shards, SHARD_NAME.format(0)
    lines = [f"{count} shard(s) in {args.destdir}, one dict.txt and subword model in each:"]
    for split in args.sharded_splits:
        parts = [reports[f"{SHARD_NAME.format(index)}/{split}"]["clusters"] for index in range(count)]
        lines.append(f"  {split}: {sum(parts):,} clusters = " + " + ".join(
            f"{part:,} ({SHARD_NAME.format(index)})" for index, part in enumerate(parts)))
    others = [key.split("/", 1)[1] for key in reports
              if key.startswith(first + "/") and key.split("/", 1)[1] not in args.sharded_splits]
    if others:
        lines.append(f"  {', '.join(others)}: in {first} only (fairseq reads them from the first shard)")
    lines.append(f"DATA for fairseq-train / mdsfair-train (epoch e reads shard (e-1) % {count}): {args.shard_data}")
    return "\n".join(lines)


def _preprocess_into(args: PreprocessConfig, splits: Dict[str, str], stage_seconds: Optional[Counter]) -> Dict[str, Dict]:
    """The pipeline, writing into ``args.destdir`` (the staging folder);
    leaves the manifest, its ``files`` list filled in, in ``args.manifest``."""
    args.vocabulary_report = None
    resolve_text_normalization(args)
    check_source_layout_dictionary(args)  # before SentencePiece and encoding: a missing <doc-sep> fails at once
    subword_manifest = prepare_subwords(args, splits)
    source_layout = recorded_layout(args)
    specs = [SIDE_DATA_PRODUCERS[name].spec for name in args.side_data]
    reports = {}
    encode_split = SplitEncoder(args, args.destdir, subword_manifest)
    failed = True
    try:
        order = sorted(splits, key=lambda s: (s not in args.train_splits, s))
        encode_split.plan([(splits[split], requires_summary(args, split)) for split in order])
        for split in order:
            reports[split] = binarize_split(args, split, splits[split], specs, encode_split, stage_seconds)
        failed = False
    finally:
        encode_split.close(terminate=failed)
        if stage_seconds is not None:
            stage_seconds.update(encode_split.stage_seconds)
    manifest = {
        "format": "mdsfair-binarized",
        "version": MANIFEST_VERSION,
        "dictionary": "dict.txt",
        "subword": subword_manifest,
        "sentence_splitter": args.sentence_splitter,
        "lowercase": args.lowercase,
        "title_document": args.title_document,
        "text_normalization": args.text_normalization,
        "side_data": {spec.name: spec.to_json() for spec in specs},
        "side_data_args": producer_arguments(args),
        "structure": list(STRUCTURE_STREAMS),
        "splits": reports,
    }
    if args.vocabulary_report is not None:
        manifest["vocabulary"] = args.vocabulary_report
    if source_layout is not None:
        manifest["source_layout"] = source_layout
    args.manifest = finish_destdir(args, manifest)  # lists the files, checking each was written
    return reports


def run(argv: Optional[List[str]] = None) -> Dict[str, Dict]:
    """Parse ``argv``, preprocess, print the closing report and return the
    per-split reports; exits with status 1 and ``FILE:LINE: reason`` on bad input."""
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    import_producers()
    args = PreprocessConfig.parse(argv)
    try:
        reports = preprocess(args)
    except (InputFormatError, FileNotFoundError, OverflowError, ValueError, DestinationInUseError) as e:
        print(f"mdsfair-preprocess: error: {e}", file=sys.stderr)
        raise SystemExit(1)
    except OSError as e:  # a read-only file system, no permission, a full disk: the path and the reason
        print(f"mdsfair-preprocess: error: {os_error_message(e)}", file=sys.stderr)
        raise SystemExit(1)
    except KeyboardInterrupt:
        # preprocess() has removed its staging folder and released the lock on the way out
        print(f"mdsfair-preprocess: interrupted; nothing written to {args.destdir} (partial output removed, the "
              "directory is as it was before the run)", file=sys.stderr)
        raise SystemExit(130)
    print(format_report(reports))
    vocabulary = getattr(args, "vocabulary_report", None)
    if vocabulary:
        print(f"vocabulary: {vocabulary['pieces']:,} SentencePiece pieces (asked for {vocabulary['requested_pieces']:,}); "
              f"dict.txt {vocabulary['dictionary_size']:,} entries")
    if getattr(args, "shards", None) is not None:
        print(format_shard_summary(args, reports))
    return reports


def cli_main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``mdsfair-preprocess``; returns the exit status."""
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
