"""Checkpoint integrity and provenance: which data a model was trained on, and
whether its weights are the ones that were saved.

What a checkpoint records
-------------------------
A checkpoint that ``fairseq-train`` writes with an mdsfair task
(``multidoc_summarization`` and its subclasses) carries, in fairseq's
``task_state`` (what :meth:`FairseqTask.state_dict` returns; the trainer stores
it in every checkpoint), a record under :data:`RECORD_KEY`::

    {"version": 1,
     "data": {"data_bins": [absolute data-bin paths],
              "dictionary": {"size": 8004, "sha256": "..."},       # symbols in id order
              "subword": {"type": "sentencepiece", "files": {"spm.model": "<sha256>"}}},
     "model_checksum": {"algorithm": "sha256", "tensors": {"<name>": "<sha256>", ...}}}

The checksum is one SHA-256 per tensor of the model state, over its dtype,
shape and bytes as the file stores them (float16 / bfloat16 as float32, as
fairseq's ``move_to_cpu`` writes them), so a changed tensor can be named.

What loading checks
-------------------
Every checkpoint fairseq loads goes through
``fairseq.checkpoint_utils.load_checkpoint_to_cpu`` (``fairseq-generate``, the
hub, ``--restore-file`` / ``--finetune-from-model``, resuming). Registering
mdsfair (:func:`mdsfair.fairseq_patches.patch_load_checkpoint_to_cpu`) wraps it
with :func:`load_checked`:

* a file that is empty, a Git LFS pointer, or that torch cannot read
  (truncated, not a checkpoint) raises :class:`CheckpointFileError` naming the
  file and the likely cause, instead of a bare ``EOFError`` /
  ``invalid load key``;
* a checkpoint with a record has its model tensors verified against the
  checksum; a difference raises :class:`CheckpointIntegrityError` naming the
  file and the tensors. ``MDSFAIR_VERIFY_CHECKPOINTS=0`` turns verification
  off; :func:`stamp` (``python -m mdsfair.checkpoints stamp FILE``) records a
  new checksum after a deliberate edit of the weights (e.g. averaging);
* the record's data fingerprint travels with the model state (in its torch
  ``_metadata`` for the root module) to the model's ``load_state_dict``, where
  the task that built the model compares it with its own data-bin
  (:func:`dictionary_check_hook`): a different dictionary or subword model
  raises :class:`DictionaryMismatchError` naming both data-bins unless
  ``--allow-dictionary-mismatch`` is set.

Checkpoints without a record (stock fairseq / BART releases, older mdsfair
checkpoints) load as before. Every load here runs with torch's
``weights_only=True`` and only the globals of
:mod:`mdsfair.checkpoint_loading` allowed, for that load alone.

Cost
----
Hashing reads every byte of the model state once more (optimizer state is
not hashed), on up to 8 threads. Measured on the 2-core CPU machine of the
tests while it was shared (load average 5.6): a bart_base-sized state (138 M
parameters, 0.55 GB in float32) took 1.4-2.0 s to checksum, against 7.5-8.3 s
for ``torch.save`` of the same state; that is the added time at every save
and every load, proportionally more for bart_large (0.4 B parameters).
``--no-checkpoint-checksum`` (task option) skips it at save time;
``MDSFAIR_VERIFY_CHECKPOINTS=0`` at load time.
"""
import argparse
import collections
import concurrent.futures
import hashlib
import logging
import os
import pickle
import sys
import traceback
import zipfile
from typing import Any, Dict, List, Optional

from mdsfair.checkpoint_loading import UntrustedCheckpointError, call_with_checkpoint_globals, load_checkpoint_file

logger = logging.getLogger(__name__)

#: Key of mdsfair's record in a checkpoint's ``task_state``.
RECORD_KEY = "mdsfair_checkpoint"
RECORD_VERSION = 1
#: Key under which a loaded checkpoint's record reaches the model's
#: ``load_state_dict`` (``state_dict._metadata[""]``).
METADATA_KEY = "mdsfair_checkpoint"
#: Environment variable: ``0`` turns checksum verification off.
VERIFY_ENV = "MDSFAIR_VERIFY_CHECKPOINTS"
LFS_POINTER_PREFIX = b"version https://git-lfs"


class CheckpointFileError(RuntimeError):
    """A checkpoint file that cannot be read (empty, LFS pointer, truncated)."""


class CheckpointIntegrityError(RuntimeError):
    """Model tensors that differ from the checksum saved with them."""


class DictionaryMismatchError(RuntimeError):
    """A checkpoint used with a data-bin whose dictionary or subword model differs."""


# ---------------------------------------------------------------- hashing


