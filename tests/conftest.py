"""Test-session settings: one intra-op thread.

The tests run tiny models, for which thread start-up costs more than it
saves; on a loaded 2-core machine two threads made a tiny transformer step ten
times slower. The environment variable reaches the fairseq subprocesses too.
"""
import os

import torch

os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)


def pytest_unconfigure(config):
    """PageSum models log the page cuts of every example their process
    encoded when the process exits (``mdsfair.models.pagesum_bart.
    log_page_totals``, for fairseq-generate's whole split). In the test
    process those are the tiny test models' cuts, each test checks its own,
    and printed after pytest's summary they would bury it: silence that
    exit-time logger once the session is over."""
    import logging

    logging.getLogger("mdsfair.models.pagesum_bart").disabled = True
