"""Nothing lost, nobody let in (issue 22 items 1, 2 and 11): one
``mdsfair-preprocess`` run per ``--destdir`` at a time (a lock naming its
owner; a stale one reported, removed only with ``--break-stale-lock``),
``--overwrite`` removing only files an earlier mdsfair manifest lists, and
Ctrl-C leaving one line, exit status 130 and the destination as it was.

Every check compares a before/after listing of the folders involved with
SHA-256 checksums (hidden files included), and the messages' text.
"""

import argparse
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from mdsfair.preprocess.binarize import run
from mdsfair.preprocess.destdir import JOURNAL_NAME, LOCK_NAME, STAGING_PREFIX
from tests.utils import REPO_ROOT

CLUSTERS = [
    {
        "id": "c0",
        "documents": [
            "The storm hit Calden on Monday. Power failed.\n\nRepairs began on Tuesday.",
            "Officials said repairs would take a week.",
        ],
        "summary": "A storm hit Calden. Repairs take a week.",
    },
    {
        "id": "c1",
        "documents": ["Mira Holt designed the bridge. It opened in 1987.", "The bridge is 340 metres long."],
        "summary": "Mira Holt designed the 340 metre bridge.",
    },
    {
        "id": "c2",
        "documents": ["The council approved a new park. Work starts in May."],
        "summary": "A park was approved.",
    },
]


def write_jsonl(path, rows):
    path.write_text(
        "".join(json.dumps({**row, "id": f"{row['id']}-{i}"}) + "\n" for i, row in enumerate(rows)), encoding="utf-8"
    )
    return str(path)


def raw_splits(root, **splits):
    raw = root / "raw"
    raw.mkdir(exist_ok=True)
    return {name: write_jsonl(raw / f"{name}.jsonl", rows) for name, rows in splits.items()}


def split_args(paths):
    return [arg for name, path in paths.items() for arg in ("--split", f"{name}={path}")]


def preprocess(paths, dest, *extra):
    return run([*split_args(paths), "--destdir", str(dest), "--vocab-size", "60", "--no-progress-bar", *extra])


