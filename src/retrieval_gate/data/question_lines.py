"""A file of questions to score (`retrieval-gate score --input`), read line by line: `.txt`
(one question a line, an optional `question` header line), `.jsonl` (`{id, question}`), `.json`
(the same, or an array of such objects; `.ndjson` is `.jsonl`) or `.csv` / `.tsv` (a `question`
or `text` column, optional `id`); a UTF-8 byte-order mark is skipped. A bad line (not UTF-8, a
NUL byte, empty, malformed JSON, no question field, not valid Unicode) becomes an error record
and the rest are still scored; a file that cannot be read at all, is no text (Parquet, gzip,
zip), is a `.json` array with a malformed item, or is text whose first line is a JSON row or a
header of cells (a CSV or TSV under another name), is an InputError."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import InputError
from ..questions import bad_id, has_text, id_text
from ..strict_rows import (
    RepeatedKeyError,
    allow_long_cells,
    first_repeated,
    loads,
    lone_surrogate_at,
)
from ..text_bytes import binary_kind, not_utf8, reencode
from .jsonl_files import read_json_array, refuse_one_object

HEADER_WORDS = ("question", "questions", "text")  # a .txt first line like this is a header
QUESTION_COLUMNS = ("question", "text")
JSONL_SUFFIXES = (".jsonl", ".ndjson")  # one JSON object a line, under either name
CSV_DELIMITERS = {".csv": ",", ".tsv": "\t"}  # a spreadsheet's text exports, by suffix
BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark, which some editors write first
SEPARATOR_NAMES = {",": "commas", ";": "semicolons", "\t": "tabs", "|": "'|'"}


def read_question_lines(path: Path) -> list[dict[str, Any]]:
    """One record a line: {line, id, text} or {line, id, error}. Bad lines (not UTF-8, empty,
    malformed JSON, no question field, a lone surrogate) become error records; the rest are
    still scored. A file that cannot be read at all is an InputError."""
    return list(iter_question_lines(path))


def iter_question_lines(path: Path, columns: set[str] | None = None) -> Iterator[dict[str, Any]]:
    """`read_question_lines`, one record at a time: a text, JSONL or CSV file is read as a
    stream, so a file of millions of questions takes the memory of a line (a `.json` file is
    read whole: it may be one array). Errors of the whole file are raised on the way.
    `columns`, when given, gathers the names of every row's fields (a CSV's header, each JSON
    object's keys, as written): `score` refuses a file whose answer columns it would not read."""
    # a stream cannot be checked whole before the model loads, nor resumed: `-`, /dev/stdin
    if str(path) == "-" or (path.exists() and not path.is_file() and not path.is_dir()):
        what = "standard input" if str(path) == "-" else "a pipe or device (standard input?)"
        raise InputError(f"{what} is not read: save the questions to a file (.txt, one a line; "
                         ".jsonl; .csv) and pass that", path)  # fmt: skip
    if not path.is_file():
        what = "is a folder, not a file" if path.exists() else "not found"
        raise InputError(f"input file {what}: pass a question file (.txt, .jsonl, .json, .csv, "
                         ".tsv)", path)  # fmt: skip
    suffix = path.suffix.lower()
    try:
        with open(path, "rb") as f:
            _refuse_binary(f.read(HEAD_BYTES), path)
            f.seek(0)
            if suffix == ".json":
                yield from _read_json(f.read(), path, columns)
            elif suffix in CSV_DELIMITERS:
                yield from _read_csv(f, path, CSV_DELIMITERS[suffix], columns)
            else:
                yield from _read_lines(f, path, suffix in JSONL_SUFFIXES, columns)
    except OSError as e:
        raise InputError(f"cannot read the input ({e.strerror})", path) from None


def _read_json(data: bytes, path: Path, columns: set[str] | None) -> Iterator[dict[str, Any]]:
    """A `.json` file: an array of row objects, else one object a line."""
    text = data.removeprefix(BOM)
    if text.lstrip().startswith(b"["):
        # an item without an id takes its place in the array: its line is no id (an array
        # written on one line has every item on line 1)
        for i, (n, row) in enumerate(read_json_array(path), start=1):
            yield _row_record({"line": n, "id": str(i)}, row, columns)
        return
    refuse_one_object(text.decode("utf-8", "replace"), path)
    yield from _read_lines(io.BytesIO(data), path, True, columns)  # which drops the BOM


