"""The output of an import or export, held as ``mdsfair-preprocess`` holds
its ``--destdir`` (:mod:`mdsfair.preprocess.destdir`, whose lock, ownership
check, staging folder and commit this module uses, not a copy of them):

* **Lock.** ``OUT_DIR/.mdsfair.lock`` from start to end: a second import or
  export into the same folder is refused with the owner named, so two runs
  with ``--overwrite`` at once never leave one model's ``model.pt`` beside
  the other's ``mdsfair.json``.
* **Staging.** Every file is written into ``OUT_DIR/.mdsfair-staging-*`` and
  moved in only when the whole run succeeded, ``mdsfair.json`` last; an
  error or Ctrl-C removes the staging folder (and ``OUT_DIR`` when the run
  created it), so a re-run finds the folder as it was.
* **Ownership.** ``mdsfair.json`` lists in ``files`` every file the run
  wrote. A non-empty ``OUT_DIR`` without it was not written by mdsfair and is
  refused; ``--overwrite`` replaces only the files an earlier import or
  export listed there, and removes those of them the new run does not write
  (under a damaged ``mdsfair.json``: only the names an import or export
  writes, :data:`IMPORT_NAMES` / :data:`EXPORT_NAMES`).

An import's ``mdsfair.json`` is the manifest of a data-bin without splits
(the dictionary and subword files; :func:`gpt2_manifest`), and its
``model.pt`` records the fingerprints of those files as a checkpoint trained
here does (:func:`mdsfair.checkpoints.fingerprints.data_fingerprint`): generating or
training with it on a data-bin whose ``dict.txt`` or BPE files are another
import's is refused by the task (``DictionaryMismatchError``). An export's
``mdsfair.json`` records only what was exported and its files.

A single-file output (``bart-to-led OUT.pt``) is claimed by a lock beside
it (``.OUT.pt.mdsfair.lock``, created with ``O_CREAT | O_EXCL`` as the folder
lock is), written to a temporary file and moved into place at the end
(:func:`single_file_output`): of two runs writing the same file at once, the
second is refused with the first named, and without ``--overwrite`` the move
itself never replaces a file (a hard link, which fails when the name exists).
"""

import contextlib
import errno
import os
from types import SimpleNamespace
from typing import Dict, Iterator, List, Optional

from mdsfair.data.manifest import MANIFEST_NAME, MANIFEST_VERSION, STRUCTURE_STREAMS, default_text_normalization
from mdsfair.importers import ImportRefused
from mdsfair.preprocess.destdir import (
    DestinationInUseError,
    DestinationLock,
    DestinationRun,
    single_file_lock_path,
)

OUT_DIR_LABEL = "OUT_DIR"
#: The files an import or an export writes: under a damaged ``mdsfair.json`` (which the restore hint of
#: :func:`mdsfair.data.manifest.restore_hint` answers with the import again, ``--overwrite``) only these
#: names are replaced.
IMPORT_NAMES = frozenset({MANIFEST_NAME, "model.pt", "dict.txt", "encoder.json", "vocab.bpe", "spm.model"})
EXPORT_NAMES = frozenset(
    {
        MANIFEST_NAME,
        "config.json",
        "vocab.json",
        "merges.txt",
        "tokenizer_config.json",
        "added_tokens.json",
        "model.safetensors",
        "pytorch_model.bin",
    }
)


class ImportOutput:
    """``with ImportOutput(out_dir, overwrite, program) as output:`` write
    into ``output.staging``, then ``output.commit(manifest)`` (``manifest``
    gets ``files``: every file in the staging folder)."""

    def __init__(self, out_dir: str, overwrite: bool, program: str, inputs: Optional[List[str]] = None):
        self.out_dir = out_dir
        self.program = program
        own_names = EXPORT_NAMES if program.startswith("mdsfair-export") else IMPORT_NAMES
        args = SimpleNamespace(
            destdir=out_dir,
            overwrite=overwrite,
            break_stale_lock=False,
            spm_model=None,
            gpt2_encoder_json=None,
            gpt2_vocab_bpe=None,
            dict=None,
            split=None,
            input_dir=None,
            own_names=own_names,
        )
        self._run = DestinationRun(args, program=program, label=OUT_DIR_LABEL)
        self._keep = [os.path.realpath(path) for path in inputs or [] if path]

    def __enter__(self) -> "ImportOutput":
        try:
            self._run.__enter__()
        except DestinationInUseError as error:
            raise ImportRefused(str(error)) from None
        if self._keep:  # an input of this run inside OUT_DIR (an export reading OUT_DIR/dict.txt) stays
            self._run.removable = {
                name
                for name in self._run.removable
                if os.path.realpath(os.path.join(self.out_dir, name)) not in self._keep
            }
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._run.__exit__(exc_type, exc, tb)

    @property
    def staging(self) -> str:
        return self._run.staging

    def path(self, name: str) -> str:
        return os.path.join(self.staging, name)

    def commit(self, manifest: Dict) -> None:
        names = sorted(name for name in os.listdir(self.staging) if name != MANIFEST_NAME)
        manifest["files"] = [MANIFEST_NAME] + names
        self._run.commit(manifest)


