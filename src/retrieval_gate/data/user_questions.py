"""Your own question file as Questions: JSONL (or .ndjson), JSON (an array of objects), CSV,
TSV, Parquet, a `datasets` `save_to_disk` folder or a Hugging Face dataset
(`hf:NAME[:CONFIG][@SPLIT]`).

Columns map to Question fields by name (`id`, `question` or `text`, `answers` or `answer`,
optional `source`, `split`, `relation`, `entity`, `s_pop`, `o_pop`, `date`; in another case,
`Question`, when one column alone matches so); `--field question=title` maps a field to another
column. Every other column is kept in `Question.extra`.
Answers may be a list, a single string, or (in a CSV cell) a JSON list. A row without an id gets
a stable one from its text; questions without a `split` get a seeded split (`spec_splits`)."""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import numbers
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from ..errors import DataError, clipped
from ..hub import offline_when_unreachable
from ..questions import Question, bad_id, has_text, id_text
from ..strict_rows import allow_long_cells, first_repeated
from ..text_bytes import binary_kind, not_utf8, nul_byte
from .answer_confidence import (
    MEAN_LOGPROB,
    TOKEN_LOGPROBS,
    agreed_token_logprobs,
    parse_mean_logprob,
    parse_token_logprobs,
)
from .bad_rows import BadRows
from .jsonl_files import read_json_array, read_jsonl
from .list_cells import list_cell
from .question_lines import (
    CSV_DELIMITERS,
    HEADER_WORDS,
    JSONL_SUFFIXES,
    cell_count_problem,
    columns_in_any_case,
    csv_error,
    refuse_other_separator,
    refuse_structured_text,
    second_header,
)
from .splits import SPLITS, canonical_questions, group_key, group_splits

log = logging.getLogger(__name__)

# Question field -> the columns tried, in order, when no --field override names one.
DEFAULT_COLUMNS: dict[str, tuple[str, ...]] = {
    "id": ("id",),
    "text": ("question", "text"),
    "answers": ("answers", "answer"),
    "source": ("source",),
    "split": ("split",),
    "relation": ("relation",),
    "entity": ("entity",),
    "s_pop": ("s_pop",),
    "o_pop": ("o_pop",),
    "date": ("date",),
    # the question's closed-book answer's confidence (a two-stage gate's input), kept in
    # `extra`; `logprobs` is an OpenAI-compatible reply's own name for it
    TOKEN_LOGPROBS: (TOKEN_LOGPROBS, "logprobs"),
    MEAN_LOGPROB: (MEAN_LOGPROB,),
}
ANSWER_FIELDS = (TOKEN_LOGPROBS, MEAN_LOGPROB)
FIELD_ALIASES = {"question": "text", "answer": "answers"}
FORMATS = (*JSONL_SUFFIXES, ".json", *CSV_DELIMITERS, ".parquet", ".txt")
COMPRESSED = {".gz": "gunzip", ".bz2": "bunzip2", ".xz": "unxz", ".zst": "unzstd",
              ".zip": "unzip"}  # fmt: skip

Row = tuple[int, dict[str, Any]]
_JOINED = re.compile(r"[|;]")
_WHOLE_FLOAT = re.compile(r"-?\d+\.0")  # pandas' to_csv of an int column with a gap
_LINE_END = re.compile(r"\r\n|\r|\n")  # not str.splitlines' U+2028, form feed, ...


def parse_fields(items: Iterable[str] | dict[str, str] | None) -> dict[str, str]:
    """`["question=title", "answers=gold"]` (or the dict `{question: title}` of a config)
    -> {"text": "title", "answers": "gold"}."""
    if isinstance(items, dict):
        items = [f"{k}={v}" for k, v in items.items()]
    out: dict[str, str] = {}
    for item in items or ():
        field, sep, column = item.partition("=")
        field = FIELD_ALIASES.get(field.strip(), field.strip())
        if not sep or not column.strip() or field not in DEFAULT_COLUMNS:
            raise DataError(
                f"--field {item!r}: expected FIELD=COLUMN with FIELD one of "
                f"question, answers, {', '.join(f for f in DEFAULT_COLUMNS if f != 'text' and f != 'answers')}"
                " (e.g. --field question=title)"
            )
        if field in out and out[field] != column.strip():  # the last one won, silently
            raise DataError(f"--field names two columns for {item.partition('=')[0].strip()}: "
                            f"{out[field]} and {column.strip()}; keep one")  # fmt: skip
        out[field] = column.strip()
    return out


