"""Test-session settings: one intra-op thread, Ctrl-C not ignored, the
device of the model tests (``--device cuda`` or ``MDSFAIR_TEST_DEVICE=cuda``
runs the model contract, every architecture, on the GPU).

The tests run tiny models, for which thread start-up costs more than it
saves; on a loaded 2-core machine two threads made a tiny transformer step ten
times slower. The environment variable reaches the fairseq subprocesses too.
"""

import os
import signal

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
