"""Tables (Parquet, Arrow, ``datasets.save_to_disk``) read with pyarrow: the
files of a split, their record batches, one record per row."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from mdsfair.raw_contract import INVALID_TABLE, MISSING_KEY, WRONG_TYPE, InputFormatError

from ..common import BadRecord, ConversionSession, Record

# Names a split goes by in Hugging Face layouts (parquet-converter folders, save_to_disk dictionaries).
SPLIT_ALIASES = {
    "val": ("val", "validation", "valid", "dev"),
    "validation": ("validation", "val", "valid", "dev"),
    "valid": ("valid", "validation", "val", "dev"),
    "dev": ("dev", "validation", "valid", "val"),
}
_KNOWN_SPLITS = frozenset({"train", "test"} | set(SPLIT_ALIASES))
_TABLE_BATCH_ROWS = 1024


def _pyarrow():
    """pyarrow, imported on first use (a dependency of mdsfair; only the table readers need it)."""
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError as err:  # pragma: no cover - pyarrow is in install_requires
        raise ImportError("reading Parquet / Arrow / save_to_disk data needs pyarrow: pip install pyarrow") from err
    return pyarrow


def _split_names(split: str) -> Tuple[str, ...]:
    split = split.strip().lower()
    return SPLIT_ALIASES.get(split, (split,))


def _matches_split(relative: Path, names: Sequence[str]) -> bool:
    """A Parquet file belongs to a split when a folder is named after it (``default/train/0000.parquet``)
    or its name starts with it (``data/train-00000-of-00001.parquet``, ``test.parquet``)."""
    parts = [part.lower() for part in relative.parts]
    return any(name in parts[:-1] or re.match(rf"{re.escape(name)}(?:[-._]|$)", parts[-1]) for name in names)


def table_files(path: Path, split: str) -> List[Path]:
    """The Parquet / Arrow files that hold ``split`` of the input ``path``.

    A file is itself. A folder with ``state.json`` is a ``Dataset.save_to_disk``
    folder: its ``_data_files`` in order (``dataset_info.json``'s features,
    when present, must be the Arrow files' columns). A folder with
    ``dataset_dict.json`` is a ``DatasetDict.save_to_disk`` folder: the
    sub-folder of ``split`` (or an alias: val / validation / valid / dev). Any
    other folder is searched for ``*.parquet`` files: those of ``split`` when
    some file names or folders name it, else all of them, unless they name other
    splits only (then ``split`` is not there: an error)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist")
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8")).get("splits", [])
        for name in _split_names(split):
            if name in splits:
                return table_files(path / name, split)
        raise ValueError(f"{path / 'dataset_dict.json'}: no split {split!r}; its splits are {splits} (--split)")
    if (path / "state.json").is_file():
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
        files = [path / entry["filename"] for entry in state.get("_data_files", [])]
        missing = [str(f) for f in files if not f.is_file()]
        if not files or missing:
            raise FileNotFoundError(f"{path / 'state.json'} lists data files {missing or 'none'} that are not there")
        return files
    found = sorted(p for p in path.rglob("*.parquet") if p.is_file())
    if not found:
        raise FileNotFoundError(f"{path}: no .parquet file, state.json or dataset_dict.json in this folder")
    names = _split_names(split)
    chosen = [p for p in found if _matches_split(p.relative_to(path), names)]
    if chosen:
        return chosen
    others = sorted({name for p in found for name in _KNOWN_SPLITS if _matches_split(p.relative_to(path), [name])})
    if others:
        raise ValueError(f"{path}: its Parquet files are of splits {others}, none of split {split!r} (--split)")
    return found


def _expected_features(arrow_file: Path) -> Optional[List[str]]:
    """Column names of the ``dataset_info.json`` beside a save_to_disk Arrow file, if there is one."""
    info = arrow_file.parent / "dataset_info.json"
    if not (arrow_file.parent / "state.json").is_file() or not info.is_file():
        return None
    features = json.loads(info.read_text(encoding="utf-8")).get("features")
    return list(features) if isinstance(features, dict) else None


def iter_table_batches(path: Path) -> Tuple[List[str], Iterator[Any]]:
    """Column names and record batches of a Parquet file or an Arrow IPC stream / file.

    ``datasets`` writes its Arrow files as IPC streams; an IPC file (Feather
    v2) is read too. Anything else is refused naming the file."""
    pa = _pyarrow()
    if path.suffix.lower() == ".parquet":
        try:
            parquet = pa.parquet.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as err:
            raise InputFormatError.described(
                path, None, INVALID_TABLE, f"not a Parquet file ({err})", skippable=False
            ) from None
        return list(parquet.schema_arrow.names), parquet.iter_batches(batch_size=_TABLE_BATCH_ROWS)
    source = pa.memory_map(str(path))
    try:
        reader = pa.ipc.open_stream(source)
        names, batches = list(reader.schema.names), iter(reader)
    except pa.ArrowInvalid:
        try:
            reader = pa.ipc.open_file(source)
        except pa.ArrowInvalid as err:
            raise InputFormatError.described(
                path,
                None,
                INVALID_TABLE,
                f"neither a Parquet file nor an Arrow IPC stream or file ({err})",
                skippable=False,
            ) from None
        names, batches = list(reader.schema.names), (reader.get_batch(i) for i in range(reader.num_record_batches))
    expected = _expected_features(path)
    if expected is not None and sorted(expected) != sorted(names):
        raise InputFormatError.described(
            path,
            None,
            INVALID_TABLE,
            f"columns {names} differ from the features {expected} of {path.parent / 'dataset_info.json'}",
            skippable=False,
        )
    return names, batches


def _struct_field(value: Any, part: str, column: str) -> Any:
    """Field ``part`` of a struct value (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRecord(WRONG_TYPE, f"column {column!r}: {part!r} is looked up in a {type(value).__name__}")
    if part not in value:
        raise BadRecord(MISSING_KEY, f"column {column!r}: no field {part!r} (fields: {sorted(value)})")
    return value[part]


def table_column_value(row: Dict[str, Any], column: str) -> Any:
    """``row[column]``, following ``a.b`` into struct column ``a`` -- or into every struct of a list
    column ``a`` (WCEP's ``articles.text``); None when a struct on the way is null."""
    value: Any = row
    for part in column.split("."):
        if isinstance(value, list):
            value = [_struct_field(item, part, column) for item in value]
        else:
            value = _struct_field(value, part, column)
    return value


def iter_table_records(
    paths: Sequence[Path], session: ConversionSession, split: str, check_columns: Callable[[Path, List[str]], None]
) -> Iterator[Record]:
    """Records of tables, one per row, located at the 1-based row number of their file as the "line";
    payload: the row as a dict (struct columns as dicts, list columns as lists).
    ``check_columns(file, column names)`` runs before a file's first row."""
    for path in paths:
        for table_file in table_files(path, split):
            names, batches = iter_table_batches(table_file)
            check_columns(table_file, names)
            row = 0
            for batch in batches:
                for payload in batch.to_pylist():
                    row += 1
                    record = session.start_record(table_file, row)
                    record.payload = payload
                    yield record
