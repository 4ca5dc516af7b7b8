"""mdsfair: multi-document summarization systems as a fairseq plugin.

Importing this package registers every task, model, architecture and
criterion with fairseq (``--user-dir mdsfair`` or ``import mdsfair``).
"""
import os

# torch >= 2.6 loads checkpoints with ``weights_only=True`` by default, which
# refuses every fairseq checkpoint (they pickle an argparse.Namespace and
# omegaconf objects). fairseq checkpoints are trusted local files, so restore
# the old default for this process before anything loads one.
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")

__version__ = "0.1.0"


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
    import sys

    spec = importlib.util.spec_from_file_location(
        __name__ + ".preprocess", os.path.join(sibling, "__init__.py"), submodule_search_locations=[sibling]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)


_map_source_checkout_preprocess()

from mdsfair import data  # noqa: E402,F401
from mdsfair import modules  # noqa: E402,F401
from mdsfair import tasks  # noqa: E402,F401
from mdsfair import models  # noqa: E402,F401
from mdsfair import criterions  # noqa: E402,F401
from mdsfair import generation  # noqa: E402,F401
