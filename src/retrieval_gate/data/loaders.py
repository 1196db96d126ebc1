"""One loader per dataset. Each row converter is shared by the local-file loader and the hub
loader (`load_hub`), so the official releases and ../shared go through the same code."""

from __future__ import annotations

import csv
import gzip
import io
import re
import tarfile
import zlib
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..fileio import read_json
from ..questions import Question
from ..strict_rows import loads, parse_json
from .bad_rows import BadRows
from .dataset_registry import register
from .jsonl_files import present, read_jsonl, require, require_file

# ---------------------------------------------------------------- RetrievalQA


def retrievalqa_row(row: dict[str, Any], path: Path | str, line: int | None) -> Question:
    """A row of the official RetrievalQA JSONL (retrievalqa.jsonl or retrievalqa_gpt4.jsonl)."""
    qid = str(require(row, "question_id", path, line))
    answers = require(row, "ground_truth", path, line)
    origin = str(row.get("data_source") or qid.split("_")[0])
    extra: dict[str, Any] = {"data_source": origin}
    if row.get("param_knowledge_answerable") is not None:
        extra["param_knowledge_answerable"] = int(row["param_knowledge_answerable"])
    date = None
    if m := re.match(r"realtimeqa_(\d{4})(\d{2})(\d{2})", qid):
        date = f"{m[1]}-{m[2]}-{m[3]}"
    return Question(
        id=f"retrievalqa-{qid}",
        text=str(require(row, "question", path, line)),
        answers=tuple(str(a) for a in _as_list(answers)),
        source="retrievalqa",
        date=date,
        contexts=tuple(_context(c) for c in row.get("context") or ()),
        extra=extra,
    )


@register("retrievalqa")
def load_retrievalqa(data_dir: Path, bad: BadRows) -> list[Question]:
    """Every *.jsonl under retrievalqa/ (the 250-row file here; the full 2,785-row file where a
    user has it). A question in both is kept once, the full file's row winning."""
    folder = data_dir / "retrievalqa"
    files = sorted(folder.glob("*.jsonl"), key=lambda p: p.name != "retrievalqa.jsonl")
    if not files:
        require_file(folder / "retrievalqa_gpt4.jsonl", "retrievalqa")
    out: dict[str, Question] = {}
    for path in files:
        for q in _convert_jsonl(path, bad, retrievalqa_row):
            out.setdefault(q.id, q)
    return list(out.values())


# ---------------------------------------------------------------- PopQA

_POPQA_TEMPLATES = [
    (r"^What is .+'s occupation\?$", "occupation"),
    (r"^In what city was .+ born\?$", "place of birth"),
    (r"^What genre is .+\?$", "genre"),
    (r"^Who is the father of .+\?$", "father"),
    (r"^In what country is .+\?$", "country"),
    (r"^Who was the producer of .+\?$", "producer"),
    (r"^Who was the director of .+\?$", "director"),
    (r"^What is .+ the capital of\?$", "capital of"),
    (r"^Who was the screenwriter for .+\?$", "screenwriter"),
    (r"^Who was the composer of .+\?$", "composer"),
    (r"^What color is .+\?$", "color"),
    (r"^What is the religion of .+\?$", "religion"),
    (r"^What sport does .+ play\?$", "sport"),
    (r"^Who is the author of .+\?$", "author"),
    (r"^Who is the mother of .+\?$", "mother"),
    (r"^What is the capital of .+\?$", "capital"),
]


def popqa_relation(question: str) -> str | None:
    """PopQA's relation from its question template (the random-2,000 file omits `prop`)."""
    for pattern, relation in _POPQA_TEMPLATES:
        if re.match(pattern, question):
            return relation
    return None


def popqa_tsv_row(row: dict[str, Any], path: Path | str, line: int | None) -> Question:
    """A row with the official PopQA columns (the TSV, the hub release, the paragraphs file)."""
    text = str(require(row, "question", path, line))
    answers = _json_list(
        require(row, "possible_answers", path, line), "possible_answers", path, line
    )
    contexts = tuple(_context(p) for p in _paragraphs(row.get("paragraphs"), path, line))
    return Question(
        id=f"popqa-{require(row, 'id', path, line)}",
        text=text,
        answers=tuple(answers),
        source="popqa",
        s_pop=_int(row.get("s_pop")),
        o_pop=_int(row.get("o_pop")),
        relation=row.get("prop") or popqa_relation(text),
        entity=row.get("s_wiki_title") or row.get("subj"),
        contexts=contexts,
    )