def question_set(
    spec: str | None = None, fields: Iterable[str] | dict[str, str] | None = None, seed: int = 0
) -> tuple[Question, ...]:
    """The questions a verb works on, each with its split: SPEC's (`read_questions`), or with
    no SPEC every bundled dataset on the canonical split."""
    if not spec:
        return canonical_questions()
    return tuple(read_questions(spec, parse_fields(fields), seed))


def read_questions(
    spec: str, fields: dict[str, str] | None = None, seed: int = 0
) -> list[Question]:
    """The questions of SPEC with their split (the file's `split` column, or a seeded one)."""
    rows = list(read_rows(spec))
    if not rows:
        raise DataError("the question file has no rows; write one question a row", spec)
    columns = _columns(spec, rows, fields or {})
    if not spec.startswith("hf:") and Path(spec).suffix.lower() in CSV_DELIMITERS:
        rows = _whole_float_answers(rows, columns["answers"])
    default_source = _default_source(spec)
    numbered = [(n, _question(spec, n, row, columns, default_source)) for n, row in rows]
    _note_joined_answers(spec, numbered)
    _note_filled_in(spec, rows, columns, default_source)
    return spec_splits(_drop_duplicates(spec, numbered), seed)


def _whole_float_answers(rows: list[Row], answer_columns: tuple[str, ...]) -> list[Row]:
    """A CSV answers column whose every answer is spelled `1999.0` is the float column pandas
    writes for an int one with a gap: read as its integers, as Parquet and JSONL give them
    (else every label of it reads "wrong"). A column that also holds other answers is kept
    as written (a version "2.0" beside "2.1" is text)."""
    for column in answer_columns:
        cells = [row[column] for _, row in rows if not _blank(row.get(column))]
        if cells and all(isinstance(c, str) and _WHOLE_FLOAT.fullmatch(c) for c in cells):
            rows = [(n, _with_int_answer(row, column)) for n, row in rows]
    return rows


def _with_int_answer(row: dict[str, Any], column: str) -> dict[str, Any]:
    if _blank(row.get(column)):
        return row
    return {**row, column: row[column].removesuffix(".0")}


def _note_filled_in(
    spec: str, rows: list[Row], columns: dict[str, tuple[str, ...]], source: str
) -> None:
    """A `split` or `source` column with empty cells: those rows get their group's or a drawn
    split, or the file's name as their source, beside the other rows' own; said, as it was not
    (a test set of the rows that name it and some drawn ones)."""
    drawn = "the split their entity's (else text's) rows have, else a drawn one (seeded)"
    for field, given in (("split", drawn), ("source", f"source {source!r}")):
        if not columns[field]:  # no such column: every row's is filled in, as documented
            continue
        empty = [n for n, row in rows if _blank(_cell(row, columns, field)[1])]
        if empty:
            log.warning(f"{spec}: {len(empty)} of {len(rows)} rows have an empty "
                        f"{' or '.join(columns[field])!r} cell (the first: line {empty[0]}) "
                        f"and get {given}; fill them in to choose it")  # fmt: skip


def _note_joined_answers(spec: str, numbered: Sequence[tuple[int, Question]]) -> None:
    """A lone gold answer holding '|' or ';' is most likely several joined in one cell (a
    spreadsheet's "Shakespeare | William Shakespeare"): judged whole, no answer contains it,
    and every label of those questions reads "wrong" without a word."""
    joined = [(n, q) for n, q in numbered if len(q.answers) == 1 and _JOINED.search(q.answers[0])]
    if joined:
        n, q = joined[0]
        log.warning(f"{spec}: {len(joined)} question(s) have one gold answer holding '|' or ';' "
                    f"(line {n}: {clipped(repr(q.answers[0]), 60)}); if these are several "
                    'answers, write them as a list, ["a", "b"]: each answer is matched whole')  # fmt: skip


