"""Test-session settings: one intra-op thread.

The tests run tiny models, for which thread start-up costs more than it
saves; on a loaded 2-core machine two threads made a tiny transformer step ten
times slower. The environment variable reaches the fairseq subprocesses too.
"""
import os

import torch

os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)


def pytest_collection_finish(session):
    """Register mdsfair with fairseq once the test modules are imported, if
    any of them imported fairseq: what fairseq's ``--user-dir`` does for its
    commands (``import mdsfair`` itself registers nothing when fairseq comes
    later; see :func:`mdsfair.register`). Test files that need no model never
    import fairseq and stay fast."""
    import sys

    if "fairseq" in sys.modules:
        import mdsfair

        mdsfair.register()