def gpt2_manifest(out_dir: str, source: Dict[str, object], separator: Optional[int] = None) -> Dict:
    """``mdsfair.json`` of a data-bin with no splits, GPT-2 subwords
    (``dict.txt``, ``encoder.json``, ``vocab.bpe`` in ``out_dir``); for
    PRIMERA (``separator``, the ``<doc-sep>`` id) it records PRIMERA's source
    layout as ``mdsfair-preprocess --source-layout primera`` does."""
    from fairseq.data import Dictionary

    from mdsfair.data.primera_layout import source_layout_manifest_entry

    manifest = {
        "format": "mdsfair-binarized",
        "version": MANIFEST_VERSION,
        "dictionary": "dict.txt",
        "subword": {"type": "gpt2", "encoder_json": "encoder.json", "vocab_bpe": "vocab.bpe"},
        "sentence_splitter": "rule",
        "lowercase": False,
        "title_document": False,
        # the text as the checkpoint's own tokenizer is given it (issue 34 item 2): the hub on OUT_DIR, like a
        # data-bin made with these files, normalises only white space
        "text_normalization": default_text_normalization("gpt2"),
        "side_data": {},
        "side_data_args": {},
        "structure": list(STRUCTURE_STREAMS),
        "splits": {},
        "imported_from": source,
    }
    if separator is not None:
        dict_path = os.path.join(out_dir, "dict.txt")
        manifest["source_layout"] = source_layout_manifest_entry("primera", Dictionary.load(dict_path), dict_path)
    return manifest


def import_record(staging: str, out_dir: str, manifest: Dict, model_state: Dict) -> Dict:
    """The record a checkpoint trained here carries (:data:`mdsfair.checkpoints.record.RECORD_KEY`):
    the fingerprints of the import's ``dict.txt`` and subword files (read in
    the staging folder, recorded under ``out_dir``) and the weights' checksum."""
    from fairseq.data import Dictionary

    from mdsfair.checkpoints.fingerprints import data_fingerprint
    from mdsfair.checkpoints.record import make_record

    dictionary = Dictionary.load(os.path.join(staging, manifest.get("dictionary", "dict.txt")))
    data = data_fingerprint([staging], dictionary, manifest)
    data["data_bins"] = [os.path.abspath(out_dir)]
    return make_record(data, model_state)


def write_gpt2_import(
    out_dir: str,
    overwrite: bool,
    kind: str,
    files,
    source: Dict[str, object],
    args,
    model_state: Dict,
    separator: Optional[int] = None,
) -> None:
    """The folder of ``mdsfair-import KIND`` for a GPT-2 model, through
    :class:`ImportOutput` (lock, staging folder, commit): ``files``'
    ``dict.txt``, ``encoder.json`` and ``vocab.bpe``, ``mdsfair.json``
    (:func:`gpt2_manifest` recording ``source``) and ``model.pt``, the
    checkpoint of ``args`` and ``model_state`` stamped with
    :func:`import_record`."""
    from mdsfair.importers.fairseq_bart import save_fairseq_checkpoint

    with ImportOutput(out_dir, overwrite, f"mdsfair-import {kind}") as output:
        files.write(output.staging)
        manifest = gpt2_manifest(output.staging, source, separator)
        record = import_record(output.staging, out_dir, manifest, model_state)
        save_fairseq_checkpoint(output.path("model.pt"), args, model_state, record)
        output.commit(manifest)


def _move_without_replacing(temporary: str, path: str) -> None:
    """Move ``temporary`` to ``path`` unless ``path`` exists, atomically: a
    hard link (which fails when the name is taken), then the temporary name
    removed. Where the file system has no hard links, ``path`` is claimed by
    creating it with ``O_CREAT | O_EXCL`` and the file renamed over it."""
    try:
        os.link(temporary, path)
    except FileExistsError:
        raise ImportRefused(
            f"{path}: already there (written while this run worked); pass --overwrite to replace"
        ) from None
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            raise ImportRefused(
                f"{path}: already there (written while this run worked); pass --overwrite to replace"
            ) from None
        os.replace(temporary, path)
        return
    os.remove(temporary)


@contextlib.contextmanager
def single_file_output(path: str, overwrite: bool, program: str = "mdsfair-import") -> Iterator[str]:
    """A temporary path beside ``path`` to write; moved to ``path`` when the
    block ends without an error (an error or Ctrl-C removes it and leaves
    ``path`` as it was). Refuses a folder at ``path`` and, without
    ``overwrite``, an existing file. From entry to exit the run holds the
    lock :func:`~mdsfair.preprocess.destdir.single_file_lock_path` of
    ``path`` (a second run writing ``path`` meanwhile is refused, naming
    this one); without ``overwrite`` the file is moved in only if the name is
    still free (:func:`_move_without_replacing`)."""
    if os.path.isdir(path):
        raise ImportRefused(f"{path}: is a directory; give the path of the checkpoint file to write")
    if os.path.lexists(path) and not overwrite:
        raise ImportRefused(f"{path}: already there; pass --overwrite to replace")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ImportRefused(f"{path}: the folder {folder} does not exist")
    try:
        lock = DestinationLock(
            path, program=program, label="OUT", lock_path=single_file_lock_path(path), break_stale_flag=None
        )
    except DestinationInUseError as error:
        raise ImportRefused(str(error)) from None
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        if os.path.lexists(path) and not overwrite:  # written by a run that ended before this one took the lock
            raise ImportRefused(f"{path}: already there; pass --overwrite to replace")
        yield temporary
        if overwrite:
            os.replace(temporary, path)
        else:
            _move_without_replacing(temporary, path)
    finally:
        try:
            if os.path.exists(temporary):
                os.remove(temporary)
        finally:
            lock.release()


def export_manifest(kind: str, checkpoint: str) -> Dict:
    """``mdsfair.json`` of an export's folder: what was exported (its
    ``files`` are added at commit), so that ``--overwrite`` knows the files
    mdsfair wrote there; Hugging Face ignores the file."""
    return {"format": "mdsfair-export", "kind": kind, "exported_from": os.path.abspath(checkpoint)}
