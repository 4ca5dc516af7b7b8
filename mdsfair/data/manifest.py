"""The data-bin manifest (``mdsfair.json``) as the task reads it.

``mdsfair-preprocess`` lists every split it wrote under ``splits``; files of
any other split in the directory were written by another run, with another
dictionary (a re-run into the same ``--destdir`` before ``--overwrite``
existed), so the task refuses them instead of loading their token ids with
this run's ``dict.txt``.

``source_layout`` (written by ``mdsfair-preprocess --source-layout``) is how
the task joins the documents by default: ``{"name": "documents"}`` or
PRIMERA's ``{"name": "primera", "document_separator": "<doc-sep>",
"document_separator_id": ID, "per_document_budget": true}``
(:mod:`mdsfair.data.primera_layout`); a manifest without it leaves the
layout to the task's ``--source-layout``.

``version`` is the manifest layout's version (:data:`MANIFEST_VERSION`):
:func:`read_manifest` refuses a manifest of a higher version, written by a
newer mdsfair whose data-bins this code may misread, and reads one of a lower
version, or without the entry, as it is. ``structure`` lists the structure
streams of every split (:data:`STRUCTURE_STREAMS`).

``text_normalization`` (``mdsfair-preprocess --text-normalization``) is how
raw text was normalised before subword encoding, so that the hub normalises
its input the same way (:func:`recorded_text_normalization`):
:data:`TEXT_NORMALIZATIONS` names the two; a manifest written before it was
recorded was made with ``clean``.
"""

import contextlib
import json
import os
import shlex
from typing import Dict, Iterator, Optional, Tuple

MANIFEST_NAME = "mdsfair.json"
#: The version of the manifest layout this code writes, and the highest it reads.
MANIFEST_VERSION = 1
#: The structure streams of a split, ``{split}.doc``, ``{split}.para`` and
#: ``{split}.sent``: for every source token, the index of its document,
#: paragraph and sentence within the cluster (0-based; paragraphs and
#: sentences numbered across documents in stream order).
STRUCTURE_STREAMS = ("doc", "para", "sent")

#: The text normalisations a data-bin records (``text_normalization``) and
#: what each does to raw text before subword encoding:
#:
#: * ``clean``: mdsfair's cleaning (:func:`mdsfair.preprocess.structure.clean_text`):
#:   NFC, control characters, zero-width space and byte-order mark removed,
#:   every white-space character a space and runs of spaces one; every
#:   sentence is encoded as a text of its own (GPT-2 BPE after one space).
#: * ``whitespace``: only white space is touched: every run of it (what
#:   ``str.split`` splits on) is one space, nothing is deleted or composed,
#:   and sentences keep the spacing the text has between them (none after a
#:   CJK ``。`` followed directly by text): the text a Hugging Face
#:   checkpoint's own tokenizer is given by its loader (allenai/PRIMER
#:   ``script/dataloader.py``: ``" ".join(doc.split())`` per document).
TEXT_NORMALIZATIONS = ("clean", "whitespace")
#: What a data-bin without a ``text_normalization`` entry was made with.
UNRECORDED_TEXT_NORMALIZATION = "clean"


def default_text_normalization(subword_type: Optional[str]) -> str:
    """``mdsfair-preprocess``'s default: ``whitespace`` for GPT-2 BPE (its
    ``--dict`` is an imported checkpoint's, whose tokenizer reads the text as
    written), ``clean`` for SentencePiece (mdsfair's own model)."""
    return "whitespace" if subword_type == "gpt2" else "clean"


def recorded_text_normalization(manifest: Dict, path: str) -> str:
    """The ``text_normalization`` a data-bin's manifest (``path``) records;
    ``clean`` when it records none (written before the entry existed). A
    value that is not one of :data:`TEXT_NORMALIZATIONS` is a
    :class:`ManifestError` naming ``path``."""
    value = manifest.get("text_normalization", UNRECORDED_TEXT_NORMALIZATION)
    if value not in TEXT_NORMALIZATIONS:
        raise ManifestError(
            f"{path}: text_normalization {value!r} is not one of {', '.join(TEXT_NORMALIZATIONS)}; "
            "rebuild the data-bin with mdsfair-preprocess"
        )
    return value


class UnlistedSplitError(FileNotFoundError):
    """A split the data-bin's manifest does not list."""


class ManifestError(ValueError):
    """A manifest that cannot be used: damaged JSON, or a file name that
    leaves its data-bin directory."""


class DamagedManifestError(ManifestError):
    """A manifest that is empty, cut short or not a JSON object."""


class ManifestShapeError(ManifestError):
    """A manifest entry that holds file names has the wrong JSON type."""


class ManifestVersionError(ManifestError):
    """A manifest whose ``version`` is above :data:`MANIFEST_VERSION` (written
    by a newer mdsfair), or is not an integer."""


