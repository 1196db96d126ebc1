"""The HTTP face of the adaptive RAG loop: the gate in front of a real service.

`POST /answer {"questions": ["...", ...]}` -> one answer per question with the retrieve
decision and its probability, plus the measured costs of the request; `GET /health`.
Bad requests (missing field, empty list, non-string or blank question, too many questions)
get a 4xx with a reason and the server keeps serving."""

from __future__ import annotations

import threading
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from ..questions import Question
from .loop import AdaptiveRAG

DEFAULT_MAX_QUESTIONS = 64
# Short-form questions; a longer one is refused before it can overflow the model's context.
MAX_QUESTION_CHARS = 1000


class AnswerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    questions: list[StrictStr] = Field(min_length=1)


class AnswerItem(BaseModel):
    question: str
    answer: str
    retrieve: bool
    probability: float
    documents: list[str]


class AnswerResponse(BaseModel):
    gate: str
    threshold: float
    answers: list[AnswerItem]
    costs: dict[str, Any]


def create_app(rag: AdaptiveRAG, max_questions: int = DEFAULT_MAX_QUESTIONS) -> FastAPI:
    """A FastAPI app answering through `rag`. One request runs at a time (a lock): the
    in-process vLLM engine is not thread-safe, and each request is already one batch."""
    app = FastAPI(title="retrieval-gate", summary="adaptive RAG behind a retrieval gate")
    lock = threading.Lock()

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # One readable sentence per problem, naming the field (instead of the nested default).
        reasons = [_reason(e) for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": "; ".join(reasons)})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "gate": rag.gate.name,
            "threshold": float(rag.gate.threshold),
            "retriever": rag.retriever.name,
            "generator": rag.generator.name,
            "max_questions": max_questions,
        }

    @app.post("/answer", response_model=AnswerResponse)
    def answer(request: AnswerRequest) -> AnswerResponse:
        texts = request.questions
        if len(texts) > max_questions:
            raise HTTPException(
                status_code=413,
                detail=f"too many questions: {len(texts)} > {max_questions} per request; "
                "split the batch",
            )
        for i, t in enumerate(texts):
            if not t.strip():
                raise HTTPException(422, detail=f"questions[{i}] is empty or only whitespace")
            if len(t) > MAX_QUESTION_CHARS:
                raise HTTPException(
                    422, detail=f"questions[{i}] is longer than {MAX_QUESTION_CHARS} characters"
                )
        questions = [
            Question(id=f"request-{i}", text=t.strip(), answers=(), source="http")
            for i, t in enumerate(texts)
        ]
        with lock:
            run = rag.run(questions)
        items = [
            AnswerItem(
                question=a.question,
                answer=a.answer,
                retrieve=a.retrieve,
                probability=a.probability,
                documents=a.documents,
            )
            for a in run.answers
        ]
        return AnswerResponse(
            gate=rag.gate.name,
            threshold=float(rag.gate.threshold),
            answers=items,
            costs=run.costs.to_dict(),
        )

    return app


def _reason(error: dict[str, Any]) -> str:
    where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
    return f"{where}: {error.get('msg', 'invalid')}"


def serve(
    rag: AdaptiveRAG,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_questions: int = DEFAULT_MAX_QUESTIONS,
) -> None:
    """Serves `rag` over HTTP until interrupted (uvicorn, one worker: the engine is in-process;
    scale generation out with a remote vLLM server instead of more workers)."""
    import uvicorn

    uvicorn.run(create_app(rag, max_questions), host=host, port=port, workers=1)
