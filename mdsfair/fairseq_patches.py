"""Every change mdsfair makes to fairseq's own code, one function per patch.

Written against fairseq **0.12.3** (the ``ve-fairseq`` 0.12.3 wheel,
:data:`FAIRSEQ_VERSION`). :func:`apply_fairseq_patches` applies them all; it is
called by :func:`mdsfair.register`, never at import time, and each patch is
idempotent. Nothing else in mdsfair assigns to a fairseq attribute
(``tests/test_layering.py`` checks that no other module does).

Patches
-------
1. ``fairseq.checkpoint_utils.load_checkpoint_to_cpu`` is wrapped by
   :func:`mdsfair.checkpoints.load_checked` (:func:`patch_load_checkpoint_to_cpu`).
   *Why:* every checkpoint fairseq loads for an mdsfair run goes through this
   one function (``fairseq-generate --path``, ``fairseq-train --restore-file`` /
   ``--finetune-from-model`` and resuming, ``hub_utils.from_pretrained``), and
   fairseq offers no hook there: the checks of :mod:`mdsfair.checkpoints`
   (empty / truncated / Git LFS pointer files named with their cause, weights
   verified against the checksum saved with them, the training data fingerprint
   handed to the model's ``load_state_dict``) and the ``weights_only`` allow-list
   of :mod:`mdsfair.checkpoint_loading` can only run there. Callers inside
   fairseq look the function up on the module at call time
   (``checkpoint_utils.load_checkpoint_to_cpu(...)``), so replacing the module
   attribute reaches all of them.
"""
import functools

#: The fairseq release these patches were written and tested against.
FAIRSEQ_VERSION = "0.12.3"

#: Attribute set on a wrapper this module installed (so it is installed once).
PATCHED_MARKER = "__mdsfair_checked__"


def patch_load_checkpoint_to_cpu() -> None:
    """Patch 1 (module docstring): wrap ``checkpoint_utils.load_checkpoint_to_cpu``
    with :func:`mdsfair.checkpoints.load_checked` (once)."""
    from fairseq import checkpoint_utils

    from mdsfair.checkpoints import load_checked

    current = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(current, PATCHED_MARKER, False):
        return

    @functools.wraps(current)
    def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
        return load_checked(current, path, arg_overrides, load_on_all_ranks)

    setattr(load_checkpoint_to_cpu, PATCHED_MARKER, True)
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu


def is_patched() -> bool:
    """Whether :func:`apply_fairseq_patches` has run in this process."""
    from fairseq import checkpoint_utils

    return bool(getattr(checkpoint_utils.load_checkpoint_to_cpu, PATCHED_MARKER, False))


def apply_fairseq_patches() -> None:
    """Apply every patch of this module (idempotent)."""
    patch_load_checkpoint_to_cpu()