def _read_lines(
    f: BinaryIO, path: Path, is_jsonl: bool, columns: set[str] | None = None
) -> Iterator[dict[str, Any]]:
    """One record a line (a question, or a JSON object when `is_jsonl`); a text file's header
    line ("question") is skipped (JSONL has none: a row asking "Text" is a question)."""
    lineno = 0
    for chunk in f:  # up to each b"\n"; splitlines() below also ends lines at a lone b"\r"
        if lineno == 0:
            chunk = chunk.removeprefix(BOM)  # a byte-order mark is not the first question's
            if not is_jsonl:
                refuse_structured_text(chunk.split(b"\n", 1)[0].decode("utf-8", "replace"), path)
        for raw in chunk.splitlines(keepends=True):
            lineno += 1
            rec = _parse_line(raw, lineno, is_jsonl, columns)
            header = lineno == 1 and rec.get("text", "").strip().lower() in HEADER_WORDS
            if header and not is_jsonl:
                continue  # a header line, not a question
            yield rec


HEAD_BYTES = 8192  # what the binary check reads: a text line may hold a stray NUL, data many


def refuse_structured_text(first_line: str, path: Path) -> None:
    """A file read as one question a line whose first line is a JSON object or a header of
    separated cells: each whole line would be scored as a question (ids, tabs and all)."""
    line = first_line.strip()
    if line.startswith("{") and line.endswith("}"):
        raise InputError("this line is a JSON object, and a text file is read one question a "
                         "line: name the file .jsonl to read its fields", path, 1)  # fmt: skip
    for sep, name in SEPARATOR_NAMES.items():
        cells = [c.strip().strip('"').lower() for c in line.split(sep)]
        if len(cells) > 1 and any(c in QUESTION_COLUMNS for c in cells):
            raise InputError(f"this is a header of cells separated by {name}, and a text file "
                             f"is read one question a line: {_fix_for(sep)}", path, 1)  # fmt: skip


def refuse_other_separator(header: list[str], path: Path, delimiter: str) -> None:
    """A header read as one cell that holds another separator: the file's cells are separated
    by a character other than the one its suffix says (a spreadsheet in a ';' locale)."""
    if len(header) != 1:
        return
    for sep, name in SEPARATOR_NAMES.items():
        if sep != delimiter and sep in header[0]:
            raise InputError(f"the header is one cell {header[0]!r}: this file separates its "
                             f"cells with {name}, not {SEPARATOR_NAMES[delimiter]}; "
                             f"{_fix_for(sep)}", path, 1)  # fmt: skip


def _fix_for(sep: str) -> str:
    """What to do with a file whose cells `sep` separates: the suffix that reads it, if any."""
    suffix = next((s for s, d in CSV_DELIMITERS.items() if d == sep), None)
    return f"name the file {suffix}" if suffix else "save it with commas as .csv (or tabs as .tsv)"


def _refuse_binary(head: bytes, path: Path) -> None:
    """A Parquet, gzip, zip or SQLite file (or any mostly-NUL data) read line by line would
    become questions of garbage: its lines without a NUL were scored."""
    what = binary_kind(head)
    if what:
        raise InputError(f"not lines of text: this is {what}", path)
    nul = head.count(b"\x00")
    if nul * 10 > len(head):
        raise InputError(f"not lines of text: {nul} of its first {len(head)} bytes are NUL, "
                         "so it is binary data or UTF-16 text (re-encode that: "
                         f"{reencode('UTF-16', path)})", path)  # fmt: skip


_NUL = "holds a NUL byte (binary data, or UTF-16 text); save it as UTF-8"


def _parse_line(
    raw: bytes, lineno: int, is_jsonl: bool, columns: set[str] | None = None
) -> dict[str, Any]:
    rec: dict[str, Any] = {"line": lineno, "id": str(lineno)}
    if b"\x00" in raw:
        return {**rec, "error": _NUL}
    try:
        line = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        return {**rec, "error": not_utf8(raw, e.start)}
    if is_jsonl and line.strip():
        try:
            row = loads(line, lone_surrogates=True)  # _row_record names the field
        except RepeatedKeyError as e:
            return {**rec, "error": str(e)}
        except json.JSONDecodeError as e:
            return {**rec, "error": f"malformed JSON ({e.msg})"}
        if not isinstance(row, dict):
            return {**rec, "error": "expected a JSON object with a 'question' field"}
        return _row_record(rec, row, columns)
    if not has_text(line):
        return {**rec, "error": "empty question"}
    return {**rec, "text": line}