def refused_preprocess(paths, dest, capsys, *extra) -> str:
    """Run mdsfair-preprocess expecting its refusal (exit 1); its stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        preprocess(paths, dest, *extra)
    assert info.value.code == 1
    return capsys.readouterr().err


def snapshot(folder):
    """Every file under ``folder`` (hidden ones too) with its SHA-256."""
    listing = {}
    for root, directories, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                listing[os.path.relpath(path, folder)] = hashlib.sha256(handle.read()).hexdigest()
        for name in directories:
            listing[os.path.relpath(os.path.join(root, name), folder) + "/"] = "dir"
    return listing


def manifest_of(dest):
    with open(os.path.join(dest, "mdsfair.json"), encoding="utf-8") as handle:
        return json.load(handle)


def command(*args):
    return [sys.executable, "-m", "mdsfair.preprocess.binarize", *args]


def environment():
    return dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


# ------------------------------------------------ 2. --overwrite and ownership


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_mdsfair_did_not_write_is_refused_and_nothing_removed(tmp_path, capsys, overwrite):
    paths = raw_splits(tmp_path, train=CLUSTERS * 3)
    user = tmp_path / "corpus"
    user.mkdir()
    (user / "train.src").write_text("raw source text\n", encoding="utf-8")
    (user / "notes.txt").write_text("my notes\n", encoding="utf-8")
    before = snapshot(user)
    err = refused_preprocess(paths, user, capsys, *(["--overwrite"] if overwrite else []))
    assert (
        f"--destdir {user} is not empty and holds no mdsfair.json, so mdsfair-preprocess did not write it; "
        "it holds 2 entries: notes.txt, train.src."
    ) in err
    assert "--overwrite" not in err  # never recommended for a folder mdsfair did not write
    assert snapshot(user) == before  # nothing removed, no lock or staging folder left


def test_overwrite_removes_only_files_the_old_manifest_lists(tmp_path, capsys):
    paths = raw_splits(tmp_path, train=CLUSTERS * 3, valid=CLUSTERS, test=CLUSTERS)
    dest = tmp_path / "bin"
    preprocess(paths, dest)
    old_files = set(manifest_of(dest)["files"])
    assert {"valid.source.bin", "valid.ids.txt", "spm.vocab"} <= old_files
    # The user's files beside the data-bin, one named like an mdsfair output but listed by no manifest.
    (dest / "notes.txt").write_text("my notes on this data-bin\n", encoding="utf-8")
    (dest / "extra.source.bin").write_bytes(b"\x00\x01user data")
    users = {name: digest for name, digest in snapshot(dest).items() if name in ("notes.txt", "extra.source.bin")}
    capsys.readouterr()
    # Without --overwrite a data-bin is refused, recommending --overwrite (it is mdsfair's).
    with pytest.raises(SystemExit):
        preprocess(paths, dest)
    err = capsys.readouterr().err
    assert f"--destdir {dest} is not empty (it holds a data-bin: " in err
    assert (
        "give --overwrite to replace the data-bin (only the files its mdsfair.json lists are removed; "
        "other files stay)" in err
    )
    del paths["valid"]
    preprocess(paths, dest, "--overwrite", "--vocab-size", "70")
    manifest = manifest_of(dest)
    after = snapshot(dest)
    assert sorted(manifest["splits"]) == ["test", "train"]
    assert set(after) == set(manifest["files"]) | {"notes.txt", "extra.source.bin"}
    assert {name: after[name] for name in users} == users  # byte for byte
    assert not any(name.startswith("valid.") for name in after)  # listed by the old manifest: removed
    assert LOCK_NAME not in after and not any(name.startswith(STAGING_PREFIX) for name in after)


def test_the_manifest_is_moved_in_last_and_nothing_names_the_staging_folder(tmp_path, monkeypatch):
    paths = raw_splits(tmp_path, train=CLUSTERS * 3, test=CLUSTERS)
    dest = tmp_path / "bin"
    preprocess(paths, dest)
    moves = []
    real_replace = os.replace

    def recording_replace(source, target):
        moves.append((os.path.dirname(os.path.abspath(target)), os.path.basename(target)))
        return real_replace(source, target)

    monkeypatch.setattr(os, "replace", recording_replace)
    preprocess(paths, dest, "--overwrite")
    into_dest = [name for folder, name in moves if folder == str(dest)]
    manifest = manifest_of(dest)
    assert sorted(into_dest) == sorted(set(manifest["files"]) | {JOURNAL_NAME})
    assert into_dest[-1] == "mdsfair.json" and into_dest[0] == JOURNAL_NAME
    text = (dest / "mdsfair.json").read_text(encoding="utf-8")
    assert STAGING_PREFIX not in text
    assert sorted(os.listdir(dest)) == sorted(manifest["files"])


def test_an_interrupted_swap_leaves_a_journal_the_next_overwrite_accepts(tmp_path):
    paths = raw_splits(tmp_path, train=CLUSTERS * 3, valid=CLUSTERS)
    dest = tmp_path / "bin"
    preprocess(paths, dest)
    old = manifest_of(dest)["files"]
    # What a crash between removing the old manifest and moving the new one in leaves.
    (dest / JOURNAL_NAME).write_text(json.dumps({"old": old, "new": old}), encoding="utf-8")
    os.remove(dest / "mdsfair.json")
    (dest / "notes.txt").write_text("mine\n", encoding="utf-8")
    del paths["valid"]
    preprocess(paths, dest, "--overwrite")
    assert set(os.listdir(dest)) == set(manifest_of(dest)["files"]) | {"notes.txt"}


# ------------------------------------------------------ 1. the lock, 11. Ctrl-C


def wait_for(condition, seconds=120.0, what=""):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def staging_files(dest):
    return [
        os.path.join(name, f)
        for name in os.listdir(dest)
        if name.startswith(STAGING_PREFIX)
        for f in os.listdir(os.path.join(dest, name))
    ]


@pytest.mark.slow
def test_a_second_run_is_refused_while_the_first_holds_the_lock_and_ctrl_c_restores_the_destination(tmp_path):
    """Two real processes: the first blocks reading a named pipe (a split not
    yet written) after it has written SentencePiece, dict.txt and the
    training split into its staging folder; the second is refused naming the
    first's pid and host; Ctrl-C to the first's process group (as a terminal
    sends it, workers included) gives one line, status 130 and the old
    data-bin byte for byte."""
    paths = raw_splits(tmp_path, train=CLUSTERS * 8, test=CLUSTERS)
    dest = tmp_path / "bin"
    preprocess(paths, dest)
    (dest / "notes.txt").write_text("mine\n", encoding="utf-8")
    before = snapshot(dest)
    pipe = tmp_path / "valid.jsonl"
    os.mkfifo(pipe)
    first_args = [
        *split_args({**paths, "valid": str(pipe)}),
        "--destdir",
        str(dest),
        "--vocab-size",
        "60",
        "--no-progress-bar",
        "--overwrite",
        "--workers",
        "2",
        "--chunk-size",
        "1",
    ]
    with open(tmp_path / "first.err", "w") as first_err:
        first = subprocess.Popen(
            command(*first_args), stdout=subprocess.DEVNULL, stderr=first_err, env=environment(), start_new_session=True
        )
        try:
            wait_for(
                lambda: any(f.endswith("train.ids.txt") for f in staging_files(dest)) or first.poll() is not None,
                what="the first run to write its training split",
            )
            assert first.poll() is None, (tmp_path / "first.err").read_text()
            lock = json.loads((dest / LOCK_NAME).read_text(encoding="utf-8"))
            assert lock["pid"] == first.pid and lock["host"] == socket.gethostname()
            during = snapshot(dest)
            second = subprocess.run(
                command(
                    *split_args(paths), "--destdir", str(dest), "--vocab-size", "60", "--no-progress-bar", "--overwrite"
                ),
                capture_output=True,
                text=True,
                env=environment(),
                timeout=300,
            )
            assert second.returncode == 1
            assert (
                f"mdsfair-preprocess: error: --destdir {dest} is in use by another mdsfair-preprocess run: "
                f"pid {first.pid} on host {socket.gethostname()}, started {lock['started']}"
            ) in second.stderr
            assert f"lock file {dest / LOCK_NAME}. Wait for it to finish" in second.stderr
            assert "Traceback" not in second.stderr
            # The second run changed nothing: the old data-bin, the first run's lock and staging folder.
            outside = lambda listing: {k: v for k, v in listing.items() if not k.startswith(STAGING_PREFIX)}  # noqa: E731
            assert outside(snapshot(dest)) == outside(during) == {**before, LOCK_NAME: during[LOCK_NAME]}
            assert [k for k in snapshot(dest) if k.startswith(STAGING_PREFIX) and k.endswith("/")] == [
                k for k in during if k.startswith(STAGING_PREFIX) and k.endswith("/")
            ]
            time.sleep(1.0)  # let the first run reach the pipe
            os.killpg(first.pid, signal.SIGINT)
            assert first.wait(timeout=120) == 130
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
                first.wait()
    err = (tmp_path / "first.err").read_text()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.strip().splitlines()[-1] == (
        f"mdsfair-preprocess: interrupted; nothing written to {dest} (partial output removed, the directory is as "
        "it was before the run)"
    )
    os.remove(pipe)
    assert snapshot(dest) == before  # old data-bin and notes byte for byte; no lock, no staging folder


@pytest.mark.slow
def test_ctrl_c_in_a_new_destination_removes_it(tmp_path):
    paths = raw_splits(tmp_path, train=CLUSTERS * 3)
    pipe = tmp_path / "valid.jsonl"
    os.mkfifo(pipe)
    dest = tmp_path / "new-bin"
    with open(tmp_path / "err", "w") as err_file:
        process = subprocess.Popen(
            command(
                *split_args({**paths, "valid": str(pipe)}),
                "--destdir",
                str(dest),
                "--vocab-size",
                "60",
                "--no-progress-bar",
            ),
            stdout=subprocess.DEVNULL,
            stderr=err_file,
            env=environment(),
            start_new_session=True,
        )
        try:
            wait_for(
                lambda: (
                    any(f.endswith("train.ids.txt") for f in staging_files(dest))
                    if dest.is_dir()
                    else process.poll() is not None
                ),
                what="the training split to be written",
            )
            time.sleep(1.0)
            os.killpg(process.pid, signal.SIGINT)
            assert process.wait(timeout=120) == 130
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    err = (tmp_path / "err").read_text()
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"mdsfair-preprocess: interrupted; nothing written to {dest}")
    assert not dest.exists()


def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_stale_lock_is_reported_and_removed_only_with_break_stale_lock(tmp_path, capsys):
    paths = raw_splits(tmp_path, train=CLUSTERS * 3, test=CLUSTERS)
    dest = tmp_path / "bin"
    preprocess(paths, dest)
    pid = dead_pid()
    staging = f"{STAGING_PREFIX}{pid}-1"
    (dest / staging).mkdir()
    (dest / staging / "train.source.bin").write_bytes(b"half")
    owner = {
        "pid": pid,
        "host": socket.gethostname(),
        "started": "2026-01-01T00:00:00+00:00",
        "started_epoch": time.time() - 60,
        "command": "mdsfair-preprocess --destdir bin",
        "staging": staging,
    }
    (dest / LOCK_NAME).write_text(json.dumps(owner), encoding="utf-8")
    before = snapshot(dest)
    err = refused_preprocess(paths, dest, capsys, "--overwrite")
    assert (
        f"--destdir {dest} has a stale lock {dest / LOCK_NAME}: the run that made it (pid {pid} on host "
        f"{socket.gethostname()}, started 2026-01-01T00:00:00+00:00 (mdsfair-preprocess --destdir bin)) is no "
        "longer running (killed or crashed). Nothing was changed. Give --break-stale-lock to remove the lock "
        f"and its partial output {dest / staging} and go on, or remove them yourself"
    ) in err
    assert snapshot(dest) == before
    # A lock from another host is never judged stale.
    (dest / LOCK_NAME).write_text(json.dumps({**owner, "host": "elsewhere.example"}), encoding="utf-8")
    with pytest.raises(SystemExit):
        preprocess(paths, dest, "--overwrite", "--break-stale-lock")
    assert "is locked by an mdsfair-preprocess run on another host: pid" in capsys.readouterr().err
    (dest / LOCK_NAME).write_text(json.dumps(owner), encoding="utf-8")
    preprocess(paths, dest, "--overwrite", "--break-stale-lock")
    assert sorted(os.listdir(dest)) == sorted(manifest_of(dest)["files"])  # lock and dead staging folder gone


def test_the_lock_is_released_after_an_error(tmp_path, capsys):
    paths = raw_splits(tmp_path, train=CLUSTERS * 3)
    (tmp_path / "raw" / "test.jsonl").write_text(json.dumps(CLUSTERS[0]) + "\n{not json\n", encoding="utf-8")
    paths["test"] = str(tmp_path / "raw" / "test.jsonl")
    dest = tmp_path / "bin"
    with pytest.raises(SystemExit):
        preprocess(paths, dest)
    assert f"{paths['test']}:2:" in capsys.readouterr().err
    assert not dest.exists()  # created by the run, removed with its partial output and lock


@pytest.mark.slow
def test_ctrl_c_while_sentencepiece_reads_its_training_text(tmp_path):
    """SentencePiece's C++ trainer reads the Python sentence iterator: a
    Ctrl-C there became a RuntimeError (exit status 1, a traceback), and one
    during its training waited for the whole training. It now runs in a
    child process that the interrupted parent stops."""
    from mdsfair.preprocess.synthetic import write_dataset

    raw = tmp_path / "raw"
    write_dataset(str(raw), seed=1, train=3000, valid=2, test=2)  # 6.5 MB: seconds of reading
    dest = tmp_path / "bin"
    err_path = tmp_path / "err"
    with open(err_path, "w") as err_file:
        process = subprocess.Popen(
            command("--input-dir", str(raw), "--destdir", str(dest), "--vocab-size", "8000", "--no-progress-bar"),
            stdout=subprocess.DEVNULL,
            stderr=err_file,
            env=environment(),
            start_new_session=True,
        )
        try:
            wait_for(
                lambda: "training SentencePiece" in err_path.read_text() or process.poll() is not None,
                what="SentencePiece to start",
            )
            assert process.poll() is None
            os.killpg(process.pid, signal.SIGINT)  # while the training text is read
            assert process.wait(timeout=120) == 130, err_path.read_text()[-3000:]
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    err = err_path.read_text()
    assert "Traceback" not in err and "RuntimeError" not in err and "Exception ignored" not in err
    assert err.strip().splitlines()[-1].startswith(f"mdsfair-preprocess: interrupted; nothing written to {dest}")
    assert not dest.exists()


# Set by the fork-window tests below: os.register_at_fork hooks cannot be removed.
_SIGINT_DURING_FORK = []


def _send_sigint_during_fork():
    if _SIGINT_DURING_FORK:
        os.kill(os.getpid(), signal.SIGINT)


os.register_at_fork(before=_send_sigint_during_fork)


def _interrupt_next_fork():
    _SIGINT_DURING_FORK.append(True)
    return _SIGINT_DURING_FORK.clear


def test_ctrl_c_during_the_fork_of_the_sentencepiece_child_is_not_lost():
    """A Ctrl-C that came while the SentencePiece child was being forked ran
    Python's handler inside an at-fork hook: "Exception ignored ...
    KeyboardInterrupt", and the run went on and exited 0 (seen in CI). SIGINT
    is now recorded over the fork and raised after it (a thread mask would not
    do: the run has other threads, which this pytest process has too)."""
    from mdsfair.preprocess.worker_pool import call_in_child

    stop = _interrupt_next_fork()
    try:
        with pytest.raises(KeyboardInterrupt):
            call_in_child(sum, [1, 2])
    finally:
        stop()
    assert call_in_child(sum, [1, 2]) == 3  # the mask is restored and the next child runs
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_session_does_not_inherit_an_ignored_sigint():
    """The Ctrl-C tests need SIGINT's default action; a background job of a
    shell without job control starts with SIGINT ignored (tests/conftest.py
    restores Python's handler, and the processes the tests start inherit it)."""
    from tests.conftest import sigint_not_ignored

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sigint_not_ignored()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        child = subprocess.run(
            [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "default_int_handler" in child.stdout, child.stdout + child.stderr
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_ctrl_c_during_the_fork_of_the_encoding_workers_is_raised_and_stops_them(tmp_path):
    from mdsfair.preprocess import worker_pool

    started = []

    class RecordingPool(worker_pool.OrderedWorkerPool):
        def __init__(self, *args, **kwargs):
            try:
                super().__init__(*args, **kwargs)
            finally:
                started.extend(getattr(self, "processes", []))

    stop = _interrupt_next_fork()
    try:
        with pytest.raises(KeyboardInterrupt):
            RecordingPool(2, argparse.Namespace(), str(tmp_path), {})
    finally:
        stop()
    assert started and not any(process.is_alive() for process in started)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ------------------- 4./6. a manifest that is damaged or names files outside


def without_files_list(manifest):
    """A manifest as mdsfair wrote it before ``files`` existed: ``--overwrite``
    then derives the files from its entries (``data_bin_files``)."""
    del manifest["files"]


@pytest.mark.parametrize(
    "entry, edit",
    [
        (
            "splits.train.skip_report = '../victim.txt'",
            lambda m: (without_files_list(m), m["splits"]["train"].update(skip_report="../victim.txt")),
        ),
        ("files[1] = '../victim.txt'", lambda m: m["files"].__setitem__(1, "../victim.txt")),
        (
            "subword.model = '../victim.model'",
            lambda m: (without_files_list(m), m["subword"].update(model="../victim.model")),
        ),
    ],
    ids=["skip_report", "files", "subword_model_and_its_vocab"],
)
def test_overwrite_refuses_a_manifest_naming_files_outside_the_folder(tmp_path, capsys, entry, edit):
    """Issue 22 item 6 through ``--overwrite``: ``splits.<split>.skip_report``
    was not checked, and with no ``files`` list ``--overwrite`` deleted
    ``../victim.txt``."""
    paths = raw_splits(tmp_path, train=CLUSTERS * 3, test=CLUSTERS)
    dest = tmp_path / "bin"
    preprocess(paths, dest)
    (tmp_path / "victim.txt").write_text("not mdsfair's\n", encoding="utf-8")
    (tmp_path / "victim.model").write_text("not mdsfair's\n", encoding="utf-8")
    (tmp_path / "victim.vocab").write_text("not mdsfair's\n", encoding="utf-8")
    manifest = manifest_of(dest)
    edit(manifest)
    (dest / "mdsfair.json").write_text(json.dumps(manifest), encoding="utf-8")
    before = snapshot(tmp_path)
    err = refused_preprocess(paths, dest, capsys, "--overwrite")
    assert (
        f"mdsfair-preprocess: error: --destdir {dest}: {dest / 'mdsfair.json'}: refusing a manifest whose file "
        f"names leave the data-bin directory: {entry}"
    ) in err
    assert f"Nothing was removed; it holds {len(os.listdir(dest))} entries: dict.txt, mdsfair.json" in err
    assert snapshot(tmp_path) == before  # victims, data-bin and raw files byte for byte; no lock left


def test_owned_files_are_plain_names_inside_the_folder(tmp_path):
    from mdsfair.preprocess.destdir import DestinationInUseError, owned_files

    paths = raw_splits(tmp_path, train=CLUSTERS * 3)
    dest = tmp_path / "bin"
    preprocess(paths, dest)
    manifest = manifest_of(dest)
    assert owned_files(str(dest)) == set(manifest["files"])
    # A swap journal naming a file outside is refused too, not filtered and trusted.
    (dest / JOURNAL_NAME).write_text(json.dumps({"old": ["dict.txt", "../victim.txt"], "new": []}), encoding="utf-8")
    with pytest.raises(
        DestinationInUseError,
        match=r"refusing a swap journal whose file names leave the data-bin "
        r"directory: '\.\./victim\.txt'",
    ):
        owned_files(str(dest))


@pytest.mark.parametrize(
    "content, state, follow", [("", "is empty", "mv"), ('{"format": "mdsfair-bin', "is damaged", "rm -r")]
)
def test_overwrite_on_a_damaged_manifest_is_refused_and_its_hint_works(tmp_path, capsys, content, state, follow):
    """Issue 22 item 4: the message of a damaged manifest said "rebuild with
    --overwrite", which failed the same way. ``--overwrite`` cannot know which
    files mdsfair wrote, so it removes none; the message says to move the
    folder aside or remove it, and doing exactly that, then the same command,
    builds the data-bin."""
    paths = raw_splits(tmp_path, train=CLUSTERS * 3, test=CLUSTERS)
    dest = tmp_path / "bin"
    preprocess(paths, dest)
    (dest / "notes.txt").write_text("mine\n", encoding="utf-8")
    (dest / "mdsfair.json").write_text(content, encoding="utf-8")
    before = snapshot(tmp_path)
    err = refused_preprocess(paths, dest, capsys, "--overwrite")
    assert f"mdsfair-preprocess: error: --destdir {dest}: {dest / 'mdsfair.json'}: the manifest {state}" in err
    assert f"Nothing was removed; it holds {len(os.listdir(dest))} entries: dict.txt, mdsfair.json, notes.txt" in err
    assert snapshot(tmp_path) == before
    hint = re.search(rf"\(({follow} [^)]+)\)", err).group(1)
    subprocess.run(["sh", "-c", hint], check=True, timeout=60)  # the hint, literally
    preprocess(paths, dest, "--overwrite")  # the same command again
    assert sorted(os.listdir(dest)) == sorted(manifest_of(dest)["files"])
    if follow == "mv":  # the damaged data-bin, moved aside byte for byte
        old = {
            name[len("bin/") :]: digest for name, digest in before.items() if name.startswith("bin/") and name != "bin/"
        }
        assert snapshot(str(dest) + ".damaged") == old
    else:
        assert not os.path.exists(str(dest) + ".damaged")
