"""``torch.save`` shards of examples (the Hierarchical Transformer's released
WikiSum, nlpyang/hiersumm): the shard files of a split, each loaded without
running code stored in it, one record per example.

A shard is a file that ``torch.load`` turns into a list of examples (their
``src/abstractive/data_loader.py``, ``load_dataset``). It is loaded with
``weights_only=True``: only containers, numbers and strings are rebuilt and
nothing in the file runs. A shard that pickles any other object is refused,
naming the object, unless the user trusts the file and sets
``MDSFAIR_TRUST_CHECKPOINTS=1`` (mdsfair's one switch for full unpickling,
:mod:`mdsfair.checkpoint_loading`): then that shard alone is unpickled fully,
with a warning and a ``shard_unpickled_fully`` note in the report.

Records are located as ``FILE[INDEX]``: the example is ``torch.load(FILE)[INDEX]``
(0-based), so a bad one reads ``WIKI.train.3.pt[17]: missing key: 'tgt_str' ...``.
"""

from __future__ import annotations

import logging
import pickle
import re
from pathlib import Path
from typing import Any, Iterator, List, Sequence

from mdsfair.raw_contract import INVALID_TABLE, WRONG_TYPE, InputFormatError

from ..common import ConversionSession, Record
from .tables import SPLIT_ALIASES

logger = logging.getLogger(__name__)


def shard_files(path: Path, split: str, prefix: str) -> List[Path]:
    """The shards of ``split`` in ``path``, in the order their loader reads them.

    A file is itself. A folder holds hiersumm's ``{prefix}.{split}.N.pt`` (their
    ``glob(data_path + '.' + corpus_type + '.[0-9]*.pt')``), taken in increasing
    ``N`` (their loader sorts the names, which puts ``10`` before ``2``; the
    comment beside it says "by increasing indexes"), or else the single
    ``{prefix}.{split}.pt``. The split is looked for under its aliases
    (``validation`` also finds their ``valid``)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist")
    names = SPLIT_ALIASES.get(split.strip().lower(), (split,))
    for name in names:
        numbered = re.compile(rf"{re.escape(prefix)}\.{re.escape(name)}\.([0-9]+)\.pt\Z")
        found = [(int(match.group(1)), entry) for entry in path.iterdir() if (match := numbered.match(entry.name))]
        if found:
            return [entry for _, entry in sorted(found)]
        single = path / f"{prefix}.{name}.pt"
        if single.is_file():
            return [single]
    raise FileNotFoundError(
        f"{path}: no shard {prefix}.{split}.N.pt or {prefix}.{split}.pt in this folder "
        f"(the names hiersumm's loader reads for -data_path {path / prefix}; --split, --shard-prefix)"
    )


def load_shard(path: Path, session: ConversionSession) -> List[Any]:
    """The list of examples in one shard, loaded with ``weights_only=True``
    (see the module docstring for the one exception). A file ``torch.load``
    cannot read, or whose content is not a list, is fatal: its examples cannot
    be counted, so ``--skip-bad`` cannot get past it."""
    import torch

    from mdsfair.checkpoint_loading import TRUST_ENV, trusted_by_user, unsupported_global

    try:
        examples = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError) as error:
        name = unsupported_global(error)
        if not name:
            raise _unreadable(path, error) from None
        if not trusted_by_user():
            raise InputFormatError.described(
                path,
                None,
                INVALID_TABLE,
                f"the shard pickles {name}, which loading it would have to execute (shards hold lists, "
                f"dicts, numbers and strings, which load with torch's weights_only=True); "
                f"if you trust this file, rerun with {TRUST_ENV}=1 to unpickle it",
                skippable=False,
            ) from None
        logger.warning("%s=1: unpickling %s fully (this runs code stored in the file)", TRUST_ENV, path)
        session.report.notes["shard_unpickled_fully"] += 1
        try:
            examples = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as error_again:  # any failure of torch.load: an unreadable file
            raise _unreadable(path, error_again) from None
    except Exception as error:  # a truncated file, a zip of something else, ...
        raise _unreadable(path, error) from None
    if not isinstance(examples, list):
        raise InputFormatError.described(
            path,
            None,
            WRONG_TYPE,
            f"a shard is a list of examples (what hiersumm's loader iterates), got {type(examples).__name__}",
            skippable=False,
        )
    return examples


def _unreadable(path: Path, error: BaseException) -> InputFormatError:
    return InputFormatError.described(
        path, None, INVALID_TABLE, f"torch.load cannot read it ({type(error).__name__}: {error})", skippable=False
    )


def iter_shard_records(paths: Sequence[Path], session: ConversionSession, split: str, prefix: str) -> Iterator[Record]:
    """Records of the shards of ``split`` under each input (:func:`shard_files`),
    one per example, located as ``FILE[INDEX]``; payload: the example as loaded.
    One shard is in memory at a time."""
    for path in paths:
        for shard in shard_files(path, split, prefix):
            examples = load_shard(shard, session)
            for index, example in enumerate(examples):
                record = session.start_record(f"{shard}[{index}]", None)
                record.payload = example
                yield record
            del examples