def spec_splits(questions: Sequence[Question], seed: int = 0) -> list[Question]:
    """Questions that carry no split take the one their group (entity, else normalised text:
    `group_key`) already has in the file, so no entity straddles train and test; groups with
    none get one from `group_splits` (deterministic in the seed)."""
    given: dict[str, str] = {}
    for q in questions:
        if q.split is not None:
            given.setdefault(group_key(q), q.split)  # the file's first, if it split one itself
    taken = [q if q.split else replace(q, split=given.get(group_key(q))) for q in questions]
    missing = [q for q in taken if q.split is None]
    if not missing:
        return taken
    assigned = group_splits(missing, seed)
    return [q if q.split else replace(q, split=assigned[q.id]) for q in taken]


def _default_source(spec: str) -> str:
    if spec.startswith("hf:"):
        return spec[3:].split(":")[0].split("@")[0].replace("/", "_")
    return Path(spec).stem or "questions"


# -- reading rows ---------------------------------------------------------------------------


def read_rows(spec: str) -> Iterator[Row]:
    """(row number, row) of a JSONL / JSON / CSV / TSV / Parquet / text file, a save_to_disk
    folder or hf:NAME."""
    if spec.startswith("hf:"):
        yield from _hf_rows(spec)
        return
    path = Path(spec)
    if path.is_dir():
        yield from _disk_rows(path)
        return
    if not path.is_file():
        what = (
            "is a device, pipe or socket (standard input?), not a file: save the questions to one"
            if path.exists()
            else "file not found"
        )
        raise DataError(
            f"{what}; pass a {', '.join(FORMATS)} file, a save_to_disk folder or "
            "hf:NAME[:CONFIG][@SPLIT]",
            spec,
        )
    suffix = path.suffix.lower()
    if suffix in COMPRESSED:
        raise DataError(f"a compressed file: decompress it first ({COMPRESSED[suffix]} "
                        f"{path.name}) and pass {path.stem}", path)  # fmt: skip
    if suffix not in FORMATS:
        raise DataError(
            f"unknown file format {suffix or '(no extension)'!r}; use "
            f"{', '.join(FORMATS)}, a save_to_disk folder or hf:NAME",
            path,
        )
    if suffix == ".parquet":
        yield from _parquet_rows(path)
        return
    _check_utf8(path)
    if suffix in CSV_DELIMITERS:
        yield from _csv_rows(path, CSV_DELIMITERS[suffix])
        return
    readers = {**dict.fromkeys(JSONL_SUFFIXES, _jsonl_rows), ".json": read_json_array,
               ".txt": _text_rows}  # fmt: skip
    yield from readers[suffix](path)


def _check_utf8(path: Path) -> None:
    """UTF-8 text, not a binary file whose bytes happen to decode (an SQLite header does)."""
    data = path.read_bytes()
    if what := binary_kind(data):
        raise DataError(f"not text: this is {what}", path)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataError(not_utf8(data, e.start, path), path, line) from None
    if why := nul_byte(data, path):  # else read as questions of "W\x00h\x00o\x00"
        raise DataError(why, path, data[: data.find(b"\x00")].count(b"\n") + 1)


def _jsonl_rows(path: Path) -> Iterator[Row]:
    yield from read_jsonl(path, BadRows())  # a bad line raises, naming the file and line


def _text_rows(path: Path) -> Iterator[Row]:
    """One question a line (as `score --input` reads it), an optional `question` header line
    skipped; a blank line inside is refused naming it (blank lines at the end are not)."""
    lines = _LINE_END.split(path.read_text(encoding="utf-8-sig").rstrip())
    refuse_structured_text(lines[0] if lines else "", path)
    for n, line in enumerate(lines, start=1):
        if n == 1 and line.strip().lower() in HEADER_WORDS:
            continue
        if not has_text(line):
            raise DataError("empty line: write one question a line", path, n)
        yield n, {"question": line.strip()}


