"""The prompts of RetrievalQA / TA-ARE (MISSION.md), in one place. Each has a stable id that
label files record as provenance."""

from __future__ import annotations

from collections.abc import Sequence

from ..retrieval.base import Hit

CLOSED_BOOK_ID = "retrievalqa-closed-book-v1"
CLOSED_BOOK = (
    "Please use your own knowledge to answer the questions. Only include the answer in your "
    'response and try to be concise. If you do not know the answer, just say "I don\'t know".'
    "\n\nQuestion: {question}\nAnswer:"
)

WITH_CONTEXT_ID = "retrievalqa-with-context-v1"
WITH_CONTEXT = (
    "Please answer the question based on the provided context. Only include the answer in your "
    'response and try to be concise. If you do not know the answer, just say "I don\'t know".'
    "\n\nParagraph:\n{documents}\n\nQuestion: {question}\nAnswer:"
)

VANILLA_ID = "retrievalqa-vanilla-v1"
VANILLA = (
    "Given a question, determine whether you need to retrieve external resources, such as "
    "real-time search engines, Wikipedia, or databases, to answer the question correctly. Only "
    'answer "[Yes]" or "[No]".\n\nQuestion: {question}\nAnswer:'
)

TA_ARE_ID = "retrievalqa-ta-are-v2"
# TA-ARE: "Today is {date}." before the Vanilla instruction, then demonstrations after
# "Here are some examples:", then the question. Demonstrations as in the authors' release
# (hyintell/RetrievalQA, utils.py `fewshot_examples`): "Question: ...\nAnswer: [No]." and
# "[Yes]." alternating, a [No] first; the paper puts the 2 nearest long-tail failures in the
# [Yes] places. v1 put both [Yes] first, then both [No].
TA_ARE_PREFIX = "Today is {date}. "
TA_ARE_EXAMPLES_HEADER = "Here are some examples:"
TA_ARE_DEMO = "Question: {question}\nAnswer: {answer}."
# The release's two hand-written questions any LLM knows, labelled [No].
TA_ARE_NO_DEMOS = ("what is the water boiling point?", "What is the capital of France?")


def closed_book_prompt(question: str) -> str:
    return CLOSED_BOOK.format(question=question)


def with_context_prompt(question: str, documents: list[str]) -> str:
    return WITH_CONTEXT.format(question=question, documents="\n".join(documents))


DOC_WORDS = 120  # each retrieved document is cut to its first words to bound the prompt


def document_texts(hits: Sequence[Hit], words: int = DOC_WORDS) -> list[str]:
    """Retrieved documents as the with-context prompt shows them."""
    return [" ".join(h.document.as_prompt_text().split()[:words]) for h in hits]


def vanilla_prompt(question: str) -> str:
    return VANILLA.format(question=question)


# RRCP's LLM-judge evaluator: the generator's P(Yes) that one document answers the question
# (with the gold answer as reference, as a reference-based evaluator such as GenEval has).
DOC_JUDGE_ID = "rrcp-doc-judge-v1"
DOC_JUDGE = (
    'Does the document contain the answer to the question? Only answer "Yes" or "No".'
    "\n\nDocument:\n{document}\n\nQuestion: {question}\nReference answer: {answer}\nAnswer:"
)
DOC_JUDGE_CHOICES = ("Yes", "No")


def doc_judge_prompt(question: str, document: str, answer: str) -> str:
    return DOC_JUDGE.format(question=question, document=document, answer=answer)
