"""The output directory of ``mdsfair-preprocess``: one run at a time, nothing
of anyone else's removed, nothing half-written left behind.

A data-bin holds one run's files, all encoded with one ``dict.txt``. So
(issue 22 items 1, 2 and 11):

* **Lock.** A run holds ``DESTDIR/.mdsfair.lock`` from start to end: created
  with ``O_CREAT | O_EXCL`` (atomic: of two runs started at once exactly one
  gets it) and holding the owner's pid, host, start time and command line. A
  second run into the same ``--destdir`` is refused with the owner named. A
  lock whose process is gone (same host: the pid no longer runs, or runs a
  process started after the lock) is *stale*: it is reported, never taken
  silently; ``--break-stale-lock`` removes it (and the dead run's staging
  folder) and goes on. A lock from another host cannot be checked and is
  only ever removed by hand. The lock is removed when the run ends: at
  success, on an error and on Ctrl-C.
* **Staging.** Every output file is written into a hidden staging folder
  inside ``--destdir`` (``.mdsfair-staging-PID-TIME``). Only when the whole
  run succeeded are the files moved into ``--destdir`` (``os.replace``, same
  file system) and the manifest last. An error or Ctrl-C removes the staging
  folder, so ``--destdir`` is left as it was (a directory the run created
  is removed again). A killed run (SIGKILL, power loss) leaves only the lock
  and its staging folder, which ``--break-stale-lock`` clears.
* **Ownership.** A ``--destdir`` that exists and is not empty is refused
  without ``--overwrite``. ``--overwrite`` replaces only a data-bin that
  mdsfair wrote: the files removed are those the old manifest
  (``mdsfair.json``) lists in ``files`` (:func:`data_bin_files` for a
  manifest written before that list existed) and the new run does not write
  again; every other file (a user's ``notes.txt``, input files) stays, and is
  listed in the log. A non-empty directory with no manifest was not written
  by mdsfair (a raw-data folder, say) and is refused, with or without
  ``--overwrite``, listing what it holds.
* **Swap.** Replacing an old data-bin: a journal
  (``.mdsfair.replacing.json``, the old and new file lists) is written, the
  old manifest removed, the new files moved in, old listed files the new run
  did not write removed, the new manifest moved in last and the journal
  removed. A crash inside this short window leaves no manifest but the
  journal, which the next ``--overwrite`` run accepts as proof of ownership.

The manifest accounts for its files in ``files`` (:func:`data_bin_files`):
itself, ``dict.txt``, the subword model, and per split its ``.bin``/``.idx``
streams, ``ids.txt``, ``summary.txt`` and the reference and skip-report files
its entry lists.
"""

import contextlib
import datetime
import json
import logging
import os
import shutil
import socket
import sys
import time
from typing import Dict, Iterable, List, Optional, Set

from mdsfair.data.manifest import (
    MANIFEST_NAME,
    DamagedManifestError,
    ManifestError,
    is_plain_file_name,
    read_manifest,
    restore_hint,
    write_json_atomic,
)
from mdsfair.preprocess.interrupts import sigint_recorded

logger = logging.getLogger("mdsfair.preprocess")

#: The lock file a run holds in ``--destdir``.
LOCK_NAME = ".mdsfair.lock"
#: Prefix of the hidden folder a run writes its files into.
STAGING_PREFIX = ".mdsfair-staging-"
#: The swap journal (see the module docstring).
JOURNAL_NAME = ".mdsfair.replacing.json"


class DestinationInUseError(ValueError):
    """``--destdir`` holds files and ``--overwrite`` was not given, or holds
    files mdsfair did not write."""


class DestinationLockedError(DestinationInUseError):
    """Another run holds (or held, and died holding) ``--destdir``'s lock."""


def input_paths(args) -> List[str]:
    """Every file the run reads (kept even when it lies in ``--destdir``)."""
    paths = [getattr(args, name, None) for name in ("spm_model", "gpt2_encoder_json", "gpt2_vocab_bpe", "dict")]
    paths += [spec.split("=", 1)[1] for spec in (getattr(args, "split", None) or []) if "=" in spec]
    input_dir = getattr(args, "input_dir", None)
    if input_dir and os.path.isdir(input_dir):
        paths += [os.path.join(input_dir, name) for name in os.listdir(input_dir) if name.endswith(".jsonl")]
    return [os.path.realpath(p) for p in paths if p]


