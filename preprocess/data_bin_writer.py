"""One data-bin folder, written whole (``mdsfair-preprocess``).

:func:`write_data_bin` writes into a staging folder (``args.destdir`` of a
:func:`with_destdir` copy): the subword model and ``dict.txt``
(:mod:`mdsfair.preprocess.subword_training`), every split in turn, training
splits first (:mod:`mdsfair.preprocess.split_writer`), and the manifest
(:func:`data_bin_manifest`: the subword model, the options inference must
repeat, the side data and every split's report), which
:class:`~mdsfair.preprocess.destdir.DestinationRun` writes last when it moves
the folder into place.
"""

import argparse
import copy
import os
from collections import Counter
from typing import Dict, List, Optional

from mdsfair.data.manifest import MANIFEST_VERSION, STRUCTURE_STREAMS, default_text_normalization
from mdsfair.data.primera_layout import source_layout_manifest_entry
from mdsfair.data.side_data import SideDataSpec
from mdsfair.preprocess.config import PreprocessConfig
from mdsfair.preprocess.destdir import finish_destdir
from mdsfair.preprocess.side_data import SIDE_DATA_PRODUCERS, add_producer_args
from mdsfair.preprocess.split_writer import SplitEncoder, binarize_split, requires_summary
from mdsfair.preprocess.subword_training import prepare_subwords


def with_destdir(args: PreprocessConfig, destdir: str) -> PreprocessConfig:
    """A copy of ``args`` writing into ``destdir`` (a staging folder, a shard);
    the producers' flags are shared, ``args`` is left as it is."""
    work = copy.copy(args)
    work.destdir = destdir
    return work


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
            "new word: use --text-normalization clean (its default)"
        )


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


def producer_arguments(args: PreprocessConfig) -> Dict[str, object]:
    """The values of every side-data producer flag, recorded in the manifest
    so that inference (the hub) builds side data exactly as preprocessing did."""
    parser = argparse.ArgumentParser()
    # by producer name, not registration order (which depends on what imported the producers first)
    add_producer_args(parser, [SIDE_DATA_PRODUCERS[name] for name in sorted(SIDE_DATA_PRODUCERS)])
    return {action.dest: getattr(args, action.dest) for action in parser._actions if action.dest != "help"}


def write_splits(
    args: PreprocessConfig,
    splits: Dict[str, str],
    specs: List[SideDataSpec],
    subword_manifest: Dict[str, str],
    stage_seconds: Optional[Counter],
) -> Dict[str, Dict]:
    """Write every split, training splits first, with one
    :class:`~mdsfair.preprocess.split_writer.SplitEncoder` (its worker pool
    fed all splits' chunks as one stream); returns the reports by split."""
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
    return reports


def data_bin_manifest(
    args: PreprocessConfig,
    subword_manifest: Dict[str, str],
    specs: List[SideDataSpec],
    reports: Dict[str, Dict],
    source_layout: Optional[Dict[str, object]],
) -> Dict:
    """The manifest of the data-bin (``mdsfair.json``; its ``files`` list
    is added when the folder is finished)."""
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
    return manifest


def write_data_bin(args: PreprocessConfig, splits: Dict[str, str], stage_seconds: Optional[Counter]) -> Dict[str, Dict]:
    """The pipeline, writing into ``args.destdir`` (the staging folder);
    leaves the manifest, its ``files`` list filled in, in ``args.manifest``
    and returns the reports by split."""
    args.vocabulary_report = None
    resolve_text_normalization(args)
    check_source_layout_dictionary(args)  # before SentencePiece and encoding: a missing <doc-sep> fails at once
    subword_manifest = prepare_subwords(args, splits)
    source_layout = recorded_layout(args)
    specs = [SIDE_DATA_PRODUCERS[name].spec for name in args.side_data]
    reports = write_splits(args, splits, specs, subword_manifest, stage_seconds)
    manifest = data_bin_manifest(args, subword_manifest, specs, reports, source_layout)
    args.manifest = finish_destdir(args, manifest)  # lists the files, checking each was written
    return reports
