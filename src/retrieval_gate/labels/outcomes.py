"""`outcomes` policy: answers you already recorded (your LLM, your harness) become label files
with the same rows as a labelling run, so adaptive accuracy, tuning and the RAG oracle work
on them.

Two kinds of outcomes file, told apart by their rows:
- lm-evaluation-harness `--log_samples` output (`samples_<task>_<date>.jsonl`): each row has
  `doc` (the question as the task saw it) and `filtered_resps` (the model's answer); the
  answer is judged here against the gold answers, like a labelling run's.
- a generic file (JSONL, JSON array, CSV, TSV, Parquet): a question `id` (or its `question`
  text) and either a correctness column (`correct`: true/false, 1/0, yes/no) or the model's
  `prediction` (judged here); optionally the same for the answer with retrieval (`rag_correct`
  / `rag_prediction`).

Either kind may carry the closed-book answer's log-probabilities: `token_logprobs` (a JSON list
of the answer tokens' natural-log probabilities, as vLLM and OpenAI-compatible servers return
them; in a CSV cell the list as JSON text) and/or `mean_logprob` (their mean, when only that
was logged; given, it is kept as is, else it is the tokens' mean). An lm-eval sample carries
them as top-level keys of its row. They go into the closed-book rows (`labels.logprobs`); a
value that is not a finite number <= 0, or an empty list beside an answer, is refused naming
the file, row and column (0.0 is valid).

Closed-book rows go to `closed-book.jsonl`; when with-retrieval outcomes are there too, they
go to `rag-gain.jsonl` beside it (a labelling run's folder, `--labels-dir`). `--out FILE`
names the one file closed-book outcomes make; outcomes that make both files need a folder. A recorded correctness is stored as the measures the judge
would give (match = em = correct, f1 = 1/0, guess = false), so every criterion reads it as is."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from ..data.answer_confidence import agreed_token_logprobs
from ..data.user_questions import read_rows, text_id
from ..errors import ConfigError, DataError
from ..fileio import sha256_file
from ..outputs import record_owned, refuse_foreign, vouch_for
from ..questions import Question, id_text, normalize_answer
from .closed_book import PREDICTION_CHARS, source_frequent_answers
from .label_files import LabelFile, meta_path, read_meta, require_ours
from .labelling_run import CLOSED_BOOK, RAG_GAIN, STRATEGY_FILE
from .lock import single_writer
from .logprobs import (
    MEAN_LOGPROB,
    TOKEN_LOGPROBS,
    mean_of,
    parse_mean_logprob,
    rounded,
)
from .outcome_columns import (
    CORRECT,
    FIELDS,
    LOGPROBS,
    PREDICTION,
    RAG_CORRECT,
    RAG_PREDICTION,
    answer_text,
    listed,
    note_unread,
    renamed,
    source_names,
)
from .policy_loop import provenance
from .rag_gain import judge_gain
from .scoring import DEFAULT_CRITERION, correct, judge, measures

log = logging.getLogger(__name__)
OTHERWISE = "_judged_otherwise"  # a row's flag while importing, never written
FOLDER = "--labels-dir / --generator name"  # what picks another file of an import's folder
_TRUE = {"true", "t", "1", "yes", "y", "correct", "right", "1.0"}
_FALSE = {"false", "f", "0", "no", "n", "incorrect", "wrong", "0.0"}


def import_outcomes(
    path: str | Path,
    questions: Sequence[Question],
    out_dir: Path,
    generator: str,
    criterion: str = DEFAULT_CRITERION,
    neither_label: int | None = None,
    out_file: Path | None = None,
    rows: list[tuple[int, dict[str, Any]]] | None = None,
    extra_meta: dict[str, Any] | None = None,
    fields: dict[str, str] | None = None,
    locked: bool = False,
    stamp: bool = True,
    writes_too: Sequence[str] = (),
    dropped: int = 0,
) -> dict[str, Any]:
    """Writes out_dir/closed-book.jsonl (and rag-gain.jsonl) from an outcomes file, or from
    `rows` already read from it (the strategy importer passes its first two strategies); with
    `out_file`, the closed-book labels go to that one file (refused, before anything is
    written, when the outcomes also make rag-gain labels). `fields`: outcome field -> the
    file's column it is read from (`--outcome-field`). `locked`: the caller holds the folder's
    `import_lock` (it writes a third file, named in `writes_too`). `stamp`: each row records
    its question's `question_sha`, so training on these labels over questions edited since is
    refused (a release's rows carry none: its questions are read from its own files). An
    earlier import's files this one does not write are removed (`_left_behind`). `dropped`:
    the rows of the file that `rows` left out (the strategy importer's unmatched ones), counted
    in `outcome_rows` and `unmatched` (its sidecars said 0 of 40 unmatched)."""
    if rows is None:
        rows = renamed(path, list(read_rows(str(path))), fields or {})
        if rows and "filtered_resps" not in rows[0][1]:
            note_unread(path, rows, [c for cols in FIELDS.values() for c in cols])
    if not rows:
        raise DataError("the outcomes file has no rows", path)
    fmt = "lm-eval-samples" if "filtered_resps" in rows[0][1] else "generic"
    matched, unmatched = match_rows(path, rows, questions, fmt)
    unmatched += dropped
    frequent = source_frequent_answers([q for q, _ in matched.values()])
    closed, rag, otherwise = [], [], []  # otherwise: recorded against the judge's reading
    for q, row in matched.values():
        closed.append(_closed_row(q, row, fmt, frequent, criterion, path))
        if closed[-1].pop(OTHERWISE, False):
            otherwise.append(q.id)
        rag_row = _rag_row(q, row, closed[-1], frequent, criterion, neither_label, path)
        if rag_row is not None:
            rag.append(rag_row)
    if otherwise:  # a recorded correctness decides; so many disagreeing is worth a look
        log.warning(f"{path}: {len(otherwise)} rows record a correctness the judge reads "
                    f"otherwise from their prediction (the first: {otherwise[0]!r}, criterion "
                    f"{criterion}); the recorded one is used")  # fmt: skip
    if out_file is not None and rag:
        raise ConfigError(
            f"--out names one label file, but {len(rag)} outcome rows also record the answer "
            "with retrieval (rag_correct / rag_prediction), which makes a second file "
            f"({RAG_GAIN}): pass --labels-dir DIR for both instead of --out",
            path,
        )
    closed_file = out_file or out_dir / CLOSED_BOOK
    meta = provenance(
        "closed-book",
        generator=generator,
        generator_checksum=None,
        source="outcomes",
        outcomes_file=str(path),
        outcomes_sha256=sha256_file(Path(path)) if Path(path).is_file() else None,  # hf: specs
        outcomes_format=fmt,
        criterion=criterion,
        rows=len(closed),
        unmatched_rows=unmatched,
    )
    meta.update(extra_meta or {})
    # every row checked: now the files, one import into the folder at a time (--out's one
    # file is replaced whole: nothing to mix)
    with nullcontext() if locked or out_file is not None else import_lock(out_dir):
        made_for = [q for q, _ in matched.values()] if stamp else []
        for target in (closed_file, *([out_dir / RAG_GAIN] if rag else [])):
            replaceable(target, "--out" if target == out_file else FOLDER)  # both, then writes
        writes = [CLOSED_BOOK, *([RAG_GAIN] if rag else []), *writes_too]
        _remove(path, [] if out_file is not None else _left_behind(out_dir, writes))
        written = {"closed-book": _write(closed_file, closed, meta, made_for)}
        if rag:
            rag_meta = {**meta, "policy": "rag-gain", "rows": len(rag),
                        "neither_label": neither_label, "closed_book_file": CLOSED_BOOK}  # fmt: skip
            written["rag-gain"] = _write(out_dir / RAG_GAIN, rag, rag_meta, made_for)
    return {
        "format": fmt,
        "outcome_rows": len(rows) + dropped,
        "matched": len(matched),
        "unmatched": unmatched,
        **{f"{k}_file": str(v) for k, v in written.items()},
        "labelled": len(closed),
        "needs_retrieval": sum(r["label"] for r in closed),
    }


def match_rows(
    path: str | Path, rows: list, questions: Sequence[Question], fmt: str
) -> tuple[dict[str, tuple[Question, dict]], int]:
    """question id -> (question, outcome row), by id first, else by its text: exactly, else
    normalised (case, punctuation, articles) where that names one question only."""
    by_id = {q.id: q for q in questions}
    exact: dict[str, Question | None] = {}
    by_text: dict[str, Question | None] = {}
    for q in questions:  # two texts alike name neither (None): not guessed (the last one was)
        for texts, key in ((exact, q.text.strip()), (by_text, normalize_answer(q.text))):
            texts[key] = q if texts.get(key, q) is q else None
    matched: dict[str, tuple[Question, dict]] = {}
    unmatched: list[tuple[int, Any]] = []  # (line, the row's id or text)
    reworded: list[tuple[int, str]] = []  # (line, id) of rows whose text is not their id's
    for n, row in rows:
        key = row.get("doc") if fmt == "lm-eval-samples" else row
        if not isinstance(key, dict):
            raise DataError("lm-eval sample row has no 'doc' object", path, n)
        qid, text = key.get("id"), key.get("question") or key.get("text")
        if qid is None and not text:
            raise DataError(_no_question(fmt, key), path, n)
        as_id = id_text(qid)  # true, a list or NaN names no question: matched by text instead
        q = by_id.get(as_id) if as_id is not None else None
        if q is not None and isinstance(text, str) and text.strip():
            if _other_question(q, text, exact, by_text, path, n):
                reworded.append((n, q.id))
        elif q is None and isinstance(text, str):
            q = _by_text(exact, by_text, text, path, n)
        if q is None:
            unmatched.append((n, qid if qid is not None else text))
            continue
        if q.id in matched:
            raise DataError(_second_outcome(q, matched[q.id][1]["_line"]), path, n)
        matched[q.id] = (q, {**row, "_line": n})
    if not matched:
        first = rows[0][1].get("doc") if fmt == "lm-eval-samples" else rows[0][1]
        theirs = questions[0].id if questions else None
        raise DataError(
            f"none of the {len(rows)} outcome rows matches a question by id or text (outcome "
            f"ids read like {first.get('id')!r}, question ids like {theirs!r}): is "
            "this the outcomes file of these questions (--questions)? A question file without "
            "an 'id' column gets ids made from the text: name its id column with --field "
            f"id=COLUMN{_own_questions_hint(first, path) if fmt == 'generic' else ''}",
            path,
        )
    if unmatched:  # left out, and said: a summary's count alone went unseen
        line, key = unmatched[0]
        log.warning(f"{path}: {len(unmatched)} of {len(rows)} outcome rows match no question "
                    f"by id or text and are left out (the first: line {line}, {key!r}); "
                    f"are these the questions they were recorded for (--questions)?"
                    f"{_near_miss(key, questions)}")  # fmt: skip
    if reworded:  # a prompt template around the question, say: the ids decide
        line, qid = reworded[0]
        log.warning(f"{path}: {len(reworded)} outcome rows give a question text that is not "
                    f"their id's question's (the first: line {line}, id {qid!r}); matched by "
                    "id")  # fmt: skip
    if lacking := [q.id for q in questions if q.id not in matched]:  # train then used fewer
        log.warning(f"{len(lacking)} of {len(questions)} questions have no outcome row (the "
                    f"first: {lacking[0]!r}) and are left unlabelled")  # fmt: skip
    return matched, len(unmatched)


def _near_miss(key: Any, questions: Sequence[Question]) -> str:
    """A question id the unmatched row's id misses only by its spelling (7 for "007", 10.0
    for "10": a spreadsheet's number), as a hint."""
    spelled = str(key).strip()
    plain = spelled.lstrip("0") or "0"
    plain = plain[:-2] if plain.endswith(".0") else plain
    near = next((q.id for q in questions
                 if q.id != spelled and (q.id.lstrip("0") or "0") == plain), None)  # fmt: skip
    return f" (a question's id is {near!r}: ids match as written)" if near else ""


def _closed_row(q, row, fmt, frequent, criterion, path) -> dict[str, Any]:
    n = row["_line"]
    if fmt == "lm-eval-samples":
        prediction = _lm_eval_answer(row, path, n)
    else:
        recorded = parse_bool(_agreed(row, "correct", path, n), path, n)
        if recorded is not None:  # the recorded correctness decides; its answer text is kept
            said = _agreed(row, "prediction", path, n)
            lp = _logprobs(row, path, n, said)
            text = said.strip()[:PREDICTION_CHARS] or None if isinstance(said, str) else None
            judged = None if text is None or not q.answers else correct(
                judge(said, q, frequent), criterion)  # fmt: skip
            return {"id": q.id, "prediction": text, **_recorded(recorded), "idk": None,
                    **lp, "label": int(not recorded),
                    OTHERWISE: judged is not None and judged != recorded}  # fmt: skip
        prediction = _agreed(row, "prediction", path, n)
        if prediction is None:
            raise DataError(_no_outcome(row), path, n)
    if not q.answers:
        raise DataError(
            f"question {q.id!r} has no gold answers to judge the prediction against; record "
            "correctness in a 'correct' column instead",
            path,
            n,
        )
    prediction = (
        prediction if fmt == "lm-eval-samples" else answer_text(prediction, "prediction", path, n)
    )
    judged = {"id": q.id, "prediction": prediction[:PREDICTION_CHARS],
              **judge(prediction, q, frequent), **_logprobs(row, path, n, prediction)}  # fmt: skip
    return {**judged, "label": int(not correct(judged, criterion))}


def _logprobs(row: dict, path, n: int, answer: Any) -> dict[str, Any]:
    """`mean_logprob` (None when not recorded) and, when recorded, `token_logprobs`."""
    names = source_names(row)  # a bad cell is named by the file's column (--outcome-field)
    tokens = agreed_token_logprobs(row, LOGPROBS, path, n, "--outcome-field", names)
    mean = parse_mean_logprob(row.get(MEAN_LOGPROB), path, n,
                              names.get(MEAN_LOGPROB, MEAN_LOGPROB))  # fmt: skip
    if tokens == [] and answer not in (None, ""):
        column = next(names.get(c, c) for c in LOGPROBS if not _blank(row.get(c)))
        raise DataError(
            f"column {column!r} is an empty list, but the row has an answer: record its "
            "tokens' log-probabilities, or leave the cell empty",
            path,
            n,
        )
    tokens = rounded(tokens) or None
    out: dict[str, Any] = {MEAN_LOGPROB: round(mean, 4) if mean is not None else mean_of(tokens)}
    if tokens is not None:
        out[TOKEN_LOGPROBS] = tokens
    return out


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _rag_row(q, row, closed, frequent, criterion, neither_label, path) -> dict | None:
    n = row["_line"]
    recorded = parse_bool(_first(row, RAG_CORRECT), path, n)
    prediction = _first(row, RAG_PREDICTION)
    if recorded is None and prediction is None:
        return None
    if recorded is not None:
        m = _recorded(recorded)
        rag = {"rag_prediction": None, "rag_match": m["match"], "rag_em": m["em"],
               "rag_f1": m["f1"]}  # fmt: skip
    else:
        prediction = answer_text(prediction, "rag_prediction", path, n)
        judged = judge(prediction, q, frequent)
        rag = {"rag_prediction": prediction[:PREDICTION_CHARS], "rag_match": judged["match"],
               "rag_em": judged["em"], "rag_f1": judged["f1"]}  # fmt: skip
    base = {"id": q.id, **rag, "doc_ids": [], "closed": measures(closed)}
    return judge_gain(base, closed, criterion, neither_label)


def _lm_eval_answer(row: dict, path, n: int) -> str:
    resps = row.get("filtered_resps")
    while isinstance(resps, list) and len(resps) == 1:
        resps = resps[0]
    if isinstance(resps, list) and len(resps) > 1 and all(isinstance(r, str) for r in resps):
        # several samples (repeats > 1, no filter): the first was judged, the others dropped
        raise DataError(f"lm-eval sample holds {len(resps)} answers in 'filtered_resps' "
                        "(repeats > 1): keep one a question, e.g. with a take_first or "
                        "majority_vote filter", path, n)  # fmt: skip
    if not isinstance(resps, str):
        raise DataError(
            "lm-eval sample has no text answer in 'filtered_resps' (a generate_until task "
            "is needed: loglikelihood tasks record no answer text)",
            path,
            n,
        )
    return resps


def _recorded(ok: bool) -> dict[str, Any]:
    return {"match": ok, "em": ok, "f1": float(ok), "guess": False}


def _second_outcome(q: Question, first_line: int) -> str:
    """Why two outcome rows for one question are refused, and the ways out."""
    text = (" If they are different questions that share the text (the question file has no "
            "id for it), give both files an id column: --field id=COLUMN and --outcome-field "
            "id=COLUMN." if q.id == text_id(q.text) else "")  # fmt: skip
    return (f"a second outcome for question {q.id!r} (first on line {first_line}): keep one "
            "row per question (of several samples, e.g. the greedy answer), or decide once per "
            f"question (e.g. right in most samples) and record that as its 'correct' value.{text}")  # fmt: skip


def _other_question(
    q: Question,
    text: str,
    exact: dict[str, Question | None],
    by_text: dict[str, Question | None],
    path,
    n: int,
) -> bool:
    """Whether a row matched by its id gives a question text that is not that question's
    (True). A text that is another question's is refused: the id and question columns
    disagree (a column shuffled or sorted alone), and the outcome was taken as the id's."""
    if normalize_answer(text) == normalize_answer(q.text):
        return False
    try:
        other = _by_text(exact, by_text, text, path, n)
    except DataError:  # a text of two questions: not this one's, and none named
        return True
    if other is not None and other is not q:
        raise DataError(f"the row's id is question {q.id!r} ({q.text[:60]!r}), and its question "
                        f"text is question {other.id!r}'s ({text[:60]!r}): the id and question "
                        "columns disagree (one shuffled or sorted alone?): fix the file so that "
                        "each row's id and text name one question", path, n)  # fmt: skip
    return True


def _by_text(
    exact: dict[str, Question | None], by_text: dict[str, Question | None], text: str, path, n: int
) -> Question | None:
    """The one question a row's text names: exactly, else normalised; two questions of that
    text are refused, never one picked."""
    for texts, key, how in ((exact, text.strip(), ""),
                            (by_text, normalize_answer(text),
                             " once case, punctuation and articles are set aside")):  # fmt: skip
        if key in texts:
            if texts[key] is None:
                raise DataError(f"question {text!r} matches two questions{how}; give the row "
                                "its question's 'id'", path, n)  # fmt: skip
            return texts[key]
    return None


def _own_questions_hint(row: dict, path) -> str:
    """Rows that carry their question's text can be their own questions file."""
    if not isinstance(row.get("question") or row.get("text"), str):
        return ""
    return (f". The rows carry their questions' text: if they are your own questions, pass "
            f"this file as the questions too (--questions {path})")  # fmt: skip


def _no_question(fmt: str, key: dict) -> str:
    """Why a row names no question, and the fix: a flag for a generic file's columns, the
    task's documents for an lm-eval sample (its `doc` is what the task read)."""
    if fmt == "lm-eval-samples":
        return (f"lm-eval sample's 'doc' has neither an 'id' nor a 'question' key (its keys: "
                f"{listed([(0, key)])}): run the task over a question file with an id or "
                "question field, as examples/lm-eval/closed_book_qa.yaml does")  # fmt: skip
    if "id" in key or "question" in key:  # there, but an empty cell: not "no such column"
        return ("outcome row's id and question cells are empty: give it its question's id "
                "(or text), or drop the row")  # fmt: skip
    return (f"outcome row has neither an 'id' nor a 'question' column (its columns: "
            f"{listed([(0, key)])}); name yours with --outcome-field id=COLUMN or "
            "--outcome-field question=COLUMN")  # fmt: skip


def _no_outcome(row: dict) -> str:
    """Why a row gives no outcome: its columns are missing, or there but empty (a CSV's empty
    cell, JSON null, a data frame's NaN)."""
    empty = [c for c in (*CORRECT, *PREDICTION) if c in row]
    if empty:
        return (f"the row's {' and '.join(repr(c) for c in empty)} cell is empty (or NaN): "
                "record whether this answer was right, or leave the row out")  # fmt: skip
    return (f"outcome row has no correctness ({' / '.join(CORRECT)}) and no prediction "
            f"({' / '.join(PREDICTION)}) column (its columns: {listed([(0, row)])}); name "
            "yours with --outcome-field correct=COLUMN or --outcome-field prediction=COLUMN")  # fmt: skip


def _first(row: dict, columns: tuple[str, ...]) -> Any:
    return next((row[c] for c in columns if row.get(c) not in (None, "")), None)


def _agreed(row: dict, field: str, path, n: int) -> Any:
    """`_first` of the field's columns (`correct`, `is_correct`, `closed_correct`; or the
    prediction's), where every other one that holds a value says the same: a file with two
    of them that differ had the second dropped unseen."""
    given = [(c, row[c]) for c in FIELDS[field] if row.get(c) not in (None, "")]
    same = (lambda v: parse_bool(v, path, n)) if field == "correct" else _said
    other = next(((c, v) for c, v in given[1:] if same(v) != same(given[0][1])), None)
    if other is not None:
        raise DataError(f"columns {given[0][0]!r} and {other[0]!r} both give the {field} and "
                        f"differ ({str(given[0][1])[:60]!r} vs {str(other[1])[:60]!r}): name "
                        f"the one to read with --outcome-field {field}=COLUMN", path, n)  # fmt: skip
    return given[0][1] if given else None


def _said(value: Any) -> str:
    return normalize_answer(str(value))


def parse_bool(value: Any, path, n: int, column: str = "correctness") -> bool | None:
    """A recorded correctness cell: true/false, 1/0, yes/no (None when empty)."""
    if value is None or value == "" or isinstance(value, bool):
        return None if value == "" else value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise DataError(f"{column} {value!r} is not true/false, 1/0 or yes/no", path, n)


def import_lock(target: Path) -> AbstractContextManager[None]:
    """One import into a labels folder at a time, held while it writes its files:
    two at once, each writing its files whole one by one, could leave one import's
    closed-book.jsonl beside the other's rag-gain.jsonl or strategies.jsonl."""
    busy = ("another outcomes import (pid {pid}) is writing these labels now; wait for it to "
            "finish, or pass another --labels-dir")  # fmt: skip
    return single_writer(target, busy)


def replaceable(path: Path, flag: str = FOLDER, foreign: str | None = None) -> None:
    """A label file an import may replace: none there, or one an earlier import wrote and
    nobody changed since (hand corrections were overwritten without a word); one a labelling
    run wrote, or the user's, is refused, naming `flag` (what picks another file); `foreign`:
    the refusal of one not made from outcomes, where the caller says more."""
    require_ours(path, flag)
    if not path.exists():
        return
    if not _imported(path):
        raise DataError(foreign or f"a label file not made from outcomes is already there; "
                        f"pick another {flag}", path)  # fmt: skip
    vouch_for(path)  # an import's from before the folder's ledger: as it is now
    refuse_foreign([path], "--labels-dir")


def _imported(path: Path) -> bool:
    """A label file an outcomes import made (its provenance says so)."""
    return meta_path(path).exists() and LabelFile(path).meta.get("source") == "outcomes"


def _left_behind(out_dir: Path, writes: Sequence[str]) -> list[Path]:
    """The files beside closed-book.jsonl this import does not write (rag-gain.jsonl,
    strategies.jsonl), each one an earlier import may leave: read beside the new closed-book
    answers, they paired them with the old ones (`LabellingRun.outcomes` takes rag-gain's
    closed-book correctness, where it has one, over closed-book.jsonl's). One a labelling run
    made is refused."""
    stale = [out_dir / n for n in (RAG_GAIN, STRATEGY_FILE)
             if n not in writes and (out_dir / n).exists()]  # fmt: skip
    for target in stale:
        replaceable(target, FOLDER, f"was not made by an outcomes import, and this import makes "
                    f"no {target.name} of its own: read beside the new {CLOSED_BOOK}, its rows "
                    f"would pair other answers with these; move it away, or pass another "
                    f"{FOLDER}")  # fmt: skip
    return stale


def _remove(outcomes: str | Path, stale: list[Path]) -> None:
    """Removes an earlier import's files (`_left_behind`), said once each."""
    for target in stale:
        earlier = read_meta(meta_path(target)).get("outcomes_file", "?")  # checked: an import's
        meta_path(target).unlink(missing_ok=True)
        target.unlink(missing_ok=True)
        log.warning(f"removed {target} (from the earlier import of {earlier}): {outcomes} makes "
                    f"no {target.name}, and that one's rows would be read beside the new "
                    f"{CLOSED_BOOK}")  # fmt: skip


def _write(
    path: Path, rows: list[dict], meta: dict[str, Any], made_for: Sequence[Question]
) -> Path:
    """Replaces the file atomically (`replaceable` checked first), its rows stamped for
    `made_for`, and records it as written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = LabelFile(path, replacing=True)  # every row is rewritten: new provenance is fine
    out.write_meta(meta)  # the sidecar first, as every label writer does
    out.made_for(made_for)
    out.rewrite(rows)
    record_owned(path)
    return path
