"""``mdsfair-preprocess --shards N``: data-bins for fairseq's epoch-sharded training.

The training clusters are dealt round-robin
(:func:`mdsfair.preprocess.split_writer.lines_of_shard`) into N data-bins
``DESTDIR/shard0`` ... ``DESTDIR/shard{N-1}``; ``fairseq-train
DESTDIR/shard0:DESTDIR/shard1:...`` reads shard ``(epoch - 1) % N`` in each
epoch. One SentencePiece model and ``dict.txt``, trained once on the whole
training split, are in every shard; the other splits (valid, test) only in
``shard0``, where fairseq reads them.
"""

import contextlib
import logging
import os
from collections import Counter
from typing import Dict, List, Optional, Tuple

from mdsfair.preprocess.config import PreprocessConfig
from mdsfair.preprocess.data_bin_writer import with_destdir, write_data_bin
from mdsfair.preprocess.destdir import DestinationRun, refuse_unusable_destination
from mdsfair.preprocess.interrupts import sigint_recorded
from mdsfair.preprocess.structure import iter_raw_lines
from mdsfair.preprocess.subword import SPM_MODEL_NAME

logger = logging.getLogger("mdsfair.preprocess")

#: The name of shard ``k``'s data-bin inside ``--destdir`` with ``--shards``
#: (as fairseq's own sharded data-bins are named: ``data-bin/shard0``, ...).
SHARD_NAME = "shard{}"


def shard_directories(destdir: str, count: int) -> List[str]:
    """The data-bins ``--shards count`` writes, in epoch order."""
    return [os.path.join(destdir, SHARD_NAME.format(index)) for index in range(count)]


def count_clusters(path: str) -> int:
    """Non-blank lines of a raw JSONL split (what
    :func:`~mdsfair.preprocess.split_writer.lines_of_shard` deals out)."""
    return sum(1 for _ in iter_raw_lines(path))


def splits_to_shard(args: PreprocessConfig, splits: Dict[str, str]) -> List[str]:
    """The training splits ``--shards`` deals out, sorted, once the request
    is checked: at least one shard, a ``--destdir`` that can be a DATA path
    and is not in use, and at least one cluster of every training split per
    shard."""
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
        raise ValueError(
            f"--shards {count}: no training split to shard (splits {sorted(splits)}, --train-splits "
            f"{' '.join(args.train_splits)})"
        )
    for split in sharded:
        clusters = count_clusters(splits[split])
        if clusters < count:
            raise ValueError(
                f"--shards {count}: {splits[split]} (split {split!r}) has {clusters} clusters, fewer "
                "than the shards; every shard needs at least one"
            )
    return sharded


def shard_settings(
    args: PreprocessConfig, index: int, splits: Dict[str, str], sharded: List[str], first_staging: str, staging: str
) -> Tuple[PreprocessConfig, Dict[str, str]]:
    """The settings and the splits of shard ``index``, written into
    ``staging``: every split in shard 0 (which trains or copies the subword
    model, in ``first_staging``), only the training splits' share in the
    others, encoded with shard 0's SentencePiece model and ``dict.txt``."""
    work = with_destdir(args, staging)
    work.shard_selection = {splits[split]: (index, args.shards) for split in sharded}
    shard_splits = dict(splits)
    if index > 0:
        shard_splits = {split: splits[split] for split in sharded}
        if args.subword == "sentencepiece":
            work.spm_model = os.path.join(first_staging, SPM_MODEL_NAME)
            work.dict = os.path.join(first_staging, "dict.txt")
    return work, shard_splits


def write_shards(
    args: PreprocessConfig,
    splits: Dict[str, str],
    sharded: List[str],
    runs: List[DestinationRun],
    directories: List[str],
    stage_seconds: Optional[Counter],
) -> Tuple[List[PreprocessConfig], Dict[str, Dict]]:
    """Write every shard into its staging folder, shard 0 first; returns
    each shard's settings (its manifest in ``manifest``) and the reports
    keyed ``shard{k}/{split}``."""
    count = args.shards
    works: List[PreprocessConfig] = []
    reports: Dict[str, Dict] = {}
    for index, destination in enumerate(runs):
        work, shard_splits = shard_settings(args, index, splits, sharded, runs[0].staging, destination.staging)
        logger.info("--shards %d: writing shard %d (%s)", count, index, directories[index])
        for split, report in write_data_bin(work, shard_splits, stage_seconds).items():
            reports[f"{SHARD_NAME.format(index)}/{split}"] = report
            if split in sharded and report["clusters"] == 0:
                raise ValueError(
                    f"--shards {count}: shard {index} got no cluster of {splits[split]} (split "
                    f"{split!r}; its lines were skipped as bad): use fewer shards"
                )
        work.manifest["shard"] = {
            "index": index,
            "count": count,
            "sharded_splits": sharded,
            "data": os.pathsep.join(os.path.abspath(directory) for directory in directories),
        }
        if index > 0 and works[0].vocabulary_report is not None:  # the one shared model's report
            work.manifest["vocabulary"] = works[0].vocabulary_report
        works.append(work)
    return works, reports


def commit_shards(runs: List[DestinationRun], works: List[PreprocessConfig]) -> None:
    """Move every finished shard into place, one after the other, each
    manifest last; a Ctrl-C waits until all of them are in place."""
    with sigint_recorded() as interrupted:
        for destination, work in zip(runs, works):
            destination.commit(work.manifest)  # each shard's manifest last, whole or not at all
    if interrupted:
        logger.warning("Ctrl-C came while the finished shards were being moved into place; they were completed first")


def preprocess_shards(
    args: PreprocessConfig, splits: Dict[str, str], stage_seconds: Optional[Counter] = None
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
    sharded = splits_to_shard(args, splits)
    directories = shard_directories(args.destdir, args.shards)
    created = not os.path.isdir(args.destdir)
    os.makedirs(args.destdir, exist_ok=True)
    try:
        with contextlib.ExitStack() as held:
            runs = [held.enter_context(DestinationRun(with_destdir(args, directory))) for directory in directories]
            works, reports = write_shards(args, splits, sharded, runs, directories, stage_seconds)
            args.vocabulary_report = works[0].vocabulary_report
            commit_shards(runs, works)
    except BaseException:
        if created and os.path.isdir(args.destdir) and not os.listdir(args.destdir):
            os.rmdir(args.destdir)
        raise
    args.shard_data = os.pathsep.join(directories)
    args.sharded_splits = sharded
    others = sorted(
        name
        for name in os.listdir(args.destdir)
        if name.startswith("shard") and os.path.join(args.destdir, name) not in directories
    )
    if others:
        logger.warning(
            "--shards %d: %s also holds %s, not part of this run's DATA path; left as they are",
            args.shards,
            args.destdir,
            ", ".join(others),
        )
    return reports
