"""The data-bin manifest (``mdsfair.json``) as the task reads it.

``mdsfair-preprocess`` lists every split it wrote under ``splits``; files of
any other split in the directory were written by another run, with another
dictionary (a re-run into the same ``--destdir`` before ``--overwrite``
existed), so the task refuses them instead of loading their token ids with
this run's ``dict.txt``.
"""
import json
import os
from typing import Dict, Optional

MANIFEST_NAME = "mdsfair.json"


class UnlistedSplitError(FileNotFoundError):
    """A split the data-bin's manifest does not list."""


def read_manifest(data_dir: str) -> Dict:
    """The manifest of ``data_dir``; a clear error when there is none."""
    path = os.path.join(data_dir, MANIFEST_NAME)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{data_dir} is not an mdsfair data-bin directory ({MANIFEST_NAME} missing); "
            "create it with mdsfair-preprocess"
        )
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def require_listed_split(data_dir: str, split: str, manifest: Optional[Dict] = None) -> Dict:
    """The manifest entry of ``split`` (its report), or
    :class:`UnlistedSplitError` naming the data-bin, the split, the splits it
    does list and, when the split's files are there, that they are stale."""
    manifest = read_manifest(data_dir) if manifest is None else manifest
    splits = manifest.get("splits") or {}
    if split in splits:
        return splits[split]
    listed = ", ".join(sorted(splits)) or "none"
    stale = os.path.join(data_dir, f"{split}.source.bin")
    if os.path.exists(stale):
        detail = (
            f"{stale} is left over from an earlier mdsfair-preprocess run into this directory and is encoded "
            "with that run's dictionary, not this dict.txt; preprocess the split again (mdsfair-preprocess "
            "--overwrite also removes such files)"
        )
    else:
        detail = "preprocess it with mdsfair-preprocess (--split NAME=PATH) or choose a listed split"
    raise UnlistedSplitError(
        f"{data_dir}: split {split!r} is not listed in {os.path.join(data_dir, MANIFEST_NAME)} "
        f"(listed: {listed}); {detail}"
    )