def _csv_rows(path: Path, delimiter: str) -> Iterator[Row]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        first = f.readline()
        if first.lstrip().startswith(("{", "[")):
            raise DataError("this looks like JSON, not CSV; name the file .jsonl", path, 1)
        f.seek(0)
        allow_long_cells()
        # strict: a quote left open is an error, where it read the rest of the file as a cell
        reader = csv.reader(f, delimiter=delimiter, strict=True)
        try:
            yield from _csv_dicts(reader, path, delimiter)
        except csv.Error as e:  # that, or a cell past the limit
            raise csv_error(e, path, delimiter, reader.line_num) from None


def _csv_dicts(reader: Any, path: Path, delimiter: str) -> Iterator[Row]:
    """The rows of a CSV file (a csv.reader) after its header, each with the line it starts
    on (a quoted cell may hold line breaks: the reader's count is where the row ends)."""
    header = next(reader, None)
    if header is None:
        return
    refuse_other_separator(header, path, delimiter)
    # read stripped, as `score --input` reads them: an `answers ` column was kept in extra, and
    # the questions read with no gold answers, ids made from the text and a drawn split
    names = [h.strip() for h in header]
    # empty header cells (a spreadsheet's trailing columns) name nothing
    if repeated := first_repeated([n for n in names if n]):
        raise DataError(f"the header names column {repeated!r} twice; rename one", path, 1)
    start = reader.line_num + 1
    for cells in reader:
        n, start = start, reader.line_num + 1
        if not cells:  # a blank line, as csv.DictReader skipped it
            continue
        # a short row was padded: one that left out its id read its question as the id
        if why := cell_count_problem(len(cells), header, delimiter) or second_header(cells, header):
            raise DataError(why, path, n)
        padded = [*cells, *[""] * (len(header) - len(cells))]  # unnamed columns only
        yield n, {k: (v if v != "" else None) for k, v in zip(names, padded, strict=True)}


def _parquet_rows(path: Path) -> Iterator[Row]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # a column named twice: reading the table said so in a page of Arrow's schema
        if repeated := first_repeated(pq.read_schema(path).names):
            raise DataError(f"the file names column {repeated!r} twice; rename one", path)
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(f"not a readable Parquet file ({e})", path) from None
    yield from enumerate(table.to_pylist(), start=1)


def _disk_rows(path: Path) -> Iterator[Row]:
    from datasets import Dataset, DatasetDict, load_from_disk

    try:
        ds = load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as e:
        raise DataError(f"not a `datasets` save_to_disk folder ({e})", path) from None
    if isinstance(ds, DatasetDict):
        yield from _split_rows(ds, path)
        return
    assert isinstance(ds, Dataset)
    yield from _dataset_rows(ds)


def _hf_rows(spec: str) -> Iterator[Row]:
    """hf:NAME[:CONFIG][@SPLIT], loaded through `datasets` (its cache, or the Hub if online)."""
    from datasets import DatasetDict, load_dataset

    body, _, split = spec[3:].partition("@")
    name, _, config = body.partition(":")
    if not name:
        raise DataError("expected hf:NAME[:CONFIG][@SPLIT], e.g. hf:akariasai/PopQA@test", spec)
    unreachable = offline_when_unreachable()
    try:
        ds = load_dataset(name, config or None, split=split or None)
    except Exception as e:  # datasets raises many types (connection, not found, bad config)
        raise DataError(
            f"could not load Hugging Face dataset {name!r}"
            + (f" config {config!r}" if config else "")
            + (f" split {split!r}" if split else "")
            + f": {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}. "
            + (f"The Hub cannot be reached from here ({unreachable}): o" if unreachable else "O")
            + "ffline, only datasets already in the Hugging Face cache load "
            "(HF_DATASETS_OFFLINE=1); or save it once with `save_to_disk` and pass that folder",
            spec,
        ) from None
    if isinstance(ds, DatasetDict):
        yield from _split_rows(ds, spec)
        return
    yield from _dataset_rows(ds)


HF_SPLIT = "hf_split"