def _popqa_longtail_row(row: dict[str, Any], path: Path, line: int) -> Question:
    text = str(require(row, "question", path, line))
    return Question(
        id=f"popqa-{require(row, 'id', path, line)}",
        text=text,
        answers=tuple(str(a) for a in require(row, "answers", path, line)),
        source="popqa",
        s_pop=_int(row.get("pop")),
        relation=row.get("prop") or popqa_relation(text),
        entity=row.get("s_wiki_title"),
    )


def _popqa_random_row(row: dict[str, Any], path: Path, line: int | None) -> Question:
    text = str(require(row, "input", path, line))
    return Question(
        id=f"popqa-{require(row, 'id', path, line)}",
        text=text,
        answers=tuple(_json_list(require(row, "output", path, line), "output", path, line)),
        source="popqa",
        s_pop=_int(row.get("s_pop")),
        o_pop=_int(row.get("o_pop")),
        relation=popqa_relation(text),
    )


@register("popqa")
def load_popqa(data_dir: Path, bad: BadRows) -> list[Question]:
    """The PopQA files present, merged by PopQA id: the official TSV (popqa.tsv), the long-tail
    JSONL, the random-2,000 JSON and the first-1,000 rows with paragraphs. The paragraphs file
    renumbered its ids 0..999, so its rows are matched to the others by (question, s_pop) and
    keep `popqa-row<N>` ids only where no other file has them."""
    folder = data_dir / "popqa"
    parts: list[tuple[str, list[Question]]] = []
    if present(folder / "popqa.tsv", "popqa"):
        parts.append(("tsv", _load_popqa_tsv(folder / "popqa.tsv", bad)))
    if present(folder / "popqa_longtail.jsonl", "popqa"):
        path = folder / "popqa_longtail.jsonl"
        parts.append(("longtail", _convert_jsonl(path, bad, _popqa_longtail_row)))
    if present(folder / "popqa_random2000.json", "popqa"):
        parts.append(("random2000", _load_popqa_random(folder / "popqa_random2000.json", bad)))
    merged = _merge_popqa(parts)
    if present(folder / "popqa_first1000_paragraphs.json", "popqa"):
        first = _load_popqa_first1000(folder / "popqa_first1000_paragraphs.json", bad)
        merged = _merge_first1000(merged, first)
    if not merged:
        require_file(folder / "popqa_longtail.jsonl", "popqa")
    return list(merged.values())


def _load_popqa_tsv(path: Path, bad: BadRows) -> list[Question]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return _convert_rows(((i + 2, r) for i, r in enumerate(rows)), path, bad, popqa_tsv_row)


def _load_popqa_random(path: Path, bad: BadRows) -> list[Question]:
    data = read_json(path)
    if not isinstance(data, dict) or not {"dev", "test"} & set(data):
        raise DataError("expected a JSON object with 'dev' and 'test' lists", path)
    out = []
    for split in ("dev", "test"):
        rows = ((i, r) for i, r in enumerate(data.get(split, [])))
        for q in _convert_rows(rows, path, bad, _popqa_random_row, index_name=f"{split}[{{}}]"):
            q.extra["official_split"] = split
            out.append(q)
    return out


def _load_popqa_first1000(path: Path, bad: BadRows) -> list[Question]:
    rows = read_json(path)
    if not isinstance(rows, list):
        raise DataError("expected a JSON list of PopQA rows", path)
    out = _convert_rows(((i, r) for i, r in enumerate(rows)), path, bad, popqa_tsv_row, "row {}")
    return [_replace_id(q, f"popqa-row{q.id.removeprefix('popqa-')}") for q in out]


def _merge_popqa(parts: list[tuple[str, list[Question]]]) -> dict[str, Question]:
    merged: dict[str, Question] = {}
    for subset, questions in parts:
        for q in questions:
            merged[q.id] = _merge_two(merged.get(q.id), q, subset)
    return merged


def _merge_first1000(merged: dict[str, Question], first: list[Question]) -> dict[str, Question]:
    by_key = {(q.text, q.s_pop): q.id for q in merged.values()}
    for q in first:
        target = by_key.get((q.text, q.s_pop))
        if target is not None:
            q = _replace_id(q, target)
        merged[q.id] = _merge_two(merged.get(q.id), q, "first1000")
    return merged


def _merge_two(old: Question | None, new: Question, subset: str) -> Question:
    """One Question from two records of the same PopQA id: fields filled from either, answers
    united, subsets listed."""
    subsets = sorted({*((old.extra.get("popqa_subsets") or []) if old else []), subset})
    extra = {**(old.extra if old else {}), **new.extra, "popqa_subsets": subsets}
    if old is None:
        return _with(new, extra=extra)
    fields = ("s_pop", "o_pop", "relation", "entity")
    filled = {
        f: getattr(old, f) if getattr(old, f) is not None else getattr(new, f) for f in fields
    }
    answers = tuple(dict.fromkeys(old.answers + new.answers))
    return _with(old, answers=answers, contexts=old.contexts or new.contexts, extra=extra, **filled)


