"""``python -m mdsfair.checkpoints verify|stamp FILE...``
(``mdsfair/checkpoints/__main__.py``): one line per file, a file that cannot
be read named with the reason, and the program's file run once.
"""

import pytest
import torch

from mdsfair.checkpoints.__main__ import cli_main
from mdsfair.checkpoints.diagnosis import CheckpointFileError
from mdsfair.checkpoints.stamping import restamp_state, verify
from tests.utils import run_python


def saved_checkpoint(path) -> str:
    """A checkpoint of two tensors whose record holds their checksum (no data fingerprint)."""
    state = {"model": {"w": torch.arange(6, dtype=torch.float32).view(2, 3), "b": torch.ones(3)}, "task_state": {}}
    restamp_state(state)
    torch.save(state, path)
    return str(path)


def test_verify_names_a_missing_file_in_one_line(tmp_path, capsys):
    missing = str(tmp_path / "missing.pt")
    with pytest.raises(CheckpointFileError) as error:
        verify(missing)
    assert str(error.value) == f"cannot read checkpoint {missing}: no such file or directory"
    good = saved_checkpoint(tmp_path / "good.pt")
    assert cli_main(["verify", missing, good]) == 1  # the other files are still checked
    out, err = capsys.readouterr()
    assert err == f"error: cannot read checkpoint {missing}: no such file or directory\n"
    assert out == f"{good}: OK (2 tensors verified); trained on ?\n"


def test_verify_names_a_folder(tmp_path):
    with pytest.raises(CheckpointFileError) as error:
        verify(str(tmp_path))
    assert str(error.value) == f"cannot read checkpoint {tmp_path}: is a directory"


def test_stamp_records_the_changed_weights(tmp_path, capsys):
    path = saved_checkpoint(tmp_path / "edited.pt")
    state = torch.load(path)
    state["model"]["w"] += 1  # a deliberate edit after the checksum was recorded
    torch.save(state, path)
    assert cli_main(["verify", path]) == 1
    assert "1 of 2 tensors differ: w" in capsys.readouterr().err
    assert cli_main(["stamp", path]) == 0
    assert capsys.readouterr().out == f"{path}: stamped 2 tensors\n"
    assert cli_main(["verify", path]) == 0


def test_python_m_runs_the_command_and_its_file_once(tmp_path):
    good = saved_checkpoint(tmp_path / "good.pt")
    result = run_python(["-m", "mdsfair.checkpoints", "verify", good], cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"{good}: OK (2 tensors verified); trained on ?\n",
        "",
    )
    # What `python -m` runs (a package's __main__.py), run as runpy runs it; no
    # module imported on the way (the command, the checks) may import that file
    # again under its own name, which would run it twice. (multiprocessing,
    # imported with torch, names the running __main__ module __mp_main__ too.)
    program = "\n".join(
        [
            "import importlib.util, runpy, sys",
            "spec = importlib.util.find_spec('mdsfair.checkpoints')",
            "if spec.submodule_search_locations is not None:",
            "    spec = importlib.util.find_spec('mdsfair.checkpoints.__main__')",
            "try:",
            "    runpy.run_module('mdsfair.checkpoints', run_name='__main__', alter_sys=True)",
            "except SystemExit as exit:",
            "    assert exit.code == 0, exit.code",
            "print(sorted(name for name, module in sys.modules.items()",
            "             if getattr(module, '__file__', None) == spec.origin and name not in ('__main__', '__mp_main__')))",
        ]
    )
    result = run_python(["-c", program, "verify", good], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{good}: OK (2 tensors verified); trained on ?", "[]"]
