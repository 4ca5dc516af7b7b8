"""Issue 47, class 5 (check-then-write races): a command that creates an
output folder or file claims it atomically (an exclusive lock created with
``O_CREAT | O_EXCL``, a folder made with ``os.mkdir``, a file moved in with a
hard link), so of two runs started at once into the same destination exactly
one succeeds and the other fails with one line naming the destination; the
survivor's output is whole. Two real processes per trial."""

import json
import os
import socket
import subprocess
import sys

import pytest

from mdsfair.importers import ImportRefused
from mdsfair.importers.output import single_file_output
from mdsfair.preprocess.destdir import LOCK_NAME, single_file_lock_path
from tests.utils import REPO_ROOT

TRIALS = 3


@pytest.fixture(scope="module")
def bart_checkpoint(tmp_path_factory):
    """A tiny fairseq BART checkpoint (an hf-bart import) and its HF source."""
    from mdsfair.importers.cli import import_main
    from tests.import_fixtures import import_transformers, tiny_hf_bart

    import_transformers()
    root = tmp_path_factory.mktemp("race")
    hf_dir = str(root / "hf")
    tiny_hf_bart(hf_dir, seed=5)
    out = str(root / "bart")
    assert import_main(["hf-bart", hf_dir, out]) == 0
    return hf_dir, os.path.join(out, "model.pt")


def run_twice_at_once(arguments):
    """Start two ``mdsfair-import`` processes with ``arguments`` at the same
    time; their (return code, stdout, stderr), in start order."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "mdsfair.importers.cli", *arguments]
    processes = [
        subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        results.append((process.returncode, out, err))
    return results


def assert_one_winner(results, program, destination):
    """Exactly one run succeeded; the other's stderr is one error line naming ``destination``."""
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], [(code, err[-2000:]) for code, _, err in results]
    ((_, won_out, _),) = [result for result in results if result[0] == 0]
    ((_, _, lost_err),) = [result for result in results if result[0] == 1]
    assert destination in won_out  # its report names what it wrote
    assert "Traceback" not in lost_err
    lines = [line for line in lost_err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"{program}: error: ") and destination in lines[0], lost_err


@pytest.mark.slow
def test_class5_two_bart_to_led_runs_into_one_file_one_wins(bart_checkpoint, tmp_path):
    """The issue's case: two ``bart-to-led`` runs into the same OUT without
    --overwrite both printed "wrote" and one result was lost."""
    from fairseq import checkpoint_utils

    _, model_pt = bart_checkpoint
    for trial in range(TRIALS):
        led = str(tmp_path / f"led{trial}.pt")
        results = run_twice_at_once(
            ["bart-to-led", model_pt, led, "--max-source-positions", "200", "--attention-window", "8"]
        )
        assert_one_winner(results, "mdsfair-import bart-to-led", led)
        state = checkpoint_utils.load_checkpoint_to_cpu(led)  # the survivor's file, whole
        assert state["model"]["encoder.embed_positions.weight"].shape[0] == 200 + 2
    assert sorted(os.listdir(tmp_path)) == [f"led{trial}.pt" for trial in range(TRIALS)]  # no lock, no temporary


@pytest.mark.slow
def test_class5_two_imports_into_one_new_folder_one_wins(bart_checkpoint, tmp_path):
    """Two ``hf-bart`` imports into the same new OUT_DIR: one claims it
    (``os.mkdir``, then the folder's lock), the other is refused."""
    hf_dir, _ = bart_checkpoint
    for trial in range(TRIALS):
        out = str(tmp_path / f"bart{trial}")
        results = run_twice_at_once(["hf-bart", hf_dir, out])
        assert_one_winner(results, "mdsfair-import hf-bart", out)
        names = set(os.listdir(out))
        assert {"mdsfair.json", "model.pt", "dict.txt", "encoder.json", "vocab.bpe"} <= names
        assert not any(name.startswith(".mdsfair") for name in names), names


def test_class5_a_file_written_while_the_run_worked_is_not_replaced(tmp_path):
    """Without --overwrite the finished file is moved in only if its name is
    still free: a file that appeared meanwhile (a writer that took no lock)
    stays, and the run fails naming the path."""
    path = str(tmp_path / "out.pt")
    with pytest.raises(ImportRefused, match="already there"):
        with single_file_output(path, overwrite=False) as temporary:
            with open(temporary, "w") as handle:
                handle.write("this run's")
            with open(path, "w") as handle:
                handle.write("another writer's")
    assert open(path).read() == "another writer's"
    assert os.listdir(tmp_path) == ["out.pt"]
    with single_file_output(path, overwrite=True) as temporary:
        with open(temporary, "w") as handle:
            handle.write("replaced")
    assert open(path).read() == "replaced" and os.listdir(tmp_path) == ["out.pt"]


def test_class5_a_file_being_written_is_refused_and_a_stale_claim_is_named(tmp_path):
    """While one run holds the file's lock a second is refused naming it; a
    lock whose process is gone is reported with the lock to remove."""
    path = str(tmp_path / "out.pt")
    with single_file_output(path, overwrite=False) as temporary:
        assert os.path.exists(single_file_lock_path(path))
        with pytest.raises(ImportRefused, match=f"OUT {path} is in use by another mdsfair-import run"):
            with single_file_output(path, overwrite=True):
                pass
        with open(temporary, "w") as handle:
            handle.write("first")
    assert os.listdir(tmp_path) == ["out.pt"]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = single_file_lock_path(path)
    assert lock.endswith(f".out.pt{LOCK_NAME}")
    with open(lock, "w", encoding="utf-8") as handle:
        json.dump({"pid": dead.pid, "host": socket.gethostname(), "started": "then", "started_epoch": 0}, handle)
    with pytest.raises(ImportRefused, match=f"stale lock {lock}.*Remove {lock}"):
        with single_file_output(path, overwrite=True):
            pass
    assert open(path).read() == "first"