# ---------------------------------------------------------------- FreshQA


def _freshqa_row(row: dict[str, Any], path: Path, line: int) -> Question:
    answers = [
        str(row[f"answer_{i}"]) for i in range(10) if row.get(f"answer_{i}") not in (None, "")
    ]
    if not answers:
        raise DataError("row has no answer_0..answer_9 values", path, line)
    return Question(
        id=f"freshqa-{require(row, 'id', path, line)}",
        text=str(require(row, "question", path, line)),
        answers=tuple(answers),
        source="freshqa",
        date="2024-04-08",  # answers are as of the release date in the file name
        fact_type=row.get("fact_type"),
        false_premise=bool(row.get("false_premise")),
        hops=row.get("num_hops"),
        extra={
            "official_split": str(row.get("split", "")).lower(),
            "effective_year": row.get("effective_year"),
        },
    )


@register("freshqa")
def load_freshqa(data_dir: Path, bad: BadRows) -> list[Question]:
    files = sorted((data_dir / "freshqa").glob("FreshQA_v*.jsonl"))
    if not files:
        require_file(data_dir / "freshqa" / "FreshQA_v04082024.jsonl", "freshqa")
    # Several releases may sit side by side: the newest (last by name) is the one read.
    path = files[-1]
    questions = _convert_jsonl(path, bad, _freshqa_row)
    date = re.search(r"v(\d\d)(\d\d)(\d{4})", path.name)
    if date:
        stamp = f"{date[3]}-{date[1]}-{date[2]}"
        questions = [_with(q, date=stamp) for q in questions]
    return questions


# ---------------------------------------------------------------- EntityQuestions


def _eq_rows(path: Path, rows: Any, relation: str, split: str, bad: BadRows) -> list[Question]:
    if not isinstance(rows, list):
        raise DataError("expected a JSON list of {question, answers}", path)

    def convert(row: dict[str, Any], p: Path, i: int) -> Question:
        return Question(
            id=f"entityquestions-{split}-{relation}-{i}",
            text=str(require(row, "question", p, i)),
            answers=tuple(str(a) for a in require(row, "answers", p, i)),
            source="entityquestions",
            relation=relation,
            extra={"official_split": split},
        )

    return _convert_rows(((i, r) for i, r in enumerate(rows)), path, bad, convert, "item {}")


@register("entityquestions")
def load_entityquestions(data_dir: Path, bad: BadRows) -> list[Question]:
    """The test files, one per relation (relation from the file name, e.g. P106)."""
    files = sorted((data_dir / "entityquestions" / "test").glob("P*.test.json"))
    if not files:
        require_file(data_dir / "entityquestions" / "test" / "P106.test.json", "entityquestions")
    out: list[Question] = []
    for path in files:
        out += _eq_rows(path, read_json(path), path.name.split(".")[0], "test", bad)
    return out


def load_entityquestions_train(data_dir: Path, bad: BadRows | None = None) -> list[Question]:
    """The 176,560 training questions from train.tar.gz (read in place, not extracted)."""
    path = require_file(data_dir / "entityquestions" / "train.tar.gz", "entityquestions")
    out: list[Question] = []
    try:
        # decompressed whole first: gzip checks its CRC-32 at the stream's end, which tarfile
        # never reads, so a flipped byte was read as other questions
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(path.read_bytes()))) as tar:
            for member in sorted(tar.getmembers(), key=lambda m: m.name):
                if member.isfile() and member.name.endswith(".train.json"):
                    rows = parse_json(tar.extractfile(member).read())  # type: ignore[union-attr]
                    relation = Path(member.name).name.split(".")[0]
                    out += _eq_rows(path, rows, relation, "train", bad or BadRows())
    except (tarfile.TarError, EOFError, OSError, zlib.error, ValueError) as e:
        if isinstance(e, DataError):  # a bad row, named by _eq_rows
            raise
        raise DataError(f"not a readable .tar.gz of EntityQuestions' *.train.json files ({e}); "
                        "download train.tar.gz again", path) from None  # fmt: skip
    return out


# ---------------------------------------------------------------- ToolQA

_TOOLQA_DOMAIN_FIX = {"genda": "agenda"}  # the upstream file is named genda-hard.jsonl


