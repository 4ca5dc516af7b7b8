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
(:mod:`mdsfair.preprocess.sharding`).

This module is the command: it finds the splits, writes one data-bin
(:func:`mdsfair.preprocess.data_bin_writer.write_data_bin`: the subword model
and ``dict.txt`` from :mod:`mdsfair.preprocess.subword_training`, every split
through :mod:`mdsfair.preprocess.split_writer`, the manifest) or the shards,
and prints the closing report (:mod:`mdsfair.preprocess.reports`).
"""

import argparse
import logging
import os
import sys
from collections import Counter
from typing import Dict, List, Optional

from mdsfair.argument_types import os_error_message
from mdsfair.preprocess.config import PreprocessConfig
from mdsfair.preprocess.data_bin_writer import resolve_text_normalization, with_destdir, write_data_bin
from mdsfair.preprocess.destdir import DestinationInUseError, DestinationRun
from mdsfair.preprocess.reports import format_report, format_shard_summary, format_vocabulary
from mdsfair.preprocess.sharding import preprocess_shards
from mdsfair.preprocess.side_data import SIDE_DATA_PRODUCERS, import_producers
from mdsfair.preprocess.structure import InputFormatError


def _split_paths(args) -> Dict[str, str]:
    """The raw JSONL file of each split by name: the ``*.jsonl`` files of
    ``--input-dir`` and every ``--split NAME=PATH``, each checked to exist."""
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


def get_parser() -> argparse.ArgumentParser:
    """``mdsfair-preprocess``'s parser, built from :class:`PreprocessConfig`
    (the flags of the side-data producers registered so far included)."""
    return PreprocessConfig.parser()


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
        reports = write_data_bin(work, splits, stage_seconds)
        args.vocabulary_report = work.vocabulary_report
        destination.commit(work.manifest)  # the manifest last, whole or not at all
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
        print(
            f"mdsfair-preprocess: interrupted; nothing written to {args.destdir} (partial output removed, the "
            "directory is as it was before the run)",
            file=sys.stderr,
        )
        raise SystemExit(130)
    print(format_report(reports))
    vocabulary = getattr(args, "vocabulary_report", None)
    if vocabulary:
        print(format_vocabulary(vocabulary))
    if getattr(args, "shards", None) is not None:
        print(format_shard_summary(args, reports))
    return reports


def cli_main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``mdsfair-preprocess``; returns the exit status."""
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