def tensor_digest(tensor) -> str:
    """SHA-256 of a tensor's dtype, shape and bytes in the form a fairseq
    checkpoint stores it (float16 / bfloat16 as float32, on the CPU)."""
    import torch

    tensor = tensor.detach()
    if tensor.dtype in (torch.float16, torch.bfloat16):
        tensor = tensor.float()
    tensor = tensor.cpu().contiguous()
    digest = hashlib.sha256(f"{tensor.dtype}:{tuple(tensor.shape)}:".encode("ascii"))
    if tensor.numel():
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def model_checksum(model_state: Dict[str, Any]) -> Dict[str, Any]:
    """Per-tensor SHA-256 of a model state dict (non-tensor entries skipped;
    tensors that share memory are hashed once). Tensors are hashed on up to
    8 threads (hashlib releases the GIL)."""
    import torch

    unique, key_of = {}, {}
    for name, value in model_state.items():
        if torch.is_tensor(value):
            key = (value.device, value.data_ptr(), value.storage_offset(), tuple(value.shape), value.stride(),
                   value.dtype) if value.numel() else ("empty", name)
            unique.setdefault(key, value)
            key_of[name] = key
    workers = max(1, min(8, os.cpu_count() or 1, len(unique)))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        digest_of = dict(zip(unique, pool.map(tensor_digest, unique.values())))
    return {"algorithm": "sha256", "tensors": {name: digest_of[key] for name, key in key_of.items()}}


def verify_model_checksum(model_state: Dict[str, Any], checksum: Dict[str, Any], path: str) -> None:
    """Raise :class:`CheckpointIntegrityError` naming ``path`` and the tensors
    whose content differs from ``checksum`` (or that are missing / extra)."""
    if checksum.get("algorithm") != "sha256":
        raise CheckpointIntegrityError(f"{path}: unknown checksum algorithm {checksum.get('algorithm')!r}")
    expected = checksum["tensors"]
    actual = model_checksum(model_state)["tensors"]
    changed = sorted(name for name in expected if name in actual and actual[name] != expected[name])
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    if not (changed or missing or extra):
        return
    problems = []
    for what, names in (("differ", changed), ("are missing", missing), ("were not saved", extra)):
        if names:
            shown = ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
            problems.append(f"{len(names)} of {len(expected)} tensors {what}: {shown}")
    raise CheckpointIntegrityError(
        f"{path}: the model weights do not match the checksum saved with them ({'; '.join(problems)}). "
        "The file is corrupted (a disk or transfer error, a partial copy). If the weights were changed on "
        "purpose (averaging, surgery), record the new checksum with `python -m mdsfair.checkpoints stamp "
        f"{path}`, or set {VERIFY_ENV}=0 to skip verification."
    )


