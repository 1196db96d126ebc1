"""The prompts of RetrievalQA / TA-ARE (MISSION.md) and of IRCoT's multi-step retrieval, in one
place. Each has a stable id that label files record as provenance."""

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


# Multi-step retrieval: IRCoT (Trivedi et al., "Interleaving Retrieval with Chain-of-Thought
# Reasoning for Knowledge-Intensive Multi-Step Questions", ACL 2023), as Adaptive-RAG (Jeong et
# al., NAACL 2024) runs it for its multi-step strategy: the paragraphs held so far as
# "Wikipedia Title: <title>\n<text>", then "Q: <question>" and "A:" with the reasoning so far;
# the generator writes the next sentence, and "So the answer is: ..." ends it. IRCoT's
# few-shot demonstrations become one instruction here (a chat model, and a 135M one's
# context). The last allowed step is IRCoT's reader: the same template, asking for the answer
# alone after the reasoning and the answer marker. v2: the same prompt; a marker the model repeats
# is stripped from the answer (rag/multistep.py `parse_step`), so v1 label files are not resumed.
MULTI_STEP_ID = "ircot-multi-step-v2"
ANSWER_MARKER = "So the answer is:"
MULTI_STEP = "{documents}\n\n{instruction}\nQ: {question}\nA:{reasoning}"
MULTI_STEP_REASON = (
    "Answer the following question by reasoning step-by-step, one sentence at a time, using "
    f'the paragraphs above. When you know the answer, write "{ANSWER_MARKER} <answer>."'
)
MULTI_STEP_ANSWER = (
    "Answer the following question using the paragraphs and the reasoning below. Only include "
    "the answer in your response and try to be concise."
)


def multi_step_prompt(
    question: str,
    hits: Sequence[Hit],
    reasoning: Sequence[str],
    final: bool = False,
    words: int = DOC_WORDS,
) -> str:
    """The prompt of one reasoning step: the documents held so far in IRCoT's layout (each
    cut to its first `words` words), the question, the sentences written so far; `final`
    asks for the answer after the answer marker, so the generation is the answer."""
    docs = "\n\n".join(
        f"Wikipedia Title: {h.document.title}\n{' '.join(h.document.text.split()[:words])}"
        for h in hits
    )
    so_far = [*reasoning, ANSWER_MARKER] if final else list(reasoning)
    return MULTI_STEP.format(
        documents=docs or "(no paragraphs)",
        instruction=MULTI_STEP_ANSWER if final else MULTI_STEP_REASON,
        question=question,
        reasoning="".join(" " + s for s in so_far),
    )


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
