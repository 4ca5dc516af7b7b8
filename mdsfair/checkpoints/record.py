"""The record an mdsfair task stores in every checkpoint, in fairseq's
``task_state`` under :data:`RECORD_KEY`: the data the model was trained on
(:mod:`mdsfair.checkpoints.fingerprints`) and the checksum of its weights
(:mod:`mdsfair.checkpoints.checksums`); its layout is in the package
docstring of :mod:`mdsfair.checkpoints`.
"""

from typing import Any, Dict, Optional

from mdsfair.checkpoints.checksums import model_checksum

#: Key of mdsfair's record in a checkpoint's ``task_state``.
RECORD_KEY = "mdsfair_checkpoint"
RECORD_VERSION = 1
#: Key under which a loaded checkpoint's record reaches the model's
#: ``load_state_dict`` (``state_dict._metadata[""]``).
METADATA_KEY = "mdsfair_checkpoint"


def make_record(data: Dict[str, Any], model_state: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The record stored in ``task_state[RECORD_KEY]``."""
    record = {"version": RECORD_VERSION, "data": data}
    if model_state is not None:
        record["model_checksum"] = model_checksum(model_state)
    return record