def _split_rows(dd: Any, where: str | Path) -> Iterator[Row]:
    """A DatasetDict's rows, split after split, each with its split's name in the `hf_split`
    column (kept in extra: Hub splits are not the project's train/dev/test). Read as Python
    values a split at a time, not joined as one Arrow table: splits whose columns differ in
    type (an int id here, a text one there; a list of answers and a lone one) cannot be."""
    n = 0
    for name in dd:
        split = dd[name]
        # a row's own hf_split that is not its split's name: which one the column means is
        # not clear (one of the same name is a folder this reading saved)
        if HF_SPLIT in split.column_names and any(v != name for v in split[HF_SPLIT]):
            raise DataError(f"split {name!r} has its own {HF_SPLIT!r} column, which reading a "
                            "DatasetDict fills with each row's split name; rename that "
                            "column", where)  # fmt: skip
        for row in split:
            n += 1
            yield n, {**row, HF_SPLIT: name}


def _dataset_rows(ds: Any) -> Iterator[Row]:
    for n, row in enumerate(ds, start=1):
        yield n, dict(row)


# -- rows to Questions ----------------------------------------------------------------------


def _columns(spec: str, rows: list[Row], fields: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """Question field -> the columns that feed it, first non-empty wins (empty: absent)."""
    seen: set[str] = set()
    for _, row in rows:
        seen.update(row)
    for field, column in fields.items():
        if column not in seen:
            named = "question" if field == "text" else field  # as the flag names it
            raise DataError(
                f"--field {named}={column}: no column {column!r}; columns: {', '.join(sorted(seen))}",
                spec,
            )
    out = {
        f: (fields[f],) if f in fields else columns_in_any_case(cands, seen)
        for f, cands in DEFAULT_COLUMNS.items()
    }
    if not out["text"]:
        raise DataError(
            f"no question column: expected 'question' or 'text' (columns: "
            f"{', '.join(sorted(seen))}); name yours with --field question=COLUMN",
            spec,
        )
    return out


# The names other tools give the splits (Hugging Face's `validation`), read as the project's.
SPLIT_NAMES = {**{s: s for s in SPLITS}, "validation": "dev", "valid": "dev", "val": "dev"}


def _split(value: Any, spec: str, n: int) -> str | None:
    """A `split` cell: train, dev or test, in any case; validation / valid / val is dev."""
    if value is None:
        return None
    split = SPLIT_NAMES.get(str(value).strip().lower())
    if split is None:
        raise DataError(f"split {value!r} is not one of {', '.join(SPLITS)} (or validation, "
                        "read as dev)", spec, n)  # fmt: skip
    return split


def _question(
    spec: str, n: int, row: dict[str, Any], columns: dict[str, tuple[str, ...]], source: str
) -> Question:
    def get(field: str) -> Any:
        if field == TOKEN_LOGPROBS:  # two columns of it that differ are refused, not one taken
            return agreed_token_logprobs(row, columns[field], spec, n, "--field")
        return _cell(row, columns, field)[1]

    text = get("text")
    if text is not None and not isinstance(text, str):
        raise DataError(f"the question ({' or '.join(columns['text'])}) is {text!r}, not text",
                        spec, n)  # fmt: skip
    if not isinstance(text, str) or not has_text(text):
        raise DataError(f"empty or missing question ({' or '.join(columns['text'])})", spec, n)
    qid = get("id")
    as_id = id_text(qid) if qid is not None else text_id(text)
    if as_id is None:
        named = "" if columns["id"] == ("id",) else f" (column {' or '.join(columns['id'])})"
        raise DataError(bad_id(qid) + named, spec, n)
    split = _split(get("split"), spec, n)
    used = {c for cols in columns.values() for c in cols}
    rest = {k: v for k, v in row.items() if k not in used}  # the columns no field took
    # the answer's confidence under its field's name wherever the row has one of its columns
    # (an empty cell too: "no answer", which a label file's log-probabilities must not fill in)
    answer = {f: get(f) for f in ANSWER_FIELDS if any(c in row for c in columns[f])}
    return Question(
        id=as_id,
        text=text.strip(),
        answers=_answers(get("answers"), spec, n),
        source=_text_or_none(_cell(row, columns, "source"), spec, n) or source,
        split=split,
        relation=_text_or_none(_cell(row, columns, "relation"), spec, n),
        entity=_text_or_none(_cell(row, columns, "entity"), spec, n),
        s_pop=_int_or_none(get("s_pop"), "s_pop", spec, n),
        o_pop=_int_or_none(get("o_pop"), "o_pop", spec, n),
        date=_text_or_none(_cell(row, columns, "date"), spec, n),
        extra=_answer_columns({**rest, **answer}, spec, n),
    )


def _cell(row: dict[str, Any], columns: dict[str, tuple[str, ...]], field: str) -> tuple[str, Any]:
    """(column, value) of the first of a field's columns that is not empty (None or "") in
    the row; ("", None) when none is."""
    return next(((c, row[c]) for c in columns[field] if row.get(c) not in (None, "")), ("", None))


def _blank(value: Any) -> bool:
    """An empty cell: None, "" or NaN (a data frame's missing value)."""
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def _answer_columns(extra: dict[str, Any], spec: str, n: int) -> dict[str, Any]:
    """An answer's log-probabilities (a two-stage gate's input) checked where the row is
    known: a JSON list of numbers <= 0 (a JSON text in a CSV cell), or a mean."""
    if TOKEN_LOGPROBS in extra:
        tokens = parse_token_logprobs(extra[TOKEN_LOGPROBS], spec, n)
        if tokens == []:
            raise DataError(f"column {TOKEN_LOGPROBS!r} is an empty list: an answer has at least "
                            "one token; leave the cell empty when there is none", spec, n)  # fmt: skip
        extra[TOKEN_LOGPROBS] = tokens
    if MEAN_LOGPROB in extra:
        extra[MEAN_LOGPROB] = parse_mean_logprob(extra[MEAN_LOGPROB], spec, n)
    return extra


def text_id(text: str) -> str:
    """A stable id from the question text (same text, same id, on every run and machine)."""
    return "q-" + hashlib.sha256(text.strip().encode()).hexdigest()[:12]


def _answers(value: Any, spec: str, n: int) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        if not value.lstrip().startswith("["):
            return (value,)
        value = list_cell(value)  # JSON, or a Python list's repr (pandas' to_csv)
        if value is None:
            raise DataError("answers cell starts with '[' but is not a list; write "
                            '["a", "b"]', spec, n)  # fmt: skip
    if isinstance(value, dict):  # the Hugging Face shapes: SQuAD's {"text": [...]}, TriviaQA's
        value = _answer_texts(value)  # {"value": ..., "aliases": [...]}
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, list | tuple):
        value = [value]
    nested = next((a for a in value if isinstance(a, dict | list | tuple)), None)
    if nested is not None:  # read as its repr it would be an "answer" no prediction contains
        raise DataError(f"answers cell holds {nested!r}, not text: write the gold answers as a "
                        'string or a list of strings, ["a", "b"]', spec, n)  # fmt: skip
    texts = (_answer_text(a, spec, n) for a in value)
    return tuple(a for a in texts if a is not None and a.strip())