def verification_enabled() -> bool:
    return os.environ.get(VERIFY_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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


def make_record(data: Dict[str, Any], model_state: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The record stored in ``task_state[RECORD_KEY]``."""
    record = {"version": RECORD_VERSION, "data": data}
    if model_state is not None:
        record["model_checksum"] = model_checksum(model_state)
    return record


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
            describe = lambda sub: f"{sub.get('type')} " + ", ".join(  # noqa: E731
                f"{name} sha256 {digest[:12]}" for name, digest in sorted(sub["files"].items())
            )
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
    :func:`load_checkpoint_to_cpu` attached to a loaded model state with the
    data of the task that built the model (``data_fingerprint_of()`` and
    ``allow_mismatch_of()`` are read at load time)."""

    def hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        loaded = local_metadata.get(METADATA_KEY) if prefix == "" else None
        if not loaded or not loaded.get("data"):
            return
        check_data_fingerprint(loaded["data"], data_fingerprint_of(), loaded.get("path", "?"), allow_mismatch_of())

    return hook


# ------------------------------------------------------------ file checks


def check_checkpoint_file(path: str) -> None:
    """Fail early, naming ``path``, for an empty file or a Git LFS pointer."""
    if not os.path.isfile(path):
        return
    size = os.path.getsize(path)
    if size == 0:
        raise CheckpointFileError(
            f"checkpoint {path} is empty (0 bytes): an interrupted save, copy or download; "
            "use another checkpoint or copy it again"
        )
    with open(path, "rb") as handle:
        head = handle.read(len(LFS_POINTER_PREFIX))
    if head == LFS_POINTER_PREFIX:
        raise CheckpointFileError(
            f"checkpoint {path} is a Git LFS pointer ({size} bytes), not the checkpoint: the repository was "
            "cloned without its LFS content; run `git lfs pull` (or download the file itself)"
        )


def _raised_by_torch_load(error: BaseException) -> bool:
    frames = traceback.extract_tb(error.__traceback__)
    return any(
        frame.filename.endswith(os.path.join("torch", "serialization.py")) or frame.filename.endswith("pickle.py")
        for frame in frames
    ) or isinstance(error, (EOFError, pickle.UnpicklingError, zipfile.BadZipFile))


def describe_unreadable(path: str, error: BaseException) -> str:
    """Why torch could not read ``path``, with the likely cause."""
    size = os.path.getsize(path) if os.path.isfile(path) else None
    text = f"{type(error).__name__}: {' '.join(str(error).split())}"  # one line
    lowered = str(error).lower()
    truncated_signs = ("ran out of input", "central directory", "eof")
    if isinstance(error, EOFError) or any(sign in lowered for sign in truncated_signs):
        cause = "the file is truncated (an interrupted save, copy or download)"
    elif isinstance(error, pickle.UnpicklingError) and ("invalid load key" in lowered or "unsupported operand" in lowered):
        # "unsupported operand": what torch's weights_only unpickler says of bytes that are no pickle
        with open(path, "rb") as handle:
            head = handle.read(24)
        cause = f"the file is not a torch checkpoint (it starts with {head!r})"
    else:
        cause = "the file is damaged or not a torch checkpoint"
    return f"cannot read checkpoint {path} ({size} bytes): {text}; {cause}"


def load_checked(original, path, arg_overrides=None, load_on_all_ranks=False):
    """``original`` (fairseq's ``load_checkpoint_to_cpu``) with the checks of
    the module docstring."""
    check_checkpoint_file(path)
    try:
        state = call_with_checkpoint_globals(path, original, path, arg_overrides, load_on_all_ranks)
    except CheckpointFileError:
        raise
    except Exception as error:  # noqa: BLE001 (re-raised with the file named when torch.load failed)
        if _raised_by_torch_load(error):
            raise CheckpointFileError(describe_unreadable(path, error)) from error
        raise
    record = (state.get("task_state") or {}).get(RECORD_KEY) if isinstance(state, dict) else None
    if not record or "model" not in state:
        stale = getattr(state.get("model"), "_metadata", None) if isinstance(state, dict) else None
        if stale is not None and METADATA_KEY in stale.get("", {}):
            # saved from a state this hook had loaded; only a record counts
            stale[""] = {k: v for k, v in stale[""].items() if k != METADATA_KEY}
        return state
    if record.get("model_checksum") and verification_enabled():
        verify_model_checksum(state["model"], record["model_checksum"], path)
    model_state = state["model"]
    if not isinstance(model_state, collections.OrderedDict):
        model_state = collections.OrderedDict(model_state)
    metadata = getattr(model_state, "_metadata", None)
    if metadata is None:
        metadata = collections.OrderedDict()
    metadata[""] = {**metadata.get("", {}), METADATA_KEY: {"path": path, "data": record.get("data")}}
    model_state._metadata = metadata
    state["model"] = model_state
    return state


# ------------------------------------------------------------- commands


def restamp_state(state: Dict[str, Any]) -> Dict[str, Any]:
    """Record the checksum of ``state["model"]`` in a checkpoint state (after
    a deliberate change of the weights, before saving it); the data
    fingerprint is kept. Returns the record."""
    task_state = dict(state.get("task_state") or {})
    record = dict(task_state.get(RECORD_KEY) or {"version": RECORD_VERSION, "data": None})
    record["model_checksum"] = model_checksum(state["model"])
    task_state[RECORD_KEY] = record
    state["task_state"] = task_state
    return record


def stamp(path: str, output: Optional[str] = None) -> Dict[str, Any]:
    """:func:`restamp_state` on the checkpoint file ``path``; writes
    ``output`` (default: in place). Returns the record."""
    import torch

    check_checkpoint_file(path)
    state = load_checkpoint_file(path)
    record = restamp_state(state)
    torch.save(state, output or path)
    return record


def verify(path: str) -> Optional[Dict[str, Any]]:
    """Check ``path`` as loading does; returns its record (None without one)."""
    check_checkpoint_file(path)
    try:
        state = load_checkpoint_file(path)
    except UntrustedCheckpointError:
        raise
    except Exception as error:  # noqa: BLE001
        raise CheckpointFileError(describe_unreadable(path, error)) from error
    record = (state.get("task_state") or {}).get(RECORD_KEY)
    if record and record.get("model_checksum"):
        verify_model_checksum(state["model"], record["model_checksum"], path)
    return record


def cli_main(argv: Optional[List[str]] = None) -> int:
    """``python -m mdsfair.checkpoints verify|stamp FILE...``"""
    parser = argparse.ArgumentParser(
        prog="python -m mdsfair.checkpoints",
        description="Verify mdsfair checkpoints against their saved checksum and show their training "
        "data-bin, or record a new checksum after a deliberate change of the weights.",
    )
    parser.add_argument("command", choices=["verify", "stamp"])
    parser.add_argument("files", nargs="+", metavar="FILE")
    args = parser.parse_args(argv)
    status = 0
    for path in args.files:
        try:
            if args.command == "stamp":
                record = stamp(path)
                print(f"{path}: stamped {len(record['model_checksum']['tensors'])} tensors")
            else:
                record = verify(path)
                if record is None:
                    print(f"{path}: readable; no mdsfair record (not written by fairseq-train with an mdsfair task)")
                else:
                    data = record.get("data") or {}
                    verified = len((record.get("model_checksum") or {}).get("tensors", {}))
                    print(f"{path}: OK ({verified} tensors verified); "
                          f"trained on {', '.join(data.get('data_bins', [])) or '?'}")
        except (CheckpointFileError, CheckpointIntegrityError, OSError) as error:
            print(f"error: {error}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(cli_main())
