"""Reading a user's data files: CSV, TSV, JSON Lines and Parquet, with errors that name file, line and column.

    rows = read_table("data/train.csv", ["text", "labels"])   # [Row(values={...}, line=2), ...]

* ``.csv`` / ``.tsv``: Python's ``csv`` module (quoting, embedded newlines and commas handled by it), the
  first row names the columns; ``line`` is the physical line a record ends on.
* ``.jsonl``: one JSON object per line (blank lines skipped); list values stay lists.
* ``.parquet``: pyarrow (``pip install 'attnzoo[parquet]'``); ``line`` is the row number, from 1.
* a folder: every file above in it, in name order, as one table.

Files are read as UTF-8 (a byte-order mark is accepted); a byte that is not UTF-8 is reported with its
line, never replaced. Why the standard library and pyarrow rather than Hugging Face ``datasets``: the
three text formats need nothing beyond Python, Parquet needs pyarrow in either case, and ``datasets``
would bring a cache folder, network calls and a dependency tree for what is a loop over rows.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnzoo.errors import DataError, extra_import_message

__all__ = ["Row", "read_table", "iter_table", "SUFFIXES", "DataError"]

SUFFIXES = (".csv", ".tsv", ".jsonl", ".parquet")


@dataclass(frozen=True)
class Row:
    values: dict[str, Any]
    file: Path
    line: int

    def where(self, column: str | None = None) -> str:
        return f"{self.file}, line {self.line}" + (f", column {column!r}" if column else "")


def files_of(path: str | Path) -> list[Path]:
    """The data files a path names: itself, or the supported files in a folder (name order)."""
    path = Path(path)
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.suffix.lower() in SUFFIXES and p.is_file())
        if not found:
            raise DataError(f"{path}: a folder with no {', '.join(SUFFIXES)} file in it")
        return found
    if not path.is_file():
        raise DataError(f"data file not found: {path.resolve()}")
    if path.suffix.lower() not in SUFFIXES:
        raise DataError(f"{path}: unsupported format {path.suffix!r}; use {', '.join(SUFFIXES)}")
    return [path]


def read_table(path: str | Path, columns: Sequence[str]) -> list[Row]:
    """Every row of the file(s) at ``path``; each must have ``columns`` (others are ignored)."""
    return list(iter_table(path, columns))


def iter_table(path: str | Path, columns: Sequence[str]) -> Iterator[Row]:
    """The rows of :func:`read_table` one at a time, the file read as a stream: a reader that keeps some
    rows holds those, not the file (each process of a distributed run keeps its share)."""
    for file in files_of(path):
        reader = {".csv": _read_delimited, ".tsv": _read_delimited, ".jsonl": _read_jsonl, ".parquet": _read_parquet}[
            file.suffix.lower()
        ]
        for values, line in reader(file, columns):
            yield Row(values, file, line)


def _missing(file: Path, present: Sequence[str], columns: Sequence[str], line: int | None = None) -> None:
    lacking = [c for c in columns if c not in present]
    if lacking:
        where = f"{file}" + (f", line {line}" if line else "")
        raise DataError(
            f"{where}: no column {lacking[0]!r}; the columns are {', '.join(map(repr, present)) or 'none'} "
            f"(name the right one in the recipe's data section, or with --text / --labels / --target)"
        )


def _text_of(file: Path) -> str:
    data = file.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(
            f"{file}, line {line}: byte 0x{data[e.start]:02x} at character {column} is not UTF-8; "
            f"re-save the file as UTF-8"
        ) from None


# csv's own limit on a field is 128 KiB; one long document in a field is ordinary here
_FIELD_LIMIT = 2**31 - 1


def _read_delimited(file: Path, columns: Sequence[str]) -> Iterator[tuple[dict, int]]:
    # read as a stream; a byte that is not UTF-8 is then reported by _text_of, which reads the whole file
    # to say where (on that error only)
    with open(file, encoding="utf-8-sig", newline="") as handle:
        # newline="" lets csv find the rows itself: only \r and \n end one (str.splitlines would also split
        # at a form feed or U+2028 inside an unquoted field)
        # strict: a quote that is never closed is an error, not the rest of the file read as one field
        reader = csv.DictReader(handle, delimiter="\t" if file.suffix.lower() == ".tsv" else ",", strict=True)
        limit = csv.field_size_limit()
        csv.field_size_limit(max(limit, _FIELD_LIMIT))
        try:
            yield from _delimited_rows(file, reader, columns)
        except UnicodeDecodeError:
            _text_of(file)
            raise
        finally:
            csv.field_size_limit(limit)  # the limit is csv's global state: give it back


def _delimited_rows(file: Path, reader: csv.DictReader, columns: Sequence[str]) -> Iterator[tuple[dict, int]]:
    try:
        names = reader.fieldnames or []
    except csv.Error as e:
        raise _quoting_error(file, 1, e) from None
    twice = sorted({n for n, count in Counter(names).items() if count > 1})
    if twice:
        raise DataError(f"{file}, line 1: the header names the column {twice[0]!r} twice; rename one")
    _missing(file, names, columns, 1)
    records = iter(reader)
    while True:
        starts = reader.line_num + 1  # the line this record begins on
        try:
            record = next(records)
        except StopIteration:
            return
        except csv.Error as e:
            raise _quoting_error(file, starts, e) from None
        if None in record:  # more fields than the header names
            raise DataError(
                f"{file}, line {reader.line_num}: {len(record) - 1 + len(record[None])} fields where the "
                f"header has {len(reader.fieldnames or [])}; quote fields that hold the delimiter"
            )
        yield record, reader.line_num


def _quoting_error(file: Path, starts: int, error: csv.Error) -> DataError:
    """What csv refused, by line: a quote opened and never closed (which would swallow every line after
    it into one field), or text after a closing quote."""
    if "unexpected end of data" in str(error):
        text = _text_of(file)  # the lines after the quote, counted on this error only
        lines = text.count("\n") + (not text.endswith("\n"))
        return DataError(
            f'{file}, line {starts}: a field opens a quote (") that is never closed, so the '
            f"{lines - starts} line(s) after it would be read as part of that one field; close the quote, or "
            f'write a quote inside a quoted field as two ("")'
        )
    return DataError(
        f"{file}, line {starts}: {error}; a field that starts with a quote must end with one, followed by the "
        f'delimiter (write a quote inside a quoted field as two: "")'
    )


def _read_jsonl(file: Path, columns: Sequence[str]) -> Iterator[tuple[dict, int]]:
    # lines end at \n only (a binary file's lines): JSON strings may hold U+2028 or a form feed, which
    # str.splitlines splits at; read as a stream, a line at a time
    with open(file, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                _text_of(file)  # says where
                raise
            record = _json_record(file, number, line.removesuffix("\n").removesuffix("\r"), columns)
            if record is not None:
                yield record, number


def _json_record(file: Path, number: int, line: str, columns: Sequence[str]) -> dict | None:
    """One JSON Lines line as an object with ``columns`` (None for a blank line)."""
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"{file}, line {number}: not a JSON object ({e.msg})") from None
    if not isinstance(record, dict):
        raise DataError(f"{file}, line {number}: expected a JSON object per line, got {type(record).__name__}")
    _missing(file, list(record), columns, number)
    return record


def _read_parquet(file: Path, columns: Sequence[str]) -> Iterator[tuple[dict, int]]:
    try:
        import pyarrow.parquet as pq
    except Exception as e:
        raise DataError(
            extra_import_message(f"{file}: reading Parquet needs pyarrow", "parquet", e, "pyarrow")
        ) from None
    parquet = pq.ParquetFile(file)
    _missing(file, parquet.schema_arrow.names, columns)
    number = 0
    for batch in parquet.iter_batches(batch_size=1024, columns=list(columns)):  # a stream, not the table
        for record in batch.to_pylist():
            number += 1
            yield record, number