def check_manifest_version(manifest: Dict, path: str) -> None:
    """Refuse a manifest (``path``) whose ``version`` this code does not
    read: one above :data:`MANIFEST_VERSION`, or one that is not a JSON
    integer. A lower version, or none (the entry is optional), is read as it is."""
    version = manifest.get("version")
    if version is None:
        return
    if not isinstance(version, int) or isinstance(version, bool):
        raise ManifestVersionError(
            f"{path}: the manifest's version {version!r} is not an integer; "
            "rebuild the data-bin with mdsfair-preprocess"
        )
    if version > MANIFEST_VERSION:
        raise ManifestVersionError(
            f"{path}: manifest version {version} is newer than this mdsfair reads (version {MANIFEST_VERSION} or "
            "older); use the mdsfair release that wrote the data-bin, or rebuild it with this mdsfair-preprocess"
        )


def _entries(value, entry: str, kind: type):
    """``value`` checked to be a JSON ``kind`` (list or object; absent or
    null is an empty one)."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        expected = "list" if kind is list else "object"
        raise ManifestShapeError(f"{entry} must be a JSON {expected}, not {type(value).__name__} {value!r}"[:300])
    return value


def manifest_file_names(manifest: Dict) -> Iterator[Tuple[str, object]]:
    """``(entry, value)`` of every manifest value that becomes a file name in
    the data-bin: the dictionary, the subword files, the ``files`` list, split,
    structure and side-data names (``{split}.{stream}.bin``) and each split's
    ``reference_files`` and ``skip_report``. An entry holding names with the
    wrong JSON type raises :class:`ManifestShapeError`."""
    if "dictionary" in manifest:
        yield "dictionary", manifest["dictionary"]
    for key, value in _entries(manifest.get("subword"), "subword", dict).items():
        if key != "type":
            yield f"subword.{key}", value
    for index, name in enumerate(_entries(manifest.get("files"), "files", list)):
        yield f"files[{index}]", name
    for index, name in enumerate(_entries(manifest.get("structure"), "structure", list)):
        yield f"structure[{index}]", name
    for name in _entries(manifest.get("side_data"), "side_data", dict):
        yield "side_data", name
    for split, report in _entries(manifest.get("splits"), "splits", dict).items():
        yield "splits", split
        report = _entries(report, f"splits.{split}", dict)
        references = _entries(report.get("reference_files"), f"splits.{split}.reference_files", list)
        for index, name in enumerate(references):
            yield f"splits.{split}.reference_files[{index}]", name
        if report.get("skip_report") is not None:
            yield f"splits.{split}.skip_report", report["skip_report"]


def is_plain_file_name(name: object) -> bool:
    """A non-empty name of a file inside its folder: no directory part, not
    absolute, not ``.``/``..``, no NUL."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and not os.path.isabs(name)
    )


def check_manifest_file_names(manifest: Dict, path: str) -> None:
    """Refuse a manifest naming a file outside its directory (``../x``,
    ``/abs/x``, ``sub/x``): every name it lists must be a plain file name;
    and one whose name-holding entries have the wrong JSON type."""
    try:
        bad = [
            f"{entry} = {value!r}" for entry, value in manifest_file_names(manifest) if not is_plain_file_name(value)
        ]
    except ManifestShapeError as error:
        raise ManifestShapeError(f"{path}: refusing a malformed manifest: {error}") from None
    if bad:
        raise ManifestError(
            f"{path}: refusing a manifest whose file names leave the data-bin directory: {'; '.join(bad)} "
            "(every name must be a plain file name inside that directory)"
        )


def _command_path(path: str) -> str:
    return shlex.quote(os.path.abspath(path))


def restore_hint(data_dir: str) -> str:
    """What gives ``data_dir`` a sound manifest again, by the kind of folder
    it is (a damaged manifest cannot say which it was, its other files can):

    * a model folder written by ``mdsfair-import hf-led`` (``model.pt`` and
      ``encoder.json``) or ``mdsfair-import hiersumm`` (``model.pt`` and
      ``spm.model``): run the import again into it;
    * another folder with checkpoints (``*.pt``): the manifest was copied
      from the training data-bin (:func:`mdsfair.hub_interface.copy_inference_files`):
      copy it again;
    * a data-bin: without its manifest ``mdsfair-preprocess --overwrite``
      cannot tell which files it wrote and refuses the folder, so it has to
      be moved aside (or removed) before the data-bin is built again.
    """
    folder = _command_path(data_dir)
    try:
        names = set(os.listdir(data_dir))
    except OSError:
        names = set()
    copy_again = (
        f"copy the manifest again from the data-bin the model was trained on: cp DATA_BIN/{MANIFEST_NAME} {folder}/ "
        f"(or copy_inference_files(DATA_BIN, {os.path.abspath(data_dir)!r}) from mdsfair.hub_interface)"
    )
    if "model.pt" in names and "encoder.json" in names:
        return (
            f"{data_dir} is a model folder written by mdsfair-import hf-led: import it again with "
            f"mdsfair-import hf-led HF_DIR {folder} --overwrite (HF_DIR: the Hugging Face model it was imported "
            f"from); if you put the manifest there yourself, {copy_again}"
        )
    if "model.pt" in names and "spm.model" in names:
        return (
            f"{data_dir} is a model folder written by mdsfair-import hiersumm: import it again with "
            f"mdsfair-import hiersumm CKPT SPM_MODEL {folder} --overwrite (the same arguments as the first time, "
            f"--cased included); if you put the manifest there yourself, {copy_again}"
        )
    if any(name.endswith(".pt") for name in names):
        return f"{data_dir} holds checkpoints, so its manifest is a copy: {copy_again}"
    aside = _command_path(os.path.abspath(data_dir) + ".damaged")
    return (
        f"mdsfair-preprocess --overwrite cannot tell which files of {data_dir} it wrote without a sound manifest, "
        f"so it refuses the folder: move it aside (mv {folder} {aside}) or remove it (rm -r {folder}), then build "
        "the data-bin again with mdsfair-preprocess (same options, same --destdir)"
    )


