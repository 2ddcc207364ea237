"""Read the rows of data files (parquet, jsonl, json, saved Hugging Face datasets); errors name file and key.

Every trainer reads its data through :func:`read_rows` (or :func:`read_column` when validation only
needs one column), so a missing, corrupt or empty file stops the run with one sentence such as
``data.train_files: cannot read '/d/train.parquet' (ArrowInvalid: Parquet magic bytes not found ...)``
instead of a bare library message that does not say which of several files is broken.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import Any

__all__ = ["DataFileError", "DataFiles", "read_column", "read_rows"]

DataFiles = str | PathLike | Sequence[str | PathLike]
Row = dict[str, Any]


class DataFileError(ValueError):
    """A data file that is missing, unreadable, of an unsupported type or without rows."""


def read_rows(data_files: DataFiles, key: str = "data.train_files") -> list[Row]:
    """All rows of ``data_files`` (one path or a list), concatenated in order, as plain python dicts.

    Args:
        data_files: ``.parquet``, ``.jsonl``, ``.json`` (a list of objects) files or folders written by
            ``datasets.Dataset.save_to_disk``.
        key: the config key the files came from, named in errors (``data.val_files``).

    Raises:
        DataFileError: naming ``key`` and the file when one is missing, unreadable or holds no rows.
    """
    rows: list[Row] = []
    for path in _paths(data_files, key):
        rows.extend(_checked(path, key, _read_file))
    return rows


def read_column(path: str | PathLike, column: str, key: str) -> list[Any] | None:
    """The values of ``column`` in one data file (None when no row has it); reads only that column of parquet.

    Raises:
        DataFileError: as :func:`read_rows`.
    """
    path = Path(path).expanduser()
    if path.suffix.lower() == ".parquet" and path.is_file():
        return _checked(path, key, lambda p: _read_parquet_column(p, column))
    rows = _checked(path, key, _read_file)
    return [row.get(column) for row in rows] if any(column in row for row in rows) else None


def _paths(data_files: DataFiles, key: str) -> list[Path]:
    paths = [data_files] if isinstance(data_files, str | PathLike) else list(data_files)
    if not paths:
        raise DataFileError(f"{key} is empty; give at least one data file.")
    return [Path(p).expanduser() for p in paths]


def _checked(path: Path, key: str, read):
    """``read(path)``, with every failure (and an empty result) reported as one sentence naming the file."""
    if not path.exists():
        raise DataFileError(f"{key}: data file {str(path)!r} does not exist.")
    try:
        result = read(path)
    except DataFileError as err:
        raise DataFileError(f"{key}: {err}") from None
    except Exception as err:  # pyarrow, json and datasets each raise their own types
        raise DataFileError(f"{key}: cannot read {str(path)!r} ({type(err).__name__}: {err}).") from err
    if result is not None and len(result) == 0:
        raise DataFileError(f"{key}: data file {str(path)!r} holds no rows.")
    return result


def _read_file(path: Path) -> list[Row]:
    if path.is_dir():
        return _read_hf_folder(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        # to_pylist gives python lists/dicts (pandas would give numpy arrays for list columns)
        return pq.read_table(path).to_pylist()
    if suffix == ".jsonl":
        with path.open() as f:
            return [_json_row(line, path, number) for number, line in enumerate(f, 1) if line.strip()]
    if suffix == ".json":
        data = json.loads(path.read_text())
        if not isinstance(data, list):
            raise DataFileError(f"{str(path)!r}: a .json data file must hold a list of row objects.")
        return data
    raise DataFileError(
        f"{str(path)!r}: unsupported data file type {suffix!r}; use .parquet, .jsonl, .json or a "
        "folder saved with datasets.save_to_disk."
    )


def _json_row(line: str, path: Path, number: int) -> Row:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataFileError(f"cannot read {str(path)!r}: line {number} is not JSON ({err}).") from None
    if not isinstance(row, dict):
        raise DataFileError(f"{str(path)!r}: line {number} is a {type(row).__name__}, not a row object.")
    return row


def _read_parquet_column(path: Path, column: str) -> list[Any] | None:
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    if column not in schema.names:
        metadata = pq.read_metadata(path)
        return None if metadata.num_rows else []
    return pq.read_table(path, columns=[column]).column(0).to_pylist()


def _read_hf_folder(path: Path) -> list[Row]:
    import datasets

    try:
        data = datasets.load_from_disk(str(path))
    except FileNotFoundError as exc:
        raise DataFileError(
            f"{str(path)!r} is a folder but not a saved Hugging Face dataset ({exc})."
        ) from None
    if isinstance(data, datasets.DatasetDict):
        raise DataFileError(
            f"{str(path)!r} holds several splits {sorted(data)}; point the data files at one of them "
            f"({str(path / sorted(data)[0])!r})."
        )
    return data.to_list()
