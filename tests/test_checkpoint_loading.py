"""Unpickling stays confined: importing and registering mdsfair and loading a
fairseq checkpoint through it leave ``torch.load``'s weights_only default and
the process environment as they were; a checkpoint that needs more than
fairseq's own globals is refused by name unless the user trusts it."""

import os
import pickle
import subprocess
import sys

import pytest
import torch

from tests.utils import REPO_ROOT, make_tiny_bart_checkpoint, make_tiny_data_bin

#: Run in a fresh process: the test session's own imports must not decide it.
PROBE = r"""
import os, sys, torch
marker, checkpoint, hostile = sys.argv[1:4]
import mdsfair
mdsfair.register()
assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in os.environ, "import mdsfair changed the environment"
from fairseq import checkpoint_utils
state = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)
assert "model" in state
assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in os.environ, "a checkpoint load changed the environment"
try:
    torch.load(hostile)
except Exception as error:
    print("REFUSED", type(error).__name__)
print("MARKER", os.path.exists(marker))
"""


class WritesMarker:
    """Unpickling this object creates a file: what a hostile checkpoint could run."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture(scope="module")
def bart_checkpoint(tmp_path_factory):
    work = tmp_path_factory.mktemp("weights_only")
    data_bin = make_tiny_data_bin(str(work), train=16, valid=4, test=4)
    return make_tiny_bart_checkpoint(data_bin, str(work / "save"))


def hostile_file(directory, marker):
    path = os.path.join(directory, "hostile.pt")
    torch.save({"model": {}, "payload": WritesMarker(marker)}, path)
    return path


def test_user_torch_load_still_refuses_pickle_after_mdsfair_loaded_a_checkpoint(bart_checkpoint, tmp_path):
    marker = str(tmp_path / "ran.txt")
    hostile = hostile_file(str(tmp_path), marker)
    env = {k: v for k, v in os.environ.items() if k != "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"}
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, "-c", PROBE, marker, bart_checkpoint, hostile],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "REFUSED UnpicklingError" in result.stdout
    assert "MARKER False" in result.stdout and not os.path.exists(marker)


def test_checkpoint_needing_arbitrary_unpickling_is_refused_by_name(tmp_path, monkeypatch):
    import mdsfair

    mdsfair.register()
    from fairseq import checkpoint_utils

    from mdsfair.checkpoint_loading import TRUST_ENV, UntrustedCheckpointError

    marker = str(tmp_path / "ran.txt")
    hostile = hostile_file(str(tmp_path), marker)
    monkeypatch.delenv(TRUST_ENV, raising=False)
    with pytest.raises(UntrustedCheckpointError) as raised:
        checkpoint_utils.load_checkpoint_to_cpu(hostile)
    message = str(raised.value)
    assert hostile in message and "io.open" in message and f"{TRUST_ENV}=1" in message
    assert not os.path.exists(marker)
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in os.environ


def test_trusted_checkpoint_is_unpickled_for_that_load_only(tmp_path, monkeypatch):
    from mdsfair.checkpoint_loading import TRUST_ENV, load_checkpoint_file

    marker = str(tmp_path / "ran.txt")
    hostile = hostile_file(str(tmp_path), marker)
    monkeypatch.setenv(TRUST_ENV, "1")
    # torch says it unpickles fully (raised from mdsfair's call, an error under test unless expected)
    with pytest.warns(UserWarning, match="TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD detected"):
        load_checkpoint_file(hostile)
    assert os.path.exists(marker)  # the user asked for it
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in os.environ
    with pytest.raises(pickle.UnpicklingError):
        torch.load(hostile)
