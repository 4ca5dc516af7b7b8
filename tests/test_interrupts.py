"""Ctrl-C during ``mdsfair-train`` and ``mdsfair-generate`` (issue 22 item
11; preprocess: tests/test_destination_safety.py): one line instead of a
traceback, exit status 130, and no half-written output. SIGINT goes to the
real process's group, as a terminal sends it, after it has started writing."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.utils import REPO_ROOT, TINY_BART_ARGS, USER_DIR, make_tiny_data_bin, snapshot

pytestmark = pytest.mark.slow  # the slow tier: docs/tests.md

TRAIN = [
    "--task",
    "multidoc_summarization",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--max-tokens",
    "4096",
    "--no-progress-bar",
    "--cpu",
    "--seed",
    "1",
    "--disable-validation",
    "--num-workers",
    "0",
]


def environment():
    return dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


def console_script(function, *args):
    """The console script's function on this checkout (mdsfair-train -> train_main)."""
    return [sys.executable, "-c", f"from mdsfair.cli import {function}; {function}()", *args]


def wait_for(condition, process, seconds=240.0, what=""):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        if process.poll() is not None:
            raise AssertionError(f"the process ended ({process.returncode}) before {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def interrupt(process, err_path):
    """SIGINT to the process group; returns (exit status, stderr)."""
    try:
        os.killpg(process.pid, signal.SIGINT)
        status = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    with open(err_path, encoding="utf-8") as handle:
        return status, handle.read()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli.train import main

    work = str(tmp_path_factory.mktemp("interrupts"))
    data_bin = make_tiny_data_bin(work, train=12, valid=4, test=30, vocab_size=200)
    save_dir = os.path.join(work, "checkpoints")
    parsed = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--save-dir",
            save_dir,
            *TRAIN,
            *TINY_BART_ARGS,
            "--max-update",
            "1",
            "--no-epoch-checkpoints",
        ],
    )
    main(convert_namespace_to_omegaconf(parsed))
    return {"data_bin": data_bin, "checkpoint": os.path.join(save_dir, "checkpoint_last.pt"), "work": work}


def test_ctrl_c_in_training_leaves_only_complete_checkpoints(trained, tmp_path):
    from mdsfair.checkpoints.stamping import verify

    save_dir = tmp_path / "run"
    args = [
        trained["data_bin"],
        "--save-dir",
        str(save_dir),
        *TRAIN,
        *TINY_BART_ARGS,
        "--max-update",
        "100000",
        "--save-interval-updates",
        "1",
        "--keep-interval-updates",
        "1",
        "--no-epoch-checkpoints",
    ]
    err_path = tmp_path / "err"
    with open(err_path, "w") as err:
        process = subprocess.Popen(
            console_script("train_main", *args),
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=environment(),
            start_new_session=True,
            cwd=REPO_ROOT,
        )
        wait_for(lambda: (save_dir / "checkpoint_last.pt").exists(), process, what="the first checkpoint")
        time.sleep(1.5)  # several more saves and copies: the interrupt may land inside one
        status, stderr = interrupt(process, err_path)
    assert status == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"mdsfair-train: interrupted; the checkpoints in {save_dir} are the last complete ones (none is half-written)"
    )
    names = sorted(os.listdir(save_dir))
    assert "checkpoint_last.pt" in names and not [name for name in names if name.endswith(".tmp")], names
    for name in names:
        record = verify(str(save_dir / name))  # loads, and checks every tensor against the saved checksum
        assert record is not None and record["model_checksum"]["tensors"], name


def generate_args(trained, results, *extra):
    return [
        trained["data_bin"],
        "--path",
        trained["checkpoint"],
        "--task",
        "multidoc_summarization",
        "--gen-subset",
        "test",
        "--cpu",
        "--num-workers",
        "0",
        "--results-path",
        str(results),
        *extra,
    ]


