"""Reading JSONL data files row by row, with errors that name the file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..fileio import not_a_file
from ..strict_rows import DECODER, RepeatedKeyError, loads
from ..text_bytes import not_utf8, nul_byte
from .bad_rows import BadRows


def read_jsonl(path: Path, bad: BadRows) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yields (line number, object) for each non-empty line; bad lines go to `bad`."""
    try:
        f = open(path, "rb")  # closed by the `with` below
    except OSError as e:  # a folder, or no permission
        raise DataError(f"cannot read it as a JSONL file ({e.strerror})", path) from None
    start = 0  # where the line begins in the file
    with f:
        for lineno, raw in enumerate(_lines(f), start=1):
            start, at = start + len(raw), start
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                bad.report(DataError(not_utf8(raw, e.start, path), path, lineno))
                continue
            if why := nul_byte(raw, path, at):  # UTF-16 without its mark decodes
                bad.report(DataError(why, path, lineno))
                continue
            if lineno == 1:  # a byte-order mark (Windows editors write one) is not the row's
                line = line.removeprefix("\ufeff")
            if not line.strip():
                continue
            try:
                row = loads(line)
            except RepeatedKeyError as e:
                bad.report(DataError(str(e), path, lineno))
                continue
            except json.JSONDecodeError as e:
                bad.report(DataError(f"malformed JSON ({e.msg}, column {e.colno})"
                                     f"{_array_hint(line, path)}", path, lineno))  # fmt: skip
                continue
            if not isinstance(row, dict):
                bad.report(DataError(_not_object(row, line, path), path, lineno))
                continue
            yield lineno, row


def _not_object(row: Any, line: str, path: Path) -> str:
    """Why a JSONL line that parsed is no row, with the usual causes named."""
    if isinstance(row, str):
        try:
            inner = json.loads(row)
        except ValueError:
            inner = None
        if isinstance(inner, dict):
            return (
                "expected a JSON object on this line, got a JSON string holding one (the "
                "row was encoded twice, json.dumps of json.dumps): write the object itself"
            )
    got = _JSON_KIND.get(type(row), "a number")
    return f"expected a JSON object on this line, got {got}{_array_hint(line, path)}"


_JSON_KIND = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}


def _array_hint(line: str, path: Path) -> str:
    """A JSON array where JSON Lines were expected: a `.json` name reads it as one."""
    if not line.lstrip().startswith("[") or path.suffix.lower() == ".json":
        return ""
    return (
        f": this looks like one JSON array, not JSON Lines (one object a line); "
        f"name the file {path.with_suffix('.json').name} to read it as an array"
    )


def _lines(f: Any) -> Iterator[bytes]:
    """A binary file's lines, ended by LF, CRLF or a lone CR (Excel for Mac's "CSV
    (Macintosh)" ends rows with CR; a raw CR cannot occur inside a JSON string)."""
    for chunk in f:
        yield from chunk.splitlines(keepends=True)


def read_json_array(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yields (line number, object) for each item of a `.json` file's array of objects, the
    line being where the item starts; the first bad item raises, naming its line. A file of one
    object a line is read as JSONL (many tools name those `.json`)."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(not_utf8(data, e.start, path), path) from None
    if why := nul_byte(data, path):
        raise DataError(why, path, data[: data.find(b"\x00")].count(b"\n") + 1)
    pos = _blank(text, 0)
    if not text.startswith("[", pos):
        refuse_one_object(text, path)
        yield from read_jsonl(path, BadRows())
        return
    lines = _Lines(text)
    pos = _blank(text, pos + 1)
    while not text.startswith("]", pos):
        try:
            row, end = DECODER.raw_decode(text, pos)
        except RepeatedKeyError as e:
            raise DataError(str(e), path, lines.at(pos)) from None
        except json.JSONDecodeError as e:
            raise DataError(f"malformed JSON ({e.msg}, column {e.colno})", path, e.lineno) from None
        if not isinstance(row, dict):  # a list of plain strings is the common one
            raise DataError(f"expected a JSON object as each item of the array, got {row!r:.60}:"
                            ' give each row as {"question": "...", ...} (plain questions, one '
                            "a line, go in a .txt file)", path, lines.at(pos))  # fmt: skip
        yield lines.at(pos), row
        pos = _blank(text, end)
        if text.startswith(",", pos):
            pos = _blank(text, pos + 1)
        elif not text.startswith("]", pos):
            raise DataError("expected ',' or ']' after an item of the array", path, lines.at(pos))
    if _blank(text, pos + 1) < len(text):
        raise DataError("text after the array's closing ']'", path, lines.at(pos))


def refuse_one_object(text: str, path: Path) -> None:
    """A `.json` file that is one object over several lines (`{"data": [...]}`, a pretty-printed
    row) is not rows; read as JSONL its first line was "malformed JSON". On one line it is
    refused when it holds a list of objects and nothing a row has beside it (an id, a text):
    it was read as one row, of no question column."""
    try:
        whole = loads(text)
    except ValueError:
        return  # one object a line (JSONL), or broken: the line reader names the line
    if not isinstance(whole, dict):
        return
    lists = [k for k, v in whole.items() if isinstance(v, list) and v and isinstance(v[0], dict)]
    wrapper = lists and all(isinstance(v, list | dict) or v is None for v in whole.values())
    if "\n" not in text.strip() and not wrapper:
        return
    hint = (
        f"; its {lists[0]!r} holds a list of objects: save that list as the file" if lists else ""
    )
    raise DataError("this .json file is one JSON object, not rows: write an array of row objects "
                    f"([{{...}}, ...]) or one object a line (.jsonl){hint}", path)  # fmt: skip


class _Lines:
    """Line numbers of increasing positions in a text, counted once (one big array is
    linear, not quadratic, to number)."""

    def __init__(self, text: str):
        self.text, self.pos, self.line = text, 0, 1

    def at(self, pos: int) -> int:
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line


def _blank(text: str, pos: int) -> int:
    """The position of the first non-whitespace character at or after pos."""
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def require(row: dict[str, Any], key: str, path: Path, line: int | None) -> Any:
    """The value of a field that must be present and non-empty."""
    value = row.get(key)
    if value is None or (isinstance(value, str | list) and len(value) == 0):
        raise DataError(f"row has no {key!r} field (or it is empty)", path, line)
    return value


def require_file(path: Path, dataset: str) -> Path:
    if not present(path, dataset):
        raise DataError(
            f"missing file for dataset {dataset!r}: looked for {path}. Point --data-dir (or "
            "RETRIEVAL_GATE_DATA) at a folder laid out like ../shared/datasets."
        )
    return path


def present(path: Path, dataset: str) -> bool:
    """A dataset file is there (a regular file) or not (nothing at its name); anything else
    at its name is refused: a folder, pipe or device was skipped as if absent, the dataset
    loaded without that file's questions and no word said."""
    what = not_a_file(path)
    if what is None:
        return path.is_file()
    raise DataError(f"dataset {dataset!r}: this is {what}, not a file; put the dataset file "
                    "there, or remove it", path)  # fmt: skip
