"""The data a model was trained on, as its checkpoint records it: the
fairseq dictionary (its symbols in id order) and the subword model files of
the data-bin; and the check, when a model loads a checkpoint's weights, that
the task building it reads a data-bin with the same ones (token ids would
otherwise mean different text): :class:`DictionaryMismatchError` unless
``--allow-dictionary-mismatch``.
"""

import hashlib
import logging
import os
from typing import Any, Dict, List

from mdsfair.checkpoints.checksums import file_sha256
from mdsfair.checkpoints.record import METADATA_KEY

logger = logging.getLogger(__name__)


class DictionaryMismatchError(RuntimeError):
    """A checkpoint used with a data-bin whose dictionary or subword model differs."""


def dictionary_fingerprint(dictionary) -> Dict[str, Any]:
    """Size and SHA-256 of a fairseq dictionary's symbols in id order (what
    token ids mean; counts are ignored)."""
    digest = hashlib.sha256()
    for symbol in dictionary.symbols:
        digest.update(symbol.encode("utf-8") + b"\n")
    return {"size": len(dictionary), "sha256": digest.hexdigest()}


def subword_fingerprint(data_dir: str, manifest: Dict) -> Dict[str, Any]:
    """SHA-256 of every subword model file the data-bin manifest names
    (``spm.model``, or GPT-2's ``encoder.json`` and ``vocab.bpe``)."""
    subword = manifest.get("subword", {}) or {}
    files = {}
    for key in ("model", "encoder_json", "vocab_bpe"):
        name = subword.get(key)
        if name and os.path.isfile(os.path.join(data_dir, name)):
            files[name] = file_sha256(os.path.join(data_dir, name))
    return {"type": subword.get("type"), "files": files}


def data_fingerprint(data_bins: List[str], dictionary, manifest: Dict) -> Dict[str, Any]:
    """What a model trained on ``data_bins`` depends on: dictionary and subword model."""
    return {
        "data_bins": [os.path.abspath(path) for path in data_bins],
        "dictionary": dictionary_fingerprint(dictionary),
        "subword": subword_fingerprint(data_bins[0], manifest),
    }


def fingerprint_differences(trained: Dict[str, Any], current: Dict[str, Any]) -> List[str]:
    """How the data a checkpoint was trained on differs from ``current``."""
    differences = []
    old_dict, new_dict = trained.get("dictionary", {}), current.get("dictionary", {})
    if old_dict.get("sha256") != new_dict.get("sha256"):
        differences.append(
            f"dictionary: {old_dict.get('size')} symbols (sha256 {str(old_dict.get('sha256'))[:12]}) vs "
            f"{new_dict.get('size')} symbols (sha256 {str(new_dict.get('sha256'))[:12]})"
        )
    old_sub, new_sub = trained.get("subword") or {}, current.get("subword") or {}
    if old_sub.get("files") and new_sub.get("files"):
        if old_sub.get("type") != new_sub.get("type") or old_sub["files"] != new_sub["files"]:

            def describe(sub):
                files = ", ".join(f"{name} sha256 {digest[:12]}" for name, digest in sorted(sub["files"].items()))
                return f"{sub.get('type')} {files}"

            differences.append(f"subword model: {describe(old_sub)} vs {describe(new_sub)}")
    return differences


def check_data_fingerprint(
    trained: Dict[str, Any], current: Dict[str, Any], checkpoint: str, allow_mismatch: bool
) -> None:
    """Raise :class:`DictionaryMismatchError` (or warn, with ``allow_mismatch``)
    when a checkpoint's training data-bin and the current one disagree."""
    differences = fingerprint_differences(trained, current)
    if not differences:
        return
    trained_on = ", ".join(trained.get("data_bins", [])) or "an unrecorded data-bin"
    using = ", ".join(current.get("data_bins", []))
    message = (
        f"checkpoint {checkpoint} was trained on data-bin {trained_on}, but this run uses data-bin {using} "
        f"and they differ ({'; '.join(differences)}): the same token ids would mean different text"
    )
    if allow_mismatch:
        logger.warning("%s; going on because --allow-dictionary-mismatch is set", message)
        return
    raise DictionaryMismatchError(
        message + ". Use the data-bin the model was trained on (or one preprocessed with its dict.txt and "
        "subword model: mdsfair-preprocess --spm-model / --dict), or pass --allow-dictionary-mismatch "
        "(hub: allow_dictionary_mismatch=True) to transfer the vocabulary on purpose."
    )


def dictionary_check_hook(data_fingerprint_of, allow_mismatch_of):
    """A ``register_load_state_dict_pre_hook`` hook: compare the record that
    :func:`mdsfair.checkpoints.fairseq_wrappers.load_checked` attached to a
    loaded model state with the data of the task that built the model
    (``data_fingerprint_of()`` and ``allow_mismatch_of()`` are read at load
    time)."""

    def hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        loaded = local_metadata.get(METADATA_KEY) if prefix == "" else None
        if not loaded or not loaded.get("data"):
            return
        check_data_fingerprint(loaded["data"], data_fingerprint_of(), loaded.get("path", "?"), allow_mismatch_of())

    return hook