def data_bin_files(manifest: Dict, trained_spm_vocab: bool = False) -> List[str]:
    """The files of a data-bin as its manifest accounts for them (names
    inside the directory), in a stable order."""
    files = [MANIFEST_NAME, manifest.get("dictionary", "dict.txt")]
    subword = manifest.get("subword") or {}
    files += [subword[key] for key in ("model", "encoder_json", "vocab_bpe") if key in subword]
    model = subword.get("model")
    if trained_spm_vocab and isinstance(model, str) and model.endswith(".model"):
        files.append(model[: -len(".model")] + ".vocab")
    streams = ["source", "target"] + list(manifest.get("structure") or []) + list(manifest.get("side_data") or {})
    for split, report in (manifest.get("splits") or {}).items():
        report = report or {}
        files += [f"{split}.{stream}.{ext}" for stream in streams for ext in ("bin", "idx")]
        files += [f"{split}.ids.txt", f"{split}.summary.txt"]
        files += [name for name in report.get("reference_files") or [] if name != f"{split}.summary.txt"]
        if report.get("skip_report"):
            files.append(report["skip_report"])
    return list(dict.fromkeys(files))


# ------------------------------------------------------------------ lock


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _process_start_epoch(pid: int) -> Optional[float]:
    """When process ``pid`` started (seconds since the epoch), from Linux's
    ``/proc``; None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/stat", encoding="ascii") as handle:
            boot = next(float(line.split()[1]) for line in handle if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat: starttime in clock ticks
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def lock_owner_state(owner: Dict) -> str:
    """``"running"``, ``"dead"`` (same host, the process is gone or the pid
    now belongs to a later process) or ``"other-host"``."""
    if owner.get("host") != socket.gethostname():
        return "other-host"
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return "dead"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        pass  # a process of another user: it exists
    started = _process_start_epoch(pid)
    if started is not None and isinstance(owner.get("started_epoch"), (int, float)):
        if started > owner["started_epoch"] + 2.0:  # the pid was reused by a process started after the lock
            return "dead"
    return "running"


def _read_lock(path: str) -> Optional[Dict]:
    try:
        with open(path, encoding="utf-8") as handle:
            owner = json.load(handle)
        return owner if isinstance(owner, dict) else None
    except (OSError, ValueError):
        return None


def _describe_owner(owner: Dict) -> str:
    return (
        f"pid {owner.get('pid')} on host {owner.get('host')}, started {owner.get('started')}"
        f" ({owner.get('command', '?')})"
    )


class DestinationLock:
    """``DESTDIR/.mdsfair.lock``, held by this process (see the module docstring).

    ``lock_path`` puts the lock elsewhere: a command that writes one file
    claims it with a lock beside it (:func:`single_file_lock_path`), its
    ``dest`` then being that file. ``break_stale_flag`` is the command's flag
    that removes a stale lock (None: it has none, and the message says to
    remove the lock by hand)."""

    def __init__(
        self,
        dest: str,
        break_stale: bool = False,
        program: str = "mdsfair-preprocess",
        label: str = "--destdir",
        lock_path: Optional[str] = None,
        break_stale_flag: Optional[str] = "--break-stale-lock",
    ):
        self.dest = dest
        self.program, self.label = program, label
        self.program_with_article = ("an " if program[:1] in "aeioum" else "a ") + program
        self.path = lock_path or os.path.join(dest, LOCK_NAME)
        self.break_stale_flag = break_stale_flag
        started = time.time()
        self.owner = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": _now(),
            "started_epoch": started,
            "command": " ".join([program] + sys.argv[1:])[:1000],
            "staging": f"{STAGING_PREFIX}{os.getpid()}-{int(started * 1000)}",
        }
        self._acquire(break_stale)
        self.held = True

    def _acquire(self, break_stale: bool) -> None:
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = _read_lock(self.path)
                if owner is None:
                    raise DestinationLockedError(
                        f"{self.label} {self.dest} is locked by {self.path}, which cannot be read (another "
                        f"{self.program} is creating it right now, or it is damaged); if no run is going on "
                        f"there, remove {self.path} and run again"
                    ) from None
                state = lock_owner_state(owner)
                if state == "running":
                    raise DestinationLockedError(
                        f"{self.label} {self.dest} is in use by another {self.program} run: "
                        f"{_describe_owner(owner)}; lock file {self.path}. Wait for it to finish (or stop it), "
                        f"or choose another {self.label}"
                    ) from None
                if state == "other-host":
                    raise DestinationLockedError(
                        f"{self.label} {self.dest} is locked by {self.program_with_article} run on another host: "
                        f"{_describe_owner(owner)}; lock file {self.path}. This host cannot tell whether it "
                        f"still runs: if it does not, remove {self.path} (and "
                        f"{os.path.join(self.dest, str(owner.get('staging', STAGING_PREFIX + '*')))}) by hand"
                    ) from None
                staging = self._staging_of(owner)
                if not break_stale:
                    leftover = f" and its partial output {staging}" if staging and os.path.exists(staging) else ""
                    remedy = (
                        f"Give {self.break_stale_flag} to remove the lock{leftover} and go on, or remove them yourself"
                        if self.break_stale_flag
                        else f"Remove {self.path}{leftover} and run again"
                    )
                    raise DestinationLockedError(
                        f"{self.label} {self.dest} has a stale lock {self.path}: the run that made it "
                        f"({_describe_owner(owner)}) is no longer running (killed or crashed). Nothing was "
                        f"changed. {remedy}"
                    ) from None
                self._break(owner, staging)
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(self.owner, handle, indent=2)
                handle.flush()
                os.fsync(handle.fileno())
            return
        raise DestinationLockedError(f"{self.label} {self.dest}: could not take the lock {self.path} (contended)")

    def _staging_of(self, owner: Dict) -> Optional[str]:
        name = owner.get("staging")
        if (
            isinstance(name, str)
            and name.startswith(STAGING_PREFIX)
            and "/" not in name
            and "\\" not in name
            and os.path.isdir(self.dest)
        ):
            return os.path.join(self.dest, name)
        return None

    def _break(self, owner: Dict, staging: Optional[str]) -> None:
        """Remove a stale lock: renamed first (atomic, so of two runs breaking
        it only one does) and checked to be the lock that was judged stale."""
        aside = f"{self.path}.broken.{os.getpid()}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return  # someone else broke it; try again
        if _read_lock(aside) != owner:  # a new live lock replaced the stale one meanwhile: put it back
            try:
                os.link(aside, self.path)
            except FileExistsError:
                pass
            os.remove(aside)
            return
        os.remove(aside)
        removed = ""
        if staging and os.path.isdir(staging):
            shutil.rmtree(staging)
            removed = f" and its partial output {staging}"
        logger.warning("--break-stale-lock: removed the stale lock of %s%s", _describe_owner(owner), removed)

    @property
    def staging(self) -> str:
        return os.path.join(self.dest, self.owner["staging"])

    def release(self) -> None:
        """Remove the lock if it is still this run's."""
        if self.held and _read_lock(self.path) == self.owner:
            os.remove(self.path)
        self.held = False