def _row_record(
    rec: dict[str, Any], row: dict[str, Any], columns: set[str] | None = None
) -> dict[str, Any]:
    """The record of one JSON object: its question, or an error naming what is wrong (its
    keys gathered in `columns`, when given)."""
    if columns is not None:
        columns.update(row)
    id_key = "id" if "id" in row else _in_any_case(("id",), row) or "id"
    if row.get(id_key) is not None:  # the row's own id, also on its error record
        rid = id_text(row[id_key])
        if rid is None:  # a list or true/false was echoed as "[1]" or "True"
            return {**rec, "error": bad_id(row[id_key])}
        if lone_surrogate_at(rid) is not None:  # no output could print it
            return {**rec, "error": "the id is not valid Unicode (a lone surrogate); write it "
                                    "as UTF-8"}  # fmt: skip
        rec["id"] = rid
    # QUESTION_COLUMNS spelled out: a generator over it cost 10% of reading a JSONL row
    key = "question" if "question" in row else "text" if "text" in row else None
    line = row.get(key or _in_any_case(QUESTION_COLUMNS, row) or "question")
    if not isinstance(line, str):
        return {**rec, "error": "no 'question' or 'text' string field"}
    at = lone_surrogate_at(line)  # which no tokenizer can encode
    if at is not None:
        return {**rec, "error": f"not valid Unicode (a lone surrogate at character {at}); "
                                "write the question as UTF-8"}  # fmt: skip
    if not has_text(line):
        return {**rec, "error": "empty question"}
    return {**rec, "text": line}


def columns_in_any_case(candidates: tuple[str, ...], seen: set[str]) -> tuple[str, ...]:
    """The columns of `candidates` a file has: each by its name, else in another case when one
    column alone matches so (`Question`, `ID`: spreadsheets capitalise headers; a CSV's were
    read, `--questions` and JSON rows said "no question column")."""
    lower: dict[str, list[str]] = {}
    for column in seen:
        lower.setdefault(column.lower(), []).append(column)
    found = []
    for c in candidates:
        if c in seen:
            found.append(c)
        elif len(lower.get(c, ())) == 1:
            found.append(lower[c][0])
    return tuple(found)


def _in_any_case(candidates: tuple[str, ...], row: dict[str, Any]) -> str | None:
    """The first of `candidates` a row names in another case only (the rare row: the common
    one names them as they are, and is not walked)."""
    return next(iter(columns_in_any_case(candidates, set(row))), None)


def _read_csv(
    f: BinaryIO, path: Path, delimiter: str, columns: set[str] | None = None
) -> Iterator[dict[str, Any]]:
    """A CSV (or TSV) with a header naming a `question` (or `text`) column and optionally
    `id`, read a row at a time."""
    text = io.TextIOWrapper(f, encoding="utf-8-sig", newline="")
    allow_long_cells()
    try:
        # strict: a quote left open ends in an error, where it read the rest of the file
        rows = csv.reader(text, delimiter=delimiter, strict=True)
        yield from _csv_records(rows, path, delimiter, columns)
    except UnicodeDecodeError:  # said with its place in the whole file, read again for it
        data = path.read_bytes()
        try:
            data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise InputError(not_utf8(data, e.start, path), path) from None
        raise
    except csv.Error as e:
        raise csv_error(e, path, delimiter) from None
    finally:
        text.detach()  # the caller closes the file


def _csv_records(
    rows: Any, path: Path, delimiter: str, columns: set[str] | None = None
) -> Iterator[dict[str, Any]]:
    """`rows`: a csv.reader, whose line count places each row where it starts in the file (a
    quoted cell may hold line breaks, so the row's count is not its line)."""
    first = next(rows, None)
    if first is None:
        return
    refuse_other_separator(first, path, delimiter)
    header = [h.strip().lower() for h in first]
    if columns is not None:
        columns.update(header)
    if repeated := first_repeated([h for h in header if h in (*QUESTION_COLUMNS, "id")]):
        raise InputError(f"CSV header names column {repeated!r} twice; rename one", path, 1)
    col = next((header.index(c) for c in QUESTION_COLUMNS if c in header), None)
    if col is None:
        raise InputError(f"CSV header {first!r} has no 'question' or 'text' column; add one",
                         path, 1)  # fmt: skip
    id_col = header.index("id") if "id" in header else None
    lineno = rows.line_num + 1
    for row in rows:
        rec: dict[str, Any] = {"line": lineno, "id": str(lineno)}
        lineno = rows.line_num + 1
        # a row of other cells than the header's has its question in another column (a
        # cell left out shifted the rest: the answer was scored), or is a second header
        why = (cell_count_problem(len(row), first, delimiter) or second_header(row, first)
               if row else None)  # fmt: skip
        if why:
            yield {**rec, "error": why}
            continue
        if id_col is not None and id_col < len(row) and row[id_col].strip():
            rec["id"] = row[id_col]
        question = row[col] if col < len(row) else ""
        if "\x00" in question:  # Python's csv reads a NUL as text: it was scored with it
            yield {**rec, "error": _NUL}
            continue
        ok = has_text(question)
        yield {**rec, "text": question} if ok else {**rec, "error": "empty question"}