def _toolqa_row(domain: str, difficulty: str):
    def convert(row: dict[str, Any], path: Path, line: int) -> Question:
        if row.get("answer") is None:
            raise DataError("row has no 'answer' field", path, line)
        # One upstream row (hard-dblp-0080) has the answer "" (no institutions): kept, with no
        # gold answer, since ToolQA questions need their database whatever the answer.
        answer = str(row["answer"])
        return Question(
            # ids from the file, not `qid`: airbnb-hard.jsonl reuses the qids hard-yelp-0030..0039
            id=f"toolqa-{difficulty}-{domain}-{line - 1:04d}",
            text=str(require(row, "question", path, line)),
            answers=(answer,) if answer else (),
            source="toolqa",
            extra={"domain": domain, "difficulty": difficulty, "qid": row.get("qid")},
        )

    return convert


@register("toolqa")
def load_toolqa(data_dir: Path, bad: BadRows) -> list[Question]:
    files = sorted((data_dir / "toolqa").glob("*/*-*.jsonl"))
    if not files:
        require_file(data_dir / "toolqa" / "easy" / "agenda-easy.jsonl", "toolqa")
    out: list[Question] = []
    for path in files:
        domain, difficulty = path.stem.rsplit("-", 1)
        domain = _TOOLQA_DOMAIN_FIX.get(domain, domain)
        out += _convert_jsonl(path, bad, _toolqa_row(domain, difficulty))
    return out


# ---------------------------------------------------------------- TriviaQA


def _triviaqa_row(row: dict[str, Any], path: Path, line: int) -> Question:
    return Question(
        id=f"triviaqa-{require(row, 'id', path, line)}",
        text=str(require(row, "question", path, line)),
        answers=tuple(str(a) for a in require(row, "answers", path, line)),
        source="triviaqa",
    )


@register("triviaqa")
def load_triviaqa(data_dir: Path, bad: BadRows) -> list[Question]:
    path = require_file(data_dir / "triviaqa" / "triviaqa_test.jsonl", "triviaqa")
    return _convert_jsonl(path, bad, _triviaqa_row)


# ---------------------------------------------------------------- the hub

HUB_DATASETS = {
    "retrievalqa": ("hyintell/RetrievalQA", retrievalqa_row),
    "popqa": ("akariasai/PopQA", popqa_tsv_row),
}


def load_hub(name: str, rows: Iterable[dict[str, Any]] | None = None) -> list[Question]:
    """The official hub release of RetrievalQA or PopQA, through the same row converters as the
    local files. `rows` lets a caller pass rows it already has (tests pass fixtures)."""
    if name not in HUB_DATASETS:
        raise DataError(f"no hub release known for {name!r}; known: {', '.join(HUB_DATASETS)}")
    repo, convert = HUB_DATASETS[name]
    if rows is None:
        import datasets

        try:
            ds = datasets.load_dataset(repo)
        except Exception as e:  # offline or hub errors come in many types
            raise DataError(
                f"could not load {repo} from the hub ({e}); offline? use --data-dir"
            ) from e
        rows = (r for split in ds.values() for r in split)
    bad = BadRows()
    return _convert_rows(((i, r) for i, r in enumerate(rows)), repo, bad, convert, "row {}")


# ---------------------------------------------------------------- helpers


def _convert_jsonl(path: Path, bad: BadRows, convert) -> list[Question]:
    return _convert_rows(read_jsonl(path, bad), path, bad, convert)


def _convert_rows(rows, path, bad: BadRows, convert, index_name: str = "{}") -> list[Question]:
    """Applies a row converter, turning every failure into a DataError naming file and row."""
    out: list[Question] = []
    for index, row in rows:
        try:
            if not isinstance(row, dict):
                raise DataError("expected a JSON object", path, index)
            out.append(convert(row, path, index))
        except DataError as e:
            bad.report(e)
        except (ValueError, TypeError, KeyError) as e:
            where = index_name.format(index)
            bad.report(DataError(f"bad row ({type(e).__name__}: {e})", f"{path} {where}"))
    return out


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _json_list(value: Any, name: str, path: Path | str, line: int | None) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    try:
        parsed = loads(value)
    except (TypeError, ValueError) as e:
        raise DataError(f"field {name!r} is not a JSON list of answers", path, line) from e
    return [str(v) for v in _as_list(parsed)]


def _paragraphs(value: Any, path: Path | str, line: int | None) -> list[dict[str, Any]]:
    if value in (None, ""):
        return []
    if isinstance(value, str):
        try:
            value = loads(value)
        except ValueError as e:
            raise DataError("field 'paragraphs' is not a JSON list", path, line) from e
    return list(value)


def _context(c: Any) -> dict[str, str]:
    if isinstance(c, str):
        return {"title": "", "text": c}
    return {"title": str(c.get("title") or ""), "text": str(c.get("text") or "")}


def _int(value: Any) -> int | None:
    if value in (None, ""):
        return None
    return int(value)


def _with(q: Question, **changes: Any) -> Question:
    return replace(q, **changes)


def _replace_id(q: Question, new_id: str) -> Question:
    return _with(q, id=new_id)