# ------------------------------------------------------------- ownership


def _listing(names: List[str], limit: int = 20) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} entries in all)" if len(names) > limit else "")


def _refuse_unusable_manifest(dest: str, error: ManifestError, label: str = "--destdir") -> DestinationInUseError:
    """The refusal of a ``--destdir`` whose manifest (or swap journal) cannot
    say which files are mdsfair's: damaged, malformed or naming files outside
    the folder. ``--overwrite`` then removes nothing; the message lists what
    the folder holds and what to do instead."""
    entries = sorted(name for name in os.listdir(dest) if name != LOCK_NAME)
    what_to_do = "" if isinstance(error, DamagedManifestError) else f"; {restore_hint(dest)}"
    return DestinationInUseError(
        f"{label} {dest}: {error}{what_to_do}. Nothing was removed; it holds {len(entries)} entries: "
        f"{_listing(entries)}"
    )


def owned_files(dest: str, label: str = "--destdir") -> Optional[Set[str]]:
    """The files of ``dest`` an earlier mdsfair run lists as its own (its
    manifest's ``files``, or :func:`data_bin_files` of an older manifest,
    plus an unfinished swap's journal); None when no manifest or journal
    says ``dest`` is a data-bin. Every name returned is a plain file name
    inside ``dest`` (:func:`~mdsfair.data.manifest.is_plain_file_name`): a
    manifest or journal naming anything else, and a damaged or malformed
    one, is refused with :class:`DestinationInUseError` naming the entry
    and what to do instead."""
    owned: Optional[Set[str]] = None
    manifest_path = os.path.join(dest, MANIFEST_NAME)
    if os.path.exists(manifest_path):
        try:
            manifest = read_manifest(dest)  # checks every name it lists: plain file names inside dest
        except ManifestError as error:
            raise _refuse_unusable_manifest(dest, error, label) from None
        listed = manifest.get("files") or data_bin_files(manifest, trained_spm_vocab=True)
        outside = [f"{name!r}" for name in listed if not is_plain_file_name(name)]
        if outside:  # a name derived from the manifest's entries (split.stream.bin, spm.vocab)
            raise _refuse_unusable_manifest(
                dest,
                ManifestError(
                    f"{manifest_path}: refusing a manifest whose file names leave the data-bin directory: "
                    f"{', '.join(outside)}"
                ),
                label,
            )
        owned = set(listed) | {MANIFEST_NAME}
    journal_path = os.path.join(dest, JOURNAL_NAME)
    if os.path.exists(journal_path):
        try:
            with open(journal_path, encoding="utf-8") as handle:
                journal = json.load(handle)
            names = list(journal["old"]) + list(journal["new"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ManifestError(
                f"{journal_path}: unreadable swap journal ({error}); remove it and the data-bin by hand"
            ) from None
        outside = [f"{name!r}" for name in names if not is_plain_file_name(name)]
        if outside:
            raise _refuse_unusable_manifest(
                dest,
                ManifestError(
                    f"{journal_path}: refusing a swap journal whose file names leave the data-bin directory: "
                    f"{', '.join(outside)}"
                ),
                label,
            )
        owned = (owned or set()) | set(names) | {JOURNAL_NAME}
    return owned


def check_destination(
    dest: str,
    overwrite: bool,
    keep_paths: Iterable[str],
    program: str = "mdsfair-preprocess",
    label: str = "--destdir",
    own_names: Iterable[str] = (),
) -> Set[str]:
    """Refuse a ``--destdir`` in use (module docstring); returns the names
    ``--overwrite`` may remove (files an earlier manifest lists, never an
    input file of this run)."""
    entries = sorted(name for name in os.listdir(dest) if name != LOCK_NAME)
    if not entries:
        return set()
    try:
        owned = owned_files(dest, label)
    except DestinationInUseError as error:
        damaged = os.path.join(dest, MANIFEST_NAME)
        if not (overwrite and own_names and os.path.isfile(damaged)):
            raise
        # A command whose output has fixed names (an import's model folder) replaces those names under a damaged
        # manifest, as the manifest's restore hint says; nothing else in the folder is touched.
        owned = set(own_names) & set(entries)
        logger.warning(
            "--overwrite: %s; replacing only the files %s writes: %s", error, program, _listing(sorted(owned))
        )
    if owned is None:
        raise DestinationInUseError(
            f"{label} {dest} is not empty and holds no {MANIFEST_NAME}, so {program} did not write it; "
            f"it holds {len(entries)} entries: {_listing(entries)}. {program} writes only into an empty "
            f"or new directory, or replaces what it wrote itself: choose another {label} (or move those "
            "files away)"
        )
    if not overwrite:
        raise DestinationInUseError(
            f"{label} {dest} is not empty (it holds a data-bin: {_listing(entries, 5)}). Files of an earlier run "
            "would be left beside the new dictionary; give --overwrite to replace the data-bin (only the files "
            f"its {MANIFEST_NAME} lists are removed; other files stay) or choose an empty directory"
        )
    keep = set(keep_paths)
    inside = os.path.realpath(dest)
    removable = {
        name
        for name in owned
        if os.path.isfile(os.path.join(dest, name))
        and not os.path.islink(os.path.join(dest, name))
        and os.path.dirname(os.path.realpath(os.path.join(dest, name))) == inside
        and os.path.realpath(os.path.join(dest, name)) not in keep
    }
    others = [name for name in entries if name not in removable]
    if others:
        logger.info(
            "--overwrite: %s holds %d entries no mdsfair manifest lists (or inputs of this run); they stay: %s",
            dest,
            len(others),
            _listing(others),
        )
    return removable


# ------------------------------------------------------------------ run


def refuse_unusable_destination(dest: str, label: str = "--destdir") -> None:
    """Refuse a destination that is a file, or a symbolic link to nothing
    (which ``os.makedirs`` would report as "File exists")."""
    if os.path.islink(dest) and not os.path.exists(dest):
        raise DestinationInUseError(
            f"{label} {dest} is a symbolic link to {os.readlink(dest)}, which does not "
            "exist; create that directory or remove the link"
        )
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise DestinationInUseError(f"{label} {dest} exists and is not a directory")


class DestinationRun:
    """A run's hold on ``--destdir``: lock, ownership check and staging
    folder on entry; :meth:`commit` moves the finished files in; leaving
    without a commit (error, Ctrl-C) removes the staging folder and, when
    this run created ``--destdir``, the directory; the lock is released in
    every case."""

    def __init__(self, args, program: str = "mdsfair-preprocess", label: str = "--destdir"):
        self.args = args
        self.program, self.label = program, label
        self.dest = args.destdir
        self.created = False
        self.committed = False
        self.lock: Optional[DestinationLock] = None
        self.removable: Set[str] = set()

    def __enter__(self) -> "DestinationRun":
        dest = self.dest
        refuse_unusable_destination(dest, self.label)
        if not os.path.isdir(dest):
            parent = os.path.dirname(os.path.abspath(dest))
            os.makedirs(parent, exist_ok=True)
            try:  # atomic: of two runs creating it at once, one does; the lock then decides between them
                os.mkdir(dest)
                self.created = True
            except FileExistsError:
                refuse_unusable_destination(dest, self.label)
        try:
            self.lock = DestinationLock(dest, getattr(self.args, "break_stale_lock", False), self.program, self.label)
            self.removable = check_destination(
                dest,
                self.args.overwrite,
                input_paths(self.args),
                self.program,
                self.label,
                getattr(self.args, "own_names", ()),
            )
            os.mkdir(self.staging)
        except BaseException:
            self._clean_up()
            raise
        return self

    @property
    def staging(self) -> str:
        return self.lock.staging

    def __exit__(self, exc_type, exc, tb) -> None:
        self._clean_up()

    def _clean_up(self) -> None:
        try:
            if self.lock is not None and os.path.isdir(self.staging):
                shutil.rmtree(self.staging)
        finally:
            if self.lock is not None:
                self.lock.release()
            if self.created and os.path.isdir(self.dest) and not os.listdir(self.dest):
                try:
                    os.rmdir(self.dest)
                except OSError:  # another run has just put its lock into it: the folder is now that run's
                    pass

    def commit(self, manifest: Dict) -> None:
        """Move the run's files (``manifest["files"]``) from the staging
        folder into ``--destdir``, remove the old data-bin's files the new
        one does not have, and move the manifest in last."""
        with _interrupts_deferred():
            self._commit(manifest)
        self.committed = True

    def _commit(self, manifest: Dict) -> None:
        dest, staging = self.dest, self.staging
        new = [name for name in manifest["files"] if name != MANIFEST_NAME]
        write_json_atomic(os.path.join(staging, MANIFEST_NAME), manifest, indent=2)
        journal = os.path.join(dest, JOURNAL_NAME)
        replacing = bool(self.removable)
        if replacing:
            write_json_atomic(journal, {"old": sorted(self.removable), "new": list(manifest["files"])}, indent=1)
            if os.path.exists(os.path.join(dest, MANIFEST_NAME)):
                os.remove(os.path.join(dest, MANIFEST_NAME))  # from here on no reader takes the folder for a data-bin
        for name in new:
            os.replace(os.path.join(staging, name), os.path.join(dest, name))
        stale = sorted(self.removable - set(manifest["files"]) - {JOURNAL_NAME})
        for name in stale:
            path = os.path.join(dest, name)
            if os.path.isfile(path):
                os.remove(path)
        if stale:
            logger.warning(
                "--overwrite: removed %d file(s) of the earlier data-bin that the new manifest does not list: %s",
                len(stale),
                ", ".join(stale),
            )
        _fsync_directory(dest)
        os.replace(os.path.join(staging, MANIFEST_NAME), os.path.join(dest, MANIFEST_NAME))  # last
        if replacing and os.path.exists(journal):
            os.remove(journal)
        _fsync_directory(dest)


@contextlib.contextmanager
def _interrupts_deferred():
    """Hold Ctrl-C (SIGINT) off while the finished files are moved in (a few
    renames), so an interrupt never leaves half a swap; one that came is
    logged afterwards (the data-bin is then complete)."""
    with sigint_recorded() as received:
        yield
    if received:
        logger.warning("Ctrl-C came while the finished data-bin was being moved into place; it was completed first")


def _fsync_directory(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def finish_destdir(args, manifest: Dict) -> Dict:
    """Record the run's files in ``manifest["files"]``, checking that each
    exists in ``args.destdir`` (the staging folder during a run). Returns the
    manifest."""
    trained = getattr(args, "subword", "sentencepiece") == "sentencepiece" and not getattr(args, "spm_model", None)
    files = data_bin_files(manifest, trained_spm_vocab=trained)
    missing = [name for name in files if name != MANIFEST_NAME and not os.path.exists(os.path.join(args.destdir, name))]
    if missing:
        raise FileNotFoundError(f"{args.destdir}: the run should have written {missing} but did not")
    manifest["files"] = files
    return manifest


def single_file_lock_path(path: str) -> str:
    """The lock that claims the single output file ``path``: a hidden file
    beside it, ``.NAME.mdsfair.lock``."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}{LOCK_NAME}")


def copy_into(source: str, destination: str) -> str:
    """Copy an input file into the data-bin, unless it already is that file."""
    if os.path.exists(destination) and os.path.samefile(source, destination):
        return destination
    return shutil.copyfile(source, destination)
