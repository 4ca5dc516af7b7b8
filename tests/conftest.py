"""Test-session settings: one intra-op thread, Ctrl-C not ignored, the
device of the model tests (``--device cuda`` or ``MDSFAIR_TEST_DEVICE=cuda``
runs the model contract, every architecture, on the GPU), whole files per
pytest-xdist worker, and the data and checkpoints that several test files read.

The tests run tiny models, for which thread start-up costs more than it
saves; on a loaded 2-core machine two threads made a tiny transformer step ten
times slower. The environment variable reaches the fairseq subprocesses too.
The cores are used by pytest-xdist instead (``-n 2``: two worker processes,
one thread each); the suite runs without the plugin too.
"""

import os
import signal
from typing import Dict

import pytest
import torch

os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)


def pytest_addoption(parser):
    parser.addoption(
        "--device",
        choices=["cpu", "cuda"],
        default=os.environ.get("MDSFAIR_TEST_DEVICE", "cpu"),
        help="device of the model-contract tests (tests/test_model_contract.py: every architecture's forward, "
        "beam search, save/load, hub, bf16/fp16, activation checkpointing, --update-freq through fairseq's "
        "Trainer); default $MDSFAIR_TEST_DEVICE or cpu",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Under pytest-xdist (``-n N``) without a ``--dist`` of the command
    line, hand each worker whole test files (``--dist loadfile``) rather than
    single tests (xdist's default, ``load``): a module-scoped fixture (a
    data-bin, a trained tiny model: seconds each) is then built by one worker
    only, not by every worker that gets one of the module's tests. Runs before
    xdist's own hook, which turns ``no`` into ``load``; without the plugin
    there is no ``numprocesses`` option and nothing changes."""
    if getattr(config.option, "numprocesses", None) and config.option.dist == "no" and not config.option.distload:
        config.option.dist = "loadfile"


def pytest_configure(config):
    """Register mdsfair with fairseq once for the session, explicitly: the
    tests parse fairseq command lines with ``--user-dir mdsfair`` in this
    process, and fairseq skips a user dir whose package is already imported
    (``import mdsfair`` itself registers nothing when fairseq comes later; see
    :func:`mdsfair.register`). Torch is imported above anyway; the commands'
    own start-up is checked in fresh interpreters (tests/test_startup.py)."""
    import mdsfair

    mdsfair.register()
    sigint_not_ignored()
    device = config.getoption("--device")
    if device == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda (or MDSFAIR_TEST_DEVICE=cuda) but torch sees no CUDA device")
    os.environ["MDSFAIR_TEST_DEVICE"] = device  # read by tests/model_contract.py: test_device()


def sigint_not_ignored() -> None:
    """A shell without job control starts a background job with SIGINT ignored
    (``nohup pytest ... &``, ``cmd &`` in a script, some CI runners), Python
    then keeps it ignored, and an ignored signal stays ignored across ``exec``:
    the Ctrl-C tests would interrupt processes that never see it (a
    ``KeyboardInterrupt`` that does not come, commands that run to their
    timeout). The session restores Python's handler, so that the processes it
    starts get SIGINT's default action, as from a terminal."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def contract_data(tmp_path_factory) -> Dict[str, str]:
    """The model contract's clusters (``raw``) and data-bin (``data-bin``:
    side data and ``<doc-sep>``; :func:`tests.model_contract.make_contract_data`),
    built once per session (per xdist worker) for the test files that only
    read it."""
    from tests.model_contract import make_contract_data

    return make_contract_data(str(tmp_path_factory.mktemp("contract_data")))


@pytest.fixture(scope="session")
def tiny_bart(tmp_path_factory) -> Dict[str, str]:
    """Synthetic clusters (``raw``: 24 train, 8 valid, 8 test), their data-bin
    (``data-bin``) and fairseq's own ``bart`` at tiny dimensions trained on it
    for one update (``checkpoint``, alone in its directory): the BART
    checkpoint that the derived architectures (PageSum, HierEncDec) restore
    from. Built once per session (per xdist worker); the tests only read it."""
    from tests.utils import make_tiny_bart_checkpoint, make_tiny_data_bin

    work = str(tmp_path_factory.mktemp("tiny_bart"))
    data_bin = make_tiny_data_bin(work, train=24, valid=8, test=8)
    checkpoint = make_tiny_bart_checkpoint(data_bin, os.path.join(work, "bart"))
    return {"raw": os.path.join(work, "raw"), "data-bin": data_bin, "checkpoint": checkpoint}


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Dict[str, str]:
    """Synthetic clusters (``raw``: 8 train, 4 valid, 4 test) and their
    data-bin (``data-bin``, a SentencePiece vocabulary of about 200 pieces):
    what each model's train-and-generate test trains on. Built once per
    session (per xdist worker); the tests only read it."""
    from tests.utils import make_tiny_data_bin

    work = str(tmp_path_factory.mktemp("tiny_data"))
    data_bin = make_tiny_data_bin(work, train=8, valid=4, test=4, vocab_size=200)
    return {"raw": os.path.join(work, "raw"), "data-bin": data_bin}
