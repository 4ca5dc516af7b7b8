"""mdsfair: multi-document summarization systems as a fairseq plugin.

Registration
------------
fairseq finds tasks, models, architectures and criteria in registries that
modules fill when they are imported. mdsfair fills them (imports every module
of ``mdsfair.data``, ``modules``, ``tasks``, ``models``, ``criterions``,
``generation`` and installs the checkpoint checks of :mod:`mdsfair.checkpoints`)
whenever fairseq is in use, and only then:

* ``import mdsfair`` in a process that has already imported fairseq
  (``--user-dir mdsfair``: fairseq imports the plugin after itself) registers
  at once;
* otherwise ``import mdsfair`` installs a small import hook (a
  :class:`importlib.abc.MetaPathFinder` in ``sys.meta_path``) and registers
  right after fairseq is first imported, in either order (``import mdsfair;
  import fairseq`` or the reverse, ``hubconf.py``, a test that imports
  ``mdsfair.hub_interface``). When an ``mdsfair.*`` module is itself the one
  that imports fairseq, registration waits until the outermost ``mdsfair.*``
  module being imported has finished, so no registering module ever sees a
  half-initialized one. The hook removes itself once registration has run;
* :func:`register` does it explicitly (idempotent).

So the commands that need no model (``mdsfair-rouge``, ``-compare``,
``-baseline``, ``-convert``, ``-synth``) import neither torch nor fairseq and
start in well under a second; ``tests/test_startup.py`` checks both sides.

Importing mdsfair leaves torch's ``weights_only`` default alone: checkpoint
loads that mdsfair performs or triggers allow fairseq's few extra globals for
that load only (:mod:`mdsfair.checkpoint_loading`). It silences a fixed list of known,
harmless third-party warnings by message (:data:`SILENCED_WARNINGS`).
"""
import importlib
import importlib.abc
import os
import sys
import threading
import warnings

__version__ = "0.1.0"

#: ``(category name, message regex)`` of third-party warnings that every
#: fairseq run prints and that say nothing about the run: hydra's
#: deprecations triggered by fairseq's own config code, torch's deprecations
#: triggered by fairseq's code, and the DataLoader's
#: ``pin_memory`` notice on machines without an accelerator. Matched by
#: message, so any other warning of the same category still shows.
SILENCED_WARNINGS = (
    ("UserWarning", r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental"),
    ("UserWarning", r"\s*The version_base parameter is not specified"),
    ("UserWarning", r"In '.*': Usage of deprecated keyword in package header '# @package _group_'"),
    ("UserWarning", r"\s*'.*' is validated against ConfigStore schema with the same name"),
    ("UserWarning", r"\s*The strict flag in the compose API is deprecated"),
    ("FutureWarning", r"`torch\.cuda\.amp\.(autocast|GradScaler)\(args\.\.\.\)` is deprecated"),
    ("DeprecationWarning", r"`torch\.jit\.script` is deprecated"),
    ("UserWarning", r"'pin_memory' argument is set as true but no accelerator is found"),
)


def silence_known_warnings() -> None:
    """Ignore the warnings of :data:`SILENCED_WARNINGS` (by category and
    message); run at import. Test runners that reset the warning filters
    per test can call it again."""
    categories = {"UserWarning": UserWarning, "FutureWarning": FutureWarning, "DeprecationWarning": DeprecationWarning}
    for category, message in SILENCED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=categories[category])


def _map_source_checkout_preprocess():
    """``mdsfair.preprocess`` from a source checkout.

    setup.py installs the repository's top-level ``preprocess/`` folder as
    ``mdsfair.preprocess`` (``package_dir``). Run from a checkout (the tests,
    ``--user-dir mdsfair``, an editable install), ``mdsfair/`` has no
    ``preprocess`` subfolder, so the package's search path gains the sibling
    folder under that name. An installed copy has its own and is untouched.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    sibling = os.path.join(os.path.dirname(here), "preprocess")
    if os.path.isdir(os.path.join(here, "preprocess")) or not os.path.isfile(os.path.join(sibling, "__init__.py")):
        return
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        __name__ + ".preprocess", os.path.join(sibling, "__init__.py"), submodule_search_locations=[sibling]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)


# ------------------------------------------------------------ registration

#: The sub-packages whose modules register with fairseq.
REGISTERING_PACKAGES = ("data", "modules", "tasks", "models", "criterions", "generation")

_registration = {"done": False, "running": False}
_import_depth = threading.local()  # mdsfair.* modules being executed by this thread


def is_registered() -> bool:
    """Whether :func:`register` has run in this process."""
    return _registration["done"]


def register() -> None:
    """Register every mdsfair task, model, architecture and criterion with
    fairseq and install the checkpoint checks (imports fairseq and torch).
    Runs once per process; later calls return at once."""
    if _registration["done"] or _registration["running"]:
        return
    _registration["running"] = True
    try:
        for package in REGISTERING_PACKAGES:
            importlib.import_module(f"{__name__}.{package}")
        from mdsfair import checkpoints

        checkpoints.install_fairseq_hooks()
        _registration["done"] = True
    finally:
        _registration["running"] = False
    _RegisterAfterFairseqImport.uninstall()


def _register_when_ready() -> None:
    """Register if fairseq is imported and no mdsfair module is half done."""
    if _registration["done"] or _registration["running"] or getattr(_import_depth, "value", 0):
        return
    if "fairseq" in sys.modules:
        register()


class _ChainedLoader(importlib.abc.Loader):
    """Executes a module with its own loader, then tries to register."""

    def __init__(self, loader, counts_depth: bool):
        self.loader = loader
        self.counts_depth = counts_depth

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # The module sees its real loader (tracebacks, get_source, reload).
        module.__loader__ = self.loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        if self.counts_depth:
            _import_depth.value = getattr(_import_depth, "value", 0) + 1
        try:
            self.loader.exec_module(module)
        finally:
            if self.counts_depth:
                _import_depth.value -= 1
        _register_when_ready()

    def __getattr__(self, name):
        return getattr(self.loader, name)


class _RegisterAfterFairseqImport(importlib.abc.MetaPathFinder):
    """Wraps the loaders of ``fairseq`` and of ``mdsfair.*`` modules so that
    registration runs after fairseq is imported (see the module docstring)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "fairseq" and not fullname.startswith(__name__ + "."):
            return None
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ChainedLoader(spec.loader, counts_depth=fullname != "fairseq")
                return spec
        return None

    @classmethod
    def install(cls) -> None:
        if not any(isinstance(finder, cls) for finder in sys.meta_path):
            sys.meta_path.insert(0, cls())

    @classmethod
    def uninstall(cls) -> None:
        sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, cls)]


silence_known_warnings()
_map_source_checkout_preprocess()

if "fairseq" in sys.modules:
    register()
else:
    _RegisterAfterFairseqImport.install()