def test_ctrl_c_in_generation_leaves_the_earlier_results_file(trained, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "generate-test.txt").write_text("an earlier run's hypotheses\n", encoding="utf-8")
    before = snapshot(results)
    err_path = tmp_path / "err"
    # An untrained model rarely ends a hypothesis: up to 200 tokens, one cluster per batch.
    args = generate_args(trained, results, "--beam", "4", "--max-len-b", "200", "--batch-size", "1")
    with open(err_path, "w") as err:
        process = subprocess.Popen(
            console_script("generate_main", *args),
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=environment(),
            start_new_session=True,
            cwd=REPO_ROOT,
        )

        def started_writing():
            return any(
                name.startswith("generate-test.txt") and os.path.getsize(os.path.join(root, name)) > 0
                for root, _, files in os.walk(results)
                if root != str(results)
                for name in files
            )

        wait_for(started_writing, process, what="the first hypotheses to be written")
        status, stderr = interrupt(process, err_path)
    assert status == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"mdsfair-generate: interrupted; nothing written to {results / 'generate-test.txt'} (partial output removed; "
        "an earlier file is left as it was)"
    )
    assert snapshot(results) == before


def test_a_finished_generation_replaces_the_results_file_whole(trained, tmp_path):
    from fairseq import options
    from fairseq_cli.generate import main

    from mdsfair.fairseq_patches import results_written_whole

    results = tmp_path / "new" / "results"
    parsed = options.parse_args_and_arch(
        options.get_generation_parser(),
        generate_args(
            trained, results, "--beam", "2", "--max-len-b", "3", "--batch-size", "16", "--user-dir", USER_DIR
        ),
    )
    results_written_whole(main)(parsed)
    assert os.listdir(results) == ["generate-test.txt"]  # no staging folder left
    lines = (results / "generate-test.txt").read_text(encoding="utf-8").splitlines()
    assert sum(line.startswith("H-") for line in lines) == 30
    # An error inside fairseq's main: nothing written, and the results path this run created is removed again.
    failing = tmp_path / "failing"
    parsed = options.parse_args_and_arch(
        options.get_generation_parser(),
        generate_args(trained, failing, "--beam", "2", "--max-len-b", "3", "--user-dir", USER_DIR),
    )
    parsed.path = str(tmp_path / "missing.pt")
    with pytest.raises(Exception):
        results_written_whole(main)(parsed)
    assert not failing.exists()


def test_checkpoint_copies_and_saves_leave_the_old_file_whole_when_interrupted(tmp_path, monkeypatch):
    """fairseq saves a checkpoint to FILE.tmp and renames it (atomic), but
    makes checkpoint_last.pt / checkpoint_best.pt with ``PathManager.copy``,
    which without iopath is ``shutil.copyfile`` onto the old file: an
    interrupt cut it short. mdsfair's hooks make the copy atomic and remove an
    interrupted FILE.tmp."""
    import shutil

    import torch
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    import mdsfair

    mdsfair.register()
    source, last = tmp_path / "checkpoint_1_5.pt", tmp_path / "checkpoint_last.pt"
    source.write_bytes(b"new checkpoint " * 1000)
    last.write_bytes(b"old checkpoint")
    real_copyfile = shutil.copyfile

    def interrupted_copy(src, dst, *args, **kwargs):
        with open(dst, "wb") as handle:
            handle.write(b"new chec")  # part of it, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "copyfile", interrupted_copy)
    with pytest.raises(KeyboardInterrupt):
        PathManager.copy(str(source), str(last), overwrite=True)
    assert last.read_bytes() == b"old checkpoint"
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_1_5.pt", "checkpoint_last.pt"]
    monkeypatch.setattr(shutil, "copyfile", real_copyfile)
    assert PathManager.copy(str(source), str(last), overwrite=True)
    assert last.read_bytes() == source.read_bytes()

    def interrupted_save(obj, handle, *args, **kwargs):
        handle.write(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", interrupted_save)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_utils.torch_persistent_save({"model": {}}, str(last))
    assert last.read_bytes() == source.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_1_5.pt", "checkpoint_last.pt"]  # no checkpoint_last.pt.tmp
