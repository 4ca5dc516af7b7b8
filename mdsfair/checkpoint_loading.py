"""Reading checkpoint files without unpickling arbitrary objects.

torch >= 2.6 loads with ``weights_only=True``: only tensors, containers and
the globals on an allow-list are rebuilt, nothing from the file runs. fairseq
checkpoints hold objects that list lacks: ``argparse.Namespace`` (the
``args`` of the 0.9-0.10 layout and of fairseq-train's own checkpoints),
omegaconf's ``DictConfig`` (``cfg``) and sometimes numpy scalars (validation
scores). So mdsfair does **not** turn
``weights_only`` off for the process (no ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``):

* every checkpoint load mdsfair performs or triggers (fairseq's
  ``load_checkpoint_to_cpu`` through
  :func:`mdsfair.checkpoints.fairseq_wrappers.load_checked`,
  ``mdsfair.checkpoints stamp/verify``, the importers) runs inside
  :func:`fairseq_checkpoint_globals`, which allows exactly
  :data:`FAIRSEQ_CHECKPOINT_GLOBALS` for the duration of that load, still with
  ``weights_only=True``: a file that needs anything else is refused with a
  :class:`UntrustedCheckpointError` naming the file and the object;
* a user who trusts such a file (an old release pickling other classes) sets
  ``MDSFAIR_TRUST_CHECKPOINTS=1``: then, and only for that one load, mdsfair
  unpickles it fully and logs that it ran pickle on it.

``torch.load`` in the user's own code is untouched before, during and after.
"""

import argparse
import contextlib
import logging
import os
import pickle
import re
from typing import Any, Iterator, List

logger = logging.getLogger(__name__)

#: Environment variable: ``1`` lets mdsfair unpickle a checkpoint that needs
#: more than :data:`FAIRSEQ_CHECKPOINT_GLOBALS` (runs pickle: trusted files only).
TRUST_ENV = "MDSFAIR_TRUST_CHECKPOINTS"

_UNSUPPORTED_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w\.]+)")


class UntrustedCheckpointError(RuntimeError):
    """A checkpoint that would need arbitrary unpickling to load."""


def fairseq_checkpoint_globals_list() -> List[Any]:
    """The globals a fairseq / mdsfair checkpoint may hold beyond tensors and
    containers: ``argparse.Namespace`` (``args``), omegaconf's config and node
    classes (``cfg`` as fairseq's ``convert_namespace_to_omegaconf`` stores
    it), the builtin types their pickled state names, numpy scalars and dtypes
    (validation scores)."""
    import collections
    import typing

    import numpy as np
    from omegaconf import DictConfig, ListConfig, base, nodes

    allowed: List[Any] = [argparse.Namespace, np.dtype, DictConfig, ListConfig, base.ContainerMetadata, base.Metadata]
    allowed += [
        getattr(nodes, name)
        for name in (
            "AnyNode",
            "StringNode",
            "IntegerNode",
            "FloatNode",
            "BooleanNode",
            "EnumNode",
            "BytesNode",
            "PathNode",
        )
        if hasattr(nodes, name)
    ]
    allowed += [typing.Any, dict, list, tuple, int, float, str, bool, collections.defaultdict, collections.OrderedDict]
    core = getattr(np, "_core", None) or np.core
    allowed.append(core.multiarray.scalar)
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        allowed.extend(
            getattr(dtypes, name)
            for name in ("Float64DType", "Float32DType", "Float16DType", "Int64DType", "Int32DType", "BoolDType")
            if hasattr(dtypes, name)
        )
    return allowed


FAIRSEQ_CHECKPOINT_GLOBALS = fairseq_checkpoint_globals_list()


def trusted_by_user() -> bool:
    """Whether ``MDSFAIR_TRUST_CHECKPOINTS=1`` is set."""
    return os.environ.get(TRUST_ENV, "") == "1"


def unsupported_global(error: BaseException) -> str:
    """The global a ``weights_only`` load refused ("" when not that error)."""
    match = _UNSUPPORTED_GLOBAL.search(str(error))
    return match.group(1) if match else ""


def untrusted_message(path: str, global_name: str) -> str:
    return (
        f"{path}: the checkpoint pickles {global_name}, which loading it would have to execute "
        f"(mdsfair loads checkpoints with torch's weights_only=True and allows only argparse.Namespace, "
        f"omegaconf configs and numpy scalars). If you trust this file, rerun with {TRUST_ENV}=1 to unpickle it."
    )


@contextlib.contextmanager
def fairseq_checkpoint_globals() -> Iterator[None]:
    """Allow :data:`FAIRSEQ_CHECKPOINT_GLOBALS` for the ``weights_only`` loads
    inside the block (torch's own scoped allow-list; restored on exit)."""
    import torch

    with torch.serialization.safe_globals(FAIRSEQ_CHECKPOINT_GLOBALS):
        yield


@contextlib.contextmanager
def _full_unpickling_for_this_load(path: str) -> Iterator[None]:
    """``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` for one load the user trusted
    (fairseq's own ``torch.load`` takes no ``weights_only`` argument)."""
    logger.warning("%s=1: unpickling %s fully (this runs code stored in the file)", TRUST_ENV, path)
    previous = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
        else:
            os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = previous


def call_with_checkpoint_globals(path: str, load, *args, **kwargs):
    """``load(*args, **kwargs)`` (a function that ``torch.load``s ``path``)
    under :func:`fairseq_checkpoint_globals`; a file needing more raises
    :class:`UntrustedCheckpointError`, or with ``MDSFAIR_TRUST_CHECKPOINTS=1``
    is loaded again with full unpickling."""
    try:
        with fairseq_checkpoint_globals():
            return load(*args, **kwargs)
    except (pickle.UnpicklingError, RuntimeError) as error:
        name = unsupported_global(error)
        if not name:
            raise
        if not trusted_by_user():
            raise UntrustedCheckpointError(untrusted_message(path, name)) from None
    with _full_unpickling_for_this_load(path):
        return load(*args, **kwargs)


def load_checkpoint_file(path: str, map_location="cpu"):
    """``torch.load(path)`` for a checkpoint, as :func:`call_with_checkpoint_globals` loads it."""
    import torch

    return call_with_checkpoint_globals(path, lambda: torch.load(path, map_location=map_location))