def cell_count_problem(cells: int, header: list[str], delimiter: str) -> str | None:
    """What is wrong with a CSV row of `cells` cells under `header`, or None. Missing cells of
    unnamed columns only (a header's trailing separators) are not; others are: Python's csv
    padded a short row, so a row that left out its first cell read its question as the id and
    its answer as the question."""
    named = max((i + 1 for i, h in enumerate(header) if h.strip()), default=0)
    if named <= cells <= len(header):
        return None
    said = f"row has {cells} cells but the header has {len(header)}"
    if cells > len(header):
        return f"{said}; quote cells that hold {SEPARATOR_NAMES.get(delimiter, delimiter)}"
    return (f"{said}: a cell left out moves the ones after it into other columns; write every "
            f"cell, an empty one for a missing value (a{delimiter}{delimiter}c)")  # fmt: skip


def second_header(row: list[str], header: list[str]) -> str | None:
    """A row that repeats the header (with the second file's byte-order mark, if it had one):
    two CSV files joined as they are (`cat a.csv b.csv`); read as a question "question"."""
    if row and [row[0].removeprefix("\ufeff"), *row[1:]] == header:
        return (
            "this row repeats the header: a second header (files joined with cat?); "
            "remove it, or join the files without it (tail -n +2 b.csv >> a.csv)"
        )
    return None


def csv_error(error: csv.Error, path: Path, delimiter: str, line: int | None = None) -> InputError:
    """The csv module's error (strict) as the user's: where a quoted cell was left open, or
    was closed and went on (`"a"b`), is found again in the file; else its own message (at
    `line`, where the reader stopped)."""
    found = quote_left_open(path.read_text("utf-8-sig", errors="replace"), delimiter)
    if found is None:  # a cell past the limit
        return InputError(f"not a readable CSV file ({error})", path, line)
    opened, line, after = found
    if not after:
        return InputError("a quoted cell opened on this line is never closed, so the rest of "
                          "the file would read as that one cell; add its closing '\"' (a '\"' "
                          "inside a quoted cell is written '\"\"')", path, opened)  # fmt: skip
    at = "" if line == opened else f" (line {line})"
    return InputError(f"a quoted cell opened on this line ends with a '\"' followed by "
                      f"{after!r}{at}, not by {SEPARATOR_NAMES.get(delimiter, delimiter)} or "
                      "the row's end: quote the whole cell and double each '\"' inside it "
                      '("say ""hi"" twice"), or close the quote left open before it', path,
                      opened)  # fmt: skip


def quote_left_open(text: str, delimiter: str) -> tuple[int, int, str] | None:
    """The first quoted cell of a CSV text that is never closed, or whose closing quote is
    followed by more than a separator or the row's end (both refused by csv's strict mode):
    (the line where it opened, the line of its closing quote, the character after it: "" at
    the end of the file); None if none. Read as the csv module reads it (a `"` inside an
    unquoted cell is text, `""` inside a quoted one a quote)."""
    ends = re.compile('\r\n|[\r\n"' + re.escape(delimiter) + "]")
    line, pos, cell = 1, 0, 0  # cell: where the cell being read starts
    while (m := ends.search(text, pos)) is not None:
        token, pos = m.group(), m.end()
        if token != '"':
            line += token != delimiter
            cell = pos
            continue
        if m.start() != cell:  # a quote inside an unquoted cell
            continue
        opened = line
        while True:  # to the closing quote, over the doubled ones
            close = text.find('"', pos)
            if close < 0:
                return opened, line, ""
            line += _breaks(text, pos, close)
            pos = close + 1
            if not text.startswith('"', pos):
                break
            pos += 1
        after = text[pos : pos + 1]
        if after not in ("", delimiter, "\r", "\n"):
            return opened, line, after
    return None


def _breaks(text: str, start: int, end: int) -> int:
    """The line breaks in text[start:end] (CRLF, LF or a lone CR: csv reads each as one)."""
    return (text.count("\n", start, end) + text.count("\r", start, end)
            - text.count("\r\n", start, end))  # fmt: skip
