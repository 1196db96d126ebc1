"""`rag-gain` policy: answer again with the top-k retrieved documents (RetrievalQA's
with-context prompt) and compare with the closed-book answer, so each question is known as
"helps" (retrieval turns wrong into right), "hurts" (right into wrong: Mallen's 10%), "both"
(right either way) or "neither".

Label: 1 when retrieval helps; 0 when the closed-book answer is already right ("both" or
"hurts"); "neither" is dropped (null) by default, since retrieval changes nothing there
(`neither_label` may set it to 0 or 1 instead).

Rows: id, label, closed_correct, rag_correct, effect, rag_prediction, rag match/em/f1,
doc_ids (the documents in the prompt, for RRCP and audits: the retrieved ones, less those
a prompt past the context window drops)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import DataError
from ..generation.base import Generator
from ..generation.fit import fit_prompts, most_documents
from ..generation.prompts import DOC_WORDS, WITH_CONTEXT_ID
from ..questions import Question
from ..retrieval.base import Retriever
from .closed_book import MAX_NEW_TOKENS, PREDICTION_CHARS, closed_book_rows, decoding
from .label_files import LabelFile
from .policy_loop import run_policy
from .scoring import DEFAULT_CRITERION, correct, judge, measures

TOP_K = 5


def effect(closed_ok: bool, rag_ok: bool) -> str:
    if rag_ok and not closed_ok:
        return "helps"
    if closed_ok and not rag_ok:
        return "hurts"
    return "both" if closed_ok else "neither"


def gain_label(eff: str, neither_label: int | None = None) -> int | None:
    return {"helps": 1, "hurts": 0, "both": 0}.get(eff, neither_label)


def rag_gain_rows(
    generator: Generator,
    retriever: Retriever,
    questions: Sequence[Question],
    closed: dict[str, dict[str, Any]],
    frequent: dict[tuple[str, str], set[str]],
    criterion: str = DEFAULT_CRITERION,
    k: int = TOP_K,
    neither_label: int | None = None,
) -> list[dict[str, Any]]:
    """One batched with-context generation over `questions` (closed-book rows come from
    `closed`, the closed-book label file, and are generated here only where missing)."""
    missing = [q for q in questions if q.id not in closed]
    if missing:
        closed = {**closed, **{r["id"]: r for r in closed_book_rows(generator, missing, frequent)}}
    # documents past the context window are dropped, lowest-ranked first, as the RAG loop does
    fitted = fit_prompts(generator, [q.text for q in questions],
                         retriever.retrieve(questions, most_documents(generator, k)), DOC_WORDS,
                         MAX_NEW_TOKENS)  # fmt: skip
    unfit = next(((q, f) for q, f in zip(questions, fitted, strict=True) if f.prompt is None), None)
    if unfit:
        raise DataError(f"question {unfit[0].id!r}: {unfit[1].error}")
    gens = generator.generate([f.prompt for f in fitted], MAX_NEW_TOKENS)
    hits = [f.hits for f in fitted]
    rows = []
    for q, g, h in zip(questions, gens, hits, strict=True):
        judged = judge(g.text, q, frequent)
        row = {
            "id": q.id,
            "rag_prediction": g.text[:PREDICTION_CHARS],
            "rag_match": judged["match"],
            "rag_em": judged["em"],
            "rag_f1": judged["f1"],
            "doc_ids": [x.document.id for x in h],
            "closed": measures(closed[q.id]),
        }
        rows.append(judge_gain(row, closed[q.id], criterion, neither_label))
    return rows


def rag_correct(row: dict[str, Any], criterion: str) -> bool:
    """The with-documents answer under `criterion`. A frequent answer read from the documents
    is not a chance guess, so `loose-no-guess` counts a plain loose match here."""
    judged = {"match": row["rag_match"], "em": row["rag_em"], "f1": row["rag_f1"], "guess": False}
    return correct(judged, criterion)


def judge_gain(
    row: dict[str, Any],
    closed_row: dict[str, Any],
    criterion: str = DEFAULT_CRITERION,
    neither_label: int | None = None,
) -> dict[str, Any]:
    """Fills closed_correct, rag_correct, effect and label from the stored measures (so a
    file can be relabelled under another criterion without generating again)."""
    closed_ok = correct(closed_row, criterion)
    rag_ok = rag_correct(row, criterion)
    eff = effect(closed_ok, rag_ok)
    return {
        **row,
        "label": gain_label(eff, neither_label),
        "closed_correct": closed_ok,
        "rag_correct": rag_ok,
        "effect": eff,
    }


def label_rag_gain(
    generator: Generator,
    retriever: Retriever,
    questions: Sequence[Question],
    out: LabelFile,
    closed: LabelFile,
    criterion: str = DEFAULT_CRITERION,
    chunk_size: int = 256,
    k: int = TOP_K,
    neither_label: int | None = None,
) -> dict[str, float]:
    from .closed_book import source_frequent_answers

    frequent = source_frequent_answers(questions)
    return run_policy(
        "rag-gain",
        generator,
        questions,
        out,
        lambda qs: rag_gain_rows(
            generator, retriever, qs, closed.rows, frequent, criterion, k, neither_label
        ),
        chunk_size,
        prompt_id=WITH_CONTEXT_ID,
        closed_book_file=closed.path.name,
        retriever=retriever.name,
        top_k=k,
        doc_words=DOC_WORDS,
        decoding=decoding(),
        criterion=criterion,
        neither_label=neither_label,
    )
