"""The output directory of ``mdsfair-preprocess``: refuse to mix runs.

A data-bin holds one run's files, all encoded with one ``dict.txt``. Writing a
new run into a used directory would leave the old run's splits beside the new
dictionary (the task would load them as silent garbage), so:

* a ``--destdir`` that exists and is not empty is refused, unless
  ``--overwrite`` is given;
* with ``--overwrite`` the old manifest is removed first (an interrupted run
  leaves no manifest, so nothing loads a half-written directory), and once
  the new manifest is written every file it does not account for is removed
  (each one logged). Input files that live in the directory (``--split``,
  ``--spm-model``, GPT-2 files, ``--dict``) are never removed; sub-directories
  are left in place with a warning (the task never reads them).

The manifest accounts for its files in ``files`` (:func:`data_bin_files`):
itself, ``dict.txt``, the subword model, and per split its ``.bin``/``.idx``
streams, ``ids.txt``, ``summary.txt`` and the reference and skip-report files
its entry lists.
"""
import logging
import os
from typing import Dict, Iterable, List, Set

from mdsfair.data.manifest import MANIFEST_NAME

logger = logging.getLogger("mdsfair.preprocess")


class DestinationInUseError(ValueError):
    """``--destdir`` holds files and ``--overwrite`` was not given."""


def input_paths(args) -> List[str]:
    """Every file the run reads (kept even when it lies in ``--destdir``)."""
    paths = [getattr(args, name, None) for name in ("spm_model", "gpt2_encoder_json", "gpt2_vocab_bpe", "dict")]
    paths += [spec.split("=", 1)[1] for spec in (getattr(args, "split", None) or []) if "=" in spec]
    input_dir = getattr(args, "input_dir", None)
    if input_dir and os.path.isdir(input_dir):
        paths += [os.path.join(input_dir, name) for name in os.listdir(input_dir) if name.endswith(".jsonl")]
    return [os.path.realpath(p) for p in paths if p]


def prepare_destdir(args) -> None:
    """Create ``args.destdir``, or refuse it when it is in use (unless
    ``args.overwrite``, which removes its old manifest now)."""
    dest = args.destdir
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise DestinationInUseError(f"--destdir {dest} exists and is not a directory")
    entries = sorted(os.listdir(dest)) if os.path.isdir(dest) else []
    if entries and not args.overwrite:
        shown = ", ".join(entries[:5]) + (f", ... ({len(entries)} entries)" if len(entries) > 5 else "")
        what = "a data-bin" if MANIFEST_NAME in entries else "files"
        raise DestinationInUseError(
            f"--destdir {dest} is not empty (it holds {what}: {shown}). Files of an earlier run would be left "
            "beside the new dictionary; give --overwrite to replace the directory's data-bin (files the new "
            "manifest does not list are then removed) or choose an empty directory"
        )
    os.makedirs(dest, exist_ok=True)
    manifest = os.path.join(dest, MANIFEST_NAME)
    if entries and os.path.exists(manifest):
        os.remove(manifest)
        logger.info("--overwrite: removed the old manifest %s", manifest)


def data_bin_files(manifest: Dict, trained_spm_vocab: bool = False) -> List[str]:
    """The files of a data-bin as its manifest accounts for them (names
    inside the directory), in a stable order."""
    files = [MANIFEST_NAME, manifest.get("dictionary", "dict.txt")]
    subword = manifest.get("subword", {})
    files += [subword[key] for key in ("model", "encoder_json", "vocab_bpe") if key in subword]
    if trained_spm_vocab and subword.get("model", "").endswith(".model"):
        files.append(subword["model"][: -len(".model")] + ".vocab")
    streams = ["source", "target"] + list(manifest.get("structure", [])) + list(manifest.get("side_data", {}))
    for split, report in manifest.get("splits", {}).items():
        files += [f"{split}.{stream}.{ext}" for stream in streams for ext in ("bin", "idx")]
        files += [f"{split}.ids.txt", f"{split}.summary.txt"]
        files += [name for name in report.get("reference_files", []) if name != f"{split}.summary.txt"]
        if report.get("skip_report"):
            files.append(report["skip_report"])
    return list(dict.fromkeys(files))


def remove_unaccounted(dest: str, accounted: Iterable[str], keep_paths: Iterable[str]) -> List[str]:
    """Remove every file of ``dest`` that is neither accounted for nor one of
    ``keep_paths`` (real paths); returns the removed names."""
    accounted: Set[str] = set(accounted)
    keep = set(keep_paths)
    removed, directories = [], []
    for name in sorted(os.listdir(dest)):
        path = os.path.join(dest, name)
        if name in accounted or os.path.realpath(path) in keep:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            directories.append(name)
            continue
        os.remove(path)
        removed.append(name)
    if removed:
        logger.warning(
            "--overwrite: removed %d file(s) of an earlier run that the new manifest does not list: %s",
            len(removed), ", ".join(removed),
        )
    if directories:
        logger.warning("--overwrite: left the sub-directories %s of %s in place", ", ".join(directories), dest)
    return removed


def finish_destdir(args, manifest: Dict) -> Dict:
    """Record the run's files in ``manifest["files"]`` (checking that each
    exists) and, with ``--overwrite``, remove every other file of the
    directory. Returns the manifest."""
    trained = getattr(args, "subword", "sentencepiece") == "sentencepiece" and not getattr(args, "spm_model", None)
    files = data_bin_files(manifest, trained_spm_vocab=trained)
    missing = [name for name in files if name != MANIFEST_NAME and not os.path.exists(os.path.join(args.destdir, name))]
    if missing:
        raise FileNotFoundError(f"{args.destdir}: the run should have written {missing} but did not")
    manifest["files"] = files
    if args.overwrite:
        remove_unaccounted(args.destdir, files, input_paths(args))
    return manifest


def copy_into(source: str, destination: str) -> str:
    """Copy an input file into the data-bin, unless it already is that file
    (``--spm-model data-bin/spm.model --destdir data-bin --overwrite``)."""
    import shutil

    if os.path.exists(destination) and os.path.samefile(source, destination):
        return destination
    return shutil.copyfile(source, destination)
