"""mdsfair: multi-document summarization systems as a fairseq plugin.

Registration
------------
fairseq finds tasks, models, architectures and criteria in registries that
modules fill when they are imported. :func:`register` imports every module of
:data:`REGISTERING_PACKAGES` and applies the patches of
:mod:`mdsfair.fairseq_patches` (the checkpoint checks). Two plain ways run it:

* fairseq's ``--user-dir`` (``fairseq-train --user-dir path/to/mdsfair``):
  fairseq imports this package after itself, so ``import mdsfair`` in a
  process that has already imported fairseq registers at once (the one
  thing this module does at import);
* an explicit ``mdsfair.register()`` (idempotent) in any process that imports
  mdsfair before fairseq. mdsfair's own entry points call it: ``mdsfair-train``
  / ``-generate`` (:mod:`mdsfair.cli`), the hub (:mod:`mdsfair.hub_interface`,
  ``hubconf.py``), the importers, ``mdsfair-rank``, ``mdsfair-page-importance``
  and ``mdsfair-analyze-attention``.

So the commands that need no model (``mdsfair-rouge``, ``-compare``,
``-baseline``, ``-convert``, ``-synth``) import neither torch nor fairseq and
start in well under a second; ``tests/test_startup.py`` checks both sides.

Importing mdsfair changes no warning filter and leaves torch's
``weights_only`` default alone: checkpoint loads that mdsfair performs or
triggers allow fairseq's few extra globals for that load only
(:mod:`mdsfair.checkpoint_loading`).
"""

import importlib
import sys

__version__ = "0.1.0"


# ------------------------------------------------------------ registration

#: The sub-packages whose modules register with fairseq.
REGISTERING_PACKAGES = ("data", "modules", "tasks", "models", "criterions", "generation")

_registration = {"done": False, "running": False}


def is_registered() -> bool:
    """Whether :func:`register` has run in this process."""
    return _registration["done"]


def register() -> None:
    """Register every mdsfair task, model, architecture and criterion with
    fairseq and apply :mod:`mdsfair.fairseq_patches` (imports fairseq and
    torch). Runs once per process; later calls (and a call made while it runs,
    by a module it imports) return at once."""
    if _registration["done"] or _registration["running"]:
        return
    _registration["running"] = True
    try:
        for package in REGISTERING_PACKAGES:
            importlib.import_module(f"{__name__}.{package}")
        from mdsfair.fairseq_patches import apply_fairseq_patches

        apply_fairseq_patches()
        _registration["done"] = True
    finally:
        _registration["running"] = False


if "fairseq" in sys.modules:  # imported by fairseq's --user-dir (or after fairseq): register now
    register()