def _answer_text(value: Any, spec: str, n: int) -> str | None:
    """One gold answer as text; None for a missing one. A number that is not an int is a
    data frame's (an int column with a missing value is stored as floats): NaN, the missing
    value, is no answer (read as "nan", "a banana" held it), and a whole number is spelled
    as one ("1999", where "1999.0" was in no prediction)."""
    if not isinstance(value, numbers.Real) or isinstance(value, numbers.Integral):
        return None if value is None else str(value)
    number = float(value)
    if math.isnan(number):
        return None
    if math.isinf(number):
        raise DataError(f"answers cell holds {number}, not an answer (1e400 is past the float "
                        "range): write the answer as text", spec, n)  # fmt: skip
    if number.is_integer():
        return str(int(number))
    # the shortest spelling that reads back as the value: Python's repr for a float, numpy's
    # str for its own types (float32's 0.1 is "0.1", not 0.10000000149011612)
    return repr(number) if isinstance(value, float) else str(value)


def _answer_texts(value: dict[str, Any]) -> Any:
    """The answers of a SQuAD-style `{"text": [...], "answer_start": [...]}` or a TriviaQA-style
    `{"value": ..., "aliases": [...]}` cell; any other object is returned as it is (refused)."""
    if "text" in value:
        return value["text"]
    if "aliases" in value or "value" in value:
        aliases = value.get("aliases")
        aliases = aliases.tolist() if hasattr(aliases, "tolist") else aliases or []
        return list(dict.fromkeys([value.get("value"), *aliases]))
    return value