@contextlib.contextmanager
def atomic_replacement(path: str) -> Iterator[str]:
    """The path of a temporary file in ``path``'s folder for the block to
    write; when the block ends without an error the file is fsynced and
    ``os.replace``d over ``path``. On any error, Ctrl-C included, the
    temporary file is removed and ``path`` keeps what it held before (or
    stays absent): no reader ever sees a part."""
    temporary = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        yield temporary
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


@contextlib.contextmanager
def atomic_text_file(path: str, newline: Optional[str] = None) -> Iterator:
    """A UTF-8 text handle whose content appears at ``path`` only when the
    block ends without an error (:func:`atomic_replacement`)."""
    with atomic_replacement(path) as temporary:
        with open(temporary, "w", encoding="utf-8", newline=newline) as handle:
            yield handle


def write_json_atomic(path: str, obj, trailing_newline: bool = False, **dump_options) -> None:
    """Write ``obj`` as JSON to ``path`` through :func:`atomic_text_file`.
    Every manifest and small JSON file mdsfair writes goes through here."""
    with atomic_text_file(path) as handle:
        json.dump(obj, handle, **dump_options)
        if trailing_newline:
            handle.write("\n")


def read_manifest(data_dir: str) -> Dict:
    """The manifest of ``data_dir``, checked: a clear error when there is
    none, when it is damaged (empty or cut short), when its version is newer
    than this code reads (:func:`check_manifest_version`), or when a file
    name it lists leaves the directory (:func:`check_manifest_file_names`)."""
    path = os.path.join(data_dir, MANIFEST_NAME)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{data_dir} is not an mdsfair data-bin directory ({MANIFEST_NAME} missing); "
            "create it with mdsfair-preprocess"
        )
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as error:
        state = "empty" if not text.strip() else f"damaged ({error.msg} at line {error.lineno} column {error.colno})"
        raise DamagedManifestError(f"{path}: the manifest is {state}; {restore_hint(data_dir)}") from None
    if not isinstance(manifest, dict):
        raise DamagedManifestError(f"{path}: the manifest is not a JSON object; {restore_hint(data_dir)}")
    check_manifest_version(manifest, path)
    check_manifest_file_names(manifest, path)
    return manifest


def recorded_source_layout(manifest: Dict, data_dir: str, dictionary) -> Optional[Dict]:
    """The ``source_layout`` the manifest of ``data_dir`` records, checked
    against the data-bin's ``dictionary``
    (:func:`mdsfair.data.primera_layout.check_source_layout_entry`); None
    when it records none."""
    from mdsfair.data.primera_layout import check_source_layout_entry

    return check_source_layout_entry(manifest.get("source_layout"), dictionary, os.path.join(data_dir, MANIFEST_NAME))


def require_listed_split(data_dir: str, split: str, manifest: Optional[Dict] = None) -> Dict:
    """The manifest entry of ``split`` (its report), or
    :class:`UnlistedSplitError` naming the data-bin, the split, the splits it
    does list and, when the split's files are there, that they are stale."""
    manifest = read_manifest(data_dir) if manifest is None else manifest
    splits = manifest.get("splits") or {}
    if split in splits:
        return splits[split]
    listed = ", ".join(sorted(splits)) or "none"
    stale = os.path.join(data_dir, f"{split}.source.bin")
    if os.path.exists(stale):
        detail = (
            f"{stale} is left over from an earlier mdsfair-preprocess run into this directory and is encoded "
            "with that run's dictionary, not this dict.txt; preprocess the split again (mdsfair-preprocess "
            "--overwrite also removes such files)"
        )
    else:
        detail = "preprocess it with mdsfair-preprocess (--split NAME=PATH) or choose a listed split"
    raise UnlistedSplitError(
        f"{data_dir}: split {split!r} is not listed in {os.path.join(data_dir, MANIFEST_NAME)} "
        f"(listed: {listed}); {detail}"
    )
