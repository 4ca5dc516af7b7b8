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

* resuming training (``fairseq-train`` / ``mdsfair-train`` with
  ``--restore-file``, or ``checkpoint_last.pt`` in ``--save-dir``) compares the
  checkpoint's model configuration with this run's (:func:`architecture_differences`,
  from the wrapped ``Trainer.load_checkpoint``): a changed architecture flag
  that keeps every tensor's shape (``--decoder-attention-heads``,
  ``--activation-fn``, ``--encoder-normalize-before``, ``--locality``, ...)
  would load the old weights into a different model, so it raises
  :class:`ArchitectureChangeError` naming each flag with its old and new value,
  unless the task's ``--allow-arch-change`` is set (each difference is then
  logged). A *fine-tune* (the optimizer is reset: ``--reset-optimizer``, or
  ``--finetune-from-model``'s first start) may change ``--arch`` (a BART
  release into ``hierencdec_bart_large``, the README's transfers) and flags
  the checkpoint's configuration does not have; every flag both
  configurations have must agree as for a resume. Non-architecture values
  (:data:`NON_ARCHITECTURE_KEYS`: dropouts, layer drop, activation
  checkpointing, position budgets, sparse-selection schedules) may always
  change and are logged. Only mdsfair tasks are checked (the flag is theirs).

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
import functools
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


class ArchitectureChangeError(RuntimeError):
    """Resuming from a checkpoint whose model configuration differs from this run's."""


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


# ------------------------------------------------- architecture on resume

#: Model-configuration keys that never change what the saved weights mean:
#: regularization and memory settings, position budgets (a learned table of
#: another size does not load; sinusoidal positions have no weights; the
#: tiling of a shorter table), and the sparse decoder's sentence selection. Any key containing
#: ``dropout`` or ``layerdrop`` is one too.
NON_ARCHITECTURE_KEYS = frozenset({
    "checkpoint_activations", "offload_activations", "min_params_to_wrap",
    "max_source_positions", "max_target_positions",
    "quant_noise_pq", "quant_noise_pq_block_size", "quant_noise_scalar",
    "tpu", "position_tiling",
    # the sparse decoder's sentence selection: changed between its training stages (README: KL-only with
    # --top-r 0, then --top-r 5 --sentence-selection approx) and by --model-overrides at generation
    "top_r", "sentence_selection", "mix_decay_updates", "share_selection_across_beams", "sparse_generation_path",
})
#: How a resume and a fine-tune are told apart (see the module docstring).
_LOADING = {"context": None}


def is_architecture_key(key: str) -> bool:
    return not ("dropout" in key or "layerdrop" in key or key in NON_ARCHITECTURE_KEYS or key.startswith("_"))


@functools.lru_cache(maxsize=None)
def _model_keys(model_class) -> frozenset:
    """The configuration keys a fairseq model class declares (its
    ``add_args``, which for dataclass models lists the dataclass)."""
    parser = argparse.ArgumentParser(add_help=False)
    try:
        model_class.add_args(parser)
    except Exception:  # noqa: BLE001 (a model whose add_args cannot run alone: compare nothing but --arch)
        return frozenset()
    return frozenset(action.dest for action in parser._actions if action.dest != "help")


def _as_plain_dict(model_cfg) -> Dict[str, Any]:
    if model_cfg is None:
        return {}
    if isinstance(model_cfg, argparse.Namespace):
        return dict(vars(model_cfg))
    if isinstance(model_cfg, dict):
        return dict(model_cfg)
    from omegaconf import DictConfig, OmegaConf

    if isinstance(model_cfg, DictConfig):
        try:
            return OmegaConf.to_container(model_cfg, resolve=True)
        except Exception:  # noqa: BLE001 (an interpolation that does not resolve outside its run)
            return OmegaConf.to_container(model_cfg, resolve=False)
    return {}


def _normalized(value):
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    try:
        from omegaconf import ListConfig

        if isinstance(value, ListConfig):
            return [_normalized(v) for v in value]
    except ImportError:  # pragma: no cover
        pass
    return value


def _arch_name(config: Dict[str, Any]) -> Optional[str]:
    return config.get("arch") or config.get("_name")


def architecture_differences(old_cfg, new_cfg, fine_tune: bool) -> Dict[str, List[Any]]:
    """``{key: [old, new]}`` of every model-configuration value that differs
    between a checkpoint's (``old_cfg``) and this run's (``new_cfg``), for the
    keys the new model class declares and both configurations have
    (``--arch`` too, except in a fine-tune). Non-architecture keys are
    included; :func:`is_architecture_key` tells them apart."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    old, new = _as_plain_dict(old_cfg), _as_plain_dict(new_cfg)
    differences: Dict[str, List[Any]] = {}
    old_arch, new_arch = _arch_name(old), _arch_name(new)
    if not fine_tune and old_arch and new_arch and old_arch != new_arch:
        differences["arch"] = [old_arch, new_arch]
    model_class = ARCH_MODEL_REGISTRY.get(new_arch)
    keys = _model_keys(model_class) if model_class is not None else frozenset()
    for key in sorted(keys):
        if key in ("arch", "_name") or key not in old or key not in new:
            continue
        if _normalized(old[key]) != _normalized(new[key]):
            differences[key] = [old[key], new[key]]
    return differences


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def check_architecture(state: Dict[str, Any], path: str, context: Dict[str, Any]) -> None:
    """Compare a checkpoint's model configuration with the run that resumes
    from it (module docstring); raise :class:`ArchitectureChangeError` or log."""
    trainer = context["trainer"]
    task_cfg = getattr(getattr(trainer, "task", None), "cfg", None)
    allow = getattr(task_cfg, "allow_arch_change", None)
    if allow is None:  # not an mdsfair task: fairseq's behaviour
        return
    saved = state.get("cfg")
    old_model = saved.get("model") if hasattr(saved, "get") else None
    if old_model is None:
        return
    fine_tune = context["fine_tune"]
    differences = architecture_differences(old_model, trainer.cfg.model, fine_tune)
    what = "fine-tuning from" if fine_tune else "resuming from"
    allowed = {key: values for key, values in differences.items() if not is_architecture_key(key)}
    for key, (old, new) in allowed.items():
        logger.info("%s %s: %s was %r in the checkpoint, %r now (not an architecture flag)", what, path, _flag(key), old, new)
    changed = {key: values for key, values in differences.items() if is_architecture_key(key)}
    if not changed:
        return
    listed = "; ".join(f"{_flag(key)} {old!r} in the checkpoint, {new!r} now" for key, (old, new) in changed.items())
    if allow:
        for key, (old, new) in changed.items():
            logger.warning("--allow-arch-change: %s %s with %s changed from %r to %r", what, path, _flag(key), old, new)
        return
    raise ArchitectureChangeError(
        f"{what} checkpoint {path}: this run's model differs from the one that saved it ({listed}). The tensors "
        "have the same shapes, so its weights would load silently into a different model. Give the checkpoint's "
        "values again (or start in a new --save-dir), or pass --allow-arch-change if you mean to change the "
        "architecture" + ("" if fine_tune else " (a fine-tune with --reset-optimizer may also change --arch)")
    )


def trainer_load_checked(original, trainer, filename, reset_optimizer=False, reset_lr_scheduler=False,
                         optimizer_overrides=None, reset_meters=False, **kwargs):
    """fairseq's ``Trainer.load_checkpoint`` (resume / fine-tune), with the
    checkpoint's model configuration compared with the trainer's by
    :func:`load_checked` (:func:`check_architecture`)."""
    previous = _LOADING["context"]
    _LOADING["context"] = {"trainer": trainer, "path": filename, "fine_tune": bool(reset_optimizer)}
    try:
        return original(trainer, filename, reset_optimizer, reset_lr_scheduler, optimizer_overrides,
                        reset_meters=reset_meters, **kwargs)
    finally:
        _LOADING["context"] = previous


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
    context = _LOADING["context"]
    if context is not None and context["path"] == path and isinstance(state, dict):
        check_architecture(state, path, context)
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


def _is_local(path) -> bool:
    return isinstance(path, str) and "://" not in path


def atomic_copy(original, src_path: str, dst_path: str, overwrite: bool = False) -> bool:
    """fairseq's ``PathManager.copy`` (how ``save_checkpoint`` makes
    ``checkpoint_last.pt`` / ``checkpoint_best.pt`` from the checkpoint it
    saved) made atomic for local files: a temporary file in the same folder,
    fsynced, then ``os.replace``d; an error or Ctrl-C removes it and leaves
    the old checkpoint whole (fairseq's own copy is ``shutil.copyfile`` onto
    the old file, which an interrupt leaves cut short)."""
    import shutil

    if not (_is_local(src_path) and _is_local(dst_path)) or (not overwrite and os.path.exists(dst_path)):
        return original(src_path, dst_path, overwrite=overwrite)
    temporary = os.path.join(os.path.dirname(os.path.abspath(dst_path)),
                             f".{os.path.basename(dst_path)}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(src_path, temporary)
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, dst_path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    return True


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


if __name__ == "__main__":  # python -m mdsfair.checkpoints: the command lives in the applications layer
    from mdsfair.checkpoints_cli import cli_main

    sys.exit(cli_main())