def _text_or_none(cell: tuple[str, Any], spec: str, n: int) -> str | None:
    """A text cell (source, relation, entity, date) as text, a number as written; None when
    empty or NaN. A list, an object or true/false is refused, as such an id is: read as its
    Python spelling it named a relation "['a', 'b']" or an entity "True" nobody wrote."""
    column, value = cell
    if _blank(value):
        return None
    if isinstance(value, bool | list | tuple | dict | set) or getattr(value, "ndim", 0):
        shown = json.dumps(value, ensure_ascii=False, default=repr)
        raise DataError(f"column {column!r} holds {clipped(shown, 40)}, not text: write one "
                        "text (or number) a cell", spec, n)  # fmt: skip
    return str(value)


def _int_or_none(value: Any, column: str, spec: str, n: int) -> int | None:
    """A count cell (s_pop, o_pop); empty, null or NaN (a data frame's missing value): None.
    true/false and a fraction are refused: read as 1, 0 or 2 (for 2.9) they fed the gates a
    count nobody wrote."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b":
        raise DataError(f"column {column!r} holds {value!r}, not a count: write a whole "
                        "number, or leave the cell empty", spec, n)  # fmt: skip
    try:
        number = float(value)
    except OverflowError:  # an int past the float range (JSON reads 10**400 exactly)
        number = math.inf
    except (TypeError, ValueError):
        raise DataError(
            f"column {column!r} must be a number, got {clipped(repr(value), 40)}", spec, n
        ) from None
    if math.isnan(number):
        return None
    if math.isinf(number):
        raise DataError(
            f"column {column!r} must be a finite number, got {clipped(repr(value), 40)}", spec, n
        )
    if not number.is_integer():
        raise DataError(f"column {column!r} must be a whole number (a count), got "
                        f"{clipped(repr(value), 40)}", spec, n)  # fmt: skip
    return int(number)


def _differing(kept: Question, q: Question) -> list[str]:
    """The fields (answers, split, s_pop, ..., the other columns) in which a repeat of a row
    differs from it; its id and text are the same. A NaN cell equals a NaN cell."""
    names = [f.name for f in fields(Question) if f.name not in ("id", "text")]
    return [
        name
        for name in names
        if json.dumps(getattr(kept, name), sort_keys=True, default=str)
        != json.dumps(getattr(q, name), sort_keys=True, default=str)
    ]


def _drop_duplicates(spec: str, numbered: Sequence[tuple[int, Question]]) -> list[Question]:
    """Repeated rows (same id, same text) are kept once and reported on stderr; one id with
    two different texts is an error (label files are keyed by id). A repeat with other gold
    answers or other values (an answer's token_logprobs, a feature: scored once, silently) is
    warned about with its lines: without an id column it is most likely another
    question that shares the text (PopQA's two "John Smith"s), which only an id keeps apart."""
    first: dict[str, tuple[int, Question]] = {}
    repeats, differing = 0, []
    for n, q in numbered:
        if q.id not in first:
            first[q.id] = (n, q)
            continue
        m, kept = first[q.id]
        if kept.text != q.text:
            raise DataError(
                f"id {q.id!r} names two different questions ({kept.text!r} on line {m}, "
                f"{q.text!r} on line {n}); ids must be unique",
                spec,
            )
        repeats += 1
        if other := _differing(kept, q):
            differing.append((m, n, q, other))
    if differing:
        m, n, q, other = differing[0]
        fix = ("if they are different questions (or answers), give each row an id (--field "
               "id=COLUMN)" if q.id == text_id(q.text)
               else "make the ids unique or the rows agree")  # fmt: skip
        shown = ", ".join("other columns" if f == "extra" else f for f in other)
        log.warning(f"{spec}: {len(differing)} row(s) repeat an earlier row's question with "
                    f"other answers or values (e.g. line {n} repeats line {m}, {q.text[:60]!r}, "
                    f"with another {shown}); the first row of each is kept; {fix}")  # fmt: skip
    if repeats > len(differing):
        log.info(f"{spec}: {repeats - len(differing)} repeated question row(s) kept once")
    return [q for _, q in first.values()]
