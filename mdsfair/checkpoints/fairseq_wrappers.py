"""The functions :mod:`mdsfair.fairseq_patches` installs in fairseq's place
(fairseq offers no hook where they run; the patch module says why each is
needed):

* :func:`load_checked` wraps ``checkpoint_utils.load_checkpoint_to_cpu``, the
  one function every checkpoint fairseq loads goes through: the file is
  diagnosed (:mod:`mdsfair.checkpoints.diagnosis`), loaded with the
  ``weights_only`` allow-list (:mod:`mdsfair.checkpoint_loading`), its
  weights verified against their checksum
  (:mod:`mdsfair.checkpoints.checksums`), its data fingerprint handed to the
  model's ``load_state_dict`` (:mod:`mdsfair.checkpoints.fingerprints`), its
  model configuration brought up to date (:mod:`mdsfair.checkpoints.config_upgrades`)
  and, when the trainer resumes from it, compared with the run's
  (:mod:`mdsfair.checkpoints.architecture_change`);
* :func:`trainer_load_checked` wraps ``Trainer.load_checkpoint``, the one
  place that knows whether the load is a resume or a fine-tune (the
  optimizer is reset): it tells :func:`load_checked` for that load;
* :func:`atomic_copy` replaces ``PathManager.copy`` for local files, so
  ``checkpoint_last.pt`` / ``checkpoint_best.pt`` are never left cut short.
"""

import collections
import os

from mdsfair.checkpoint_loading import call_with_checkpoint_globals
from mdsfair.checkpoints.architecture_change import check_architecture
from mdsfair.checkpoints.checksums import verification_enabled, verify_model_checksum
from mdsfair.checkpoints.config_upgrades import upgrade_model_config
from mdsfair.checkpoints.diagnosis import (
    CheckpointFileError,
    check_checkpoint_file,
    describe_unreadable,
    raised_by_torch_load,
)
from mdsfair.checkpoints.record import METADATA_KEY, RECORD_KEY
from mdsfair.data.manifest import atomic_replacement

#: The trainer, path and kind (resume or fine-tune) of the load that
#: :func:`trainer_load_checked` is running, for :func:`load_checked`.
_LOADING = {"context": None}


def trainer_load_checked(
    original,
    trainer,
    filename,
    reset_optimizer=False,
    reset_lr_scheduler=False,
    optimizer_overrides=None,
    reset_meters=False,
    **kwargs,
):
    """fairseq's ``Trainer.load_checkpoint`` (resume / fine-tune), with the
    checkpoint's model configuration compared with the trainer's by
    :func:`load_checked` (:func:`check_architecture`)."""
    previous = _LOADING["context"]
    _LOADING["context"] = {"trainer": trainer, "path": filename, "fine_tune": bool(reset_optimizer)}
    try:
        return original(
            trainer,
            filename,
            reset_optimizer,
            reset_lr_scheduler,
            optimizer_overrides,
            reset_meters=reset_meters,
            **kwargs,
        )
    finally:
        _LOADING["context"] = previous


def load_checked(original, path, arg_overrides=None, load_on_all_ranks=False):
    """``original`` (fairseq's ``load_checkpoint_to_cpu``) with the checks of
    the module docstring."""
    check_checkpoint_file(path)
    try:
        state = call_with_checkpoint_globals(path, original, path, arg_overrides, load_on_all_ranks)
    except CheckpointFileError:
        raise
    except Exception as error:  # noqa: BLE001 (re-raised with the file named when torch.load failed)
        if raised_by_torch_load(error):
            raise CheckpointFileError(describe_unreadable(path, error)) from error
        raise
    upgrade_model_config(state, path)
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


def is_local_path(path) -> bool:
    """Whether ``path`` is a file on this machine (not a URL fairseq's ``PathManager`` fetches)."""
    return isinstance(path, str) and "://" not in path


def atomic_copy(original, src_path: str, dst_path: str, overwrite: bool = False) -> bool:
    """fairseq's ``PathManager.copy`` (how ``save_checkpoint`` makes
    ``checkpoint_last.pt`` / ``checkpoint_best.pt`` from the checkpoint it
    saved) made atomic for local files: a temporary file in the same folder,
    fsynced, then ``os.replace``d; an error or Ctrl-C removes it and leaves
    the old checkpoint whole (fairseq's own copy is ``shutil.copyfile`` onto
    the old file, which an interrupt leaves cut short)."""
    import shutil

    if not (is_local_path(src_path) and is_local_path(dst_path)) or (not overwrite and os.path.exists(dst_path)):
        return original(src_path, dst_path, overwrite=overwrite)
    with atomic_replacement(dst_path) as temporary:
        shutil.copyfile(src_path, temporary)
    return True
