"""A checkpoint file checked as loading checks it (:func:`verify`), or its
weights' checksum recorded anew after a deliberate change of them, such as
averaging or surgery (:func:`stamp`): what ``python -m mdsfair.checkpoints
verify|stamp FILE...`` (:mod:`mdsfair.checkpoints.__main__`) runs.
"""

from typing import Any, Dict, Optional

from mdsfair.checkpoint_loading import UntrustedCheckpointError, load_checkpoint_file
from mdsfair.checkpoints.checksums import model_checksum, verify_model_checksum
from mdsfair.checkpoints.diagnosis import CheckpointFileError, check_checkpoint_file, describe_unreadable
from mdsfair.checkpoints.record import RECORD_KEY, RECORD_VERSION


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
