"""The data-bin folders of a task's ``--data``: fairseq's epoch shards.

fairseq reads ``DATA`` as one or more data-bin folders joined by
``os.pathsep`` (``data-bin1:data-bin2:...``); the task loads a split for
epoch ``e`` from folder ``(e - 1) mod n`` (fairseq loads validation and test
splits as epoch 1, from the first folder) and takes the dictionary and the
subword model from the first folder. The task splits ``DATA``
once (:func:`data_bin_folders`), checks the pieces
(:func:`check_data_paths`) and reads every folder's manifest once, checking
that each shard can be read with the first one's dictionary
(:func:`open_epoch_shards`).
"""

import os
from dataclasses import dataclass
from typing import Dict, List

from fairseq.data import Dictionary

from mdsfair.checkpoints import fingerprints
from mdsfair.data.manifest import read_manifest


@dataclass(frozen=True)
class EpochShard:
    """One data-bin folder of ``--data`` and its manifest (``mdsfair.json``)."""

    folder: str
    manifest: Dict


def data_bin_folders(data: str) -> List[str]:
    """The data-bin folders of ``data``, in order: ``data`` split at
    ``os.pathsep``, empty pieces dropped."""
    return [path for path in data.split(os.pathsep) if path]


def check_data_paths(data: str, paths: List[str]) -> None:
    """fairseq reads ``DATA`` as epoch shards separated by ``os.pathsep``
    (``data-bin1:data-bin2``): a directory whose own name contains ``:`` would
    be split into pieces that do not exist. Refuse that with what to do."""
    missing = [path for path in paths if not os.path.isdir(path)]
    if not missing:
        return
    if len(paths) > 1 and os.path.isdir(data):
        raise ValueError(
            f"data path {data!r} contains {os.pathsep!r}, which fairseq reads as a list of epoch shards "
            f"({', '.join(repr(p) for p in paths)}), and {', '.join(repr(p) for p in missing)} do not exist: "
            f"rename the directory or give a symbolic link to it whose path has no {os.pathsep!r}"
        )
    if len(paths) > 1:
        raise ValueError(
            f"data shards {', '.join(repr(p) for p in missing)} of {data!r} (split at {os.pathsep!r}) do not exist"
        )


def open_epoch_shards(paths: List[str], dictionary: Dictionary, manifest: Dict) -> List[EpochShard]:
    """The epoch shards of ``paths``, each with its manifest (the first
    folder's is ``manifest``, its dictionary ``dictionary``). fairseq reads
    every shard with the first shard's dictionary: every other shard must be
    an mdsfair data-bin with the same dictionary, subword model, source
    layout and side data, or its token ids would be read with the wrong
    vocabulary. A shard that differs is refused, naming it and what differs."""
    shards = [EpochShard(paths[0], manifest)]
    if len(paths) < 2:
        return shards
    first = fingerprints.data_fingerprint(paths[:1], dictionary, manifest)
    for path in paths[1:]:
        shard_manifest = read_manifest(path)
        shard_dictionary = Dictionary.load(os.path.join(path, shard_manifest.get("dictionary", "dict.txt")))
        shard = fingerprints.data_fingerprint([path], shard_dictionary, shard_manifest)
        differences = fingerprints.fingerprint_differences(first, shard)
        if shard_manifest.get("source_layout") != manifest.get("source_layout"):
            differences.append(
                f"source layout {manifest.get('source_layout')} vs {shard_manifest.get('source_layout')}"
            )
        if sorted(shard_manifest.get("side_data", {})) != sorted(manifest.get("side_data", {})):
            differences.append(
                f"side data {sorted(manifest.get('side_data', {}))} vs {sorted(shard_manifest.get('side_data', {}))}"
            )
        if differences:
            raise ValueError(
                f"epoch shard {path} does not match the first shard {paths[0]} ({'; '.join(differences)}): every "
                "shard of data-bin1:data-bin2:... must share one dictionary and subword model "
                "(mdsfair-preprocess --shards N writes such shards)"
            )
        shards.append(EpochShard(path, shard_manifest))
    return shards
