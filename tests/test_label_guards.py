"""What a label run reads besides its own file, checked before it is used: the closed-book rows
rag-gain, rrcp and retrievalqa-style read (their questions, weights and engine), the backend
of a resumed file, a sidecar no row was written under, the flags --report and --throughput
read, and the flag a refusal names. A stand-in generator answers: no engine starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval_gate.cli import main
from retrieval_gate.errors import DataError, InputError
from retrieval_gate.generation.base import Generation
from retrieval_gate.labels.label_files import LabelFile, read_meta
from retrieval_gate.labels.policies import LabelRequest, label, relabel
from retrieval_gate.questions import Question
from retrieval_gate.retrieval.base import Document, Hit

LLM = "guard-llm"


class _Answers:
    """A generator stand-in of given weights and backend: it answers "Paris" to every prompt."""

    name = LLM

    def __init__(self, backend: str = "vllm", checksum: str = "a" * 64) -> None:
        self.backend, self.checksum = backend, checksum

    def generate(self, prompts, max_new_tokens=24, logprobs=False):  # noqa: ANN001, ANN201
        return [Generation("Paris", 10, 1, [-0.1] if logprobs else None) for _ in prompts]


class _Docs:
    """A retriever stand-in: the same one document for every question."""

    name = "fixed"

    def retrieve(self, questions, k=5):  # noqa: ANN001, ANN201
        return [[Hit(Document("d1", "Paris", "Paris is the capital of France."), 1.0)]
                for _ in questions]  # fmt: skip


def _questions(a_text: str = "What is the capital of France?", a_answer: str = "Paris"):
    return [Question("a", a_text, (a_answer,), "mine"),
            Question("b", "Which river flows through Paris?", ("Seine",), "mine")]  # fmt: skip


def _label(policy: str, tmp_path: Path, questions=None, gen=None, **kw):  # noqa: ANN001, ANN202
    options = {"no_llm_judge": True} if policy == "rrcp" else {}
    req = LabelRequest(policy, generator=LLM, questions=questions or _questions(),
                       labels_dir=tmp_path, options=options, **kw)  # fmt: skip
    return label(req, generator=gen or _Answers(), retriever=_Docs())


# ---------------------------------------------------------------- 1. the closed-book rows read


@pytest.mark.parametrize("policy", ["rag-gain", "rrcp", "retrievalqa-style"])
def test_closed_book_rows_of_other_questions_under_the_same_id_are_refused(tmp_path, policy):
    """Question "a" asked of France when closed-book was labelled, of Germany now: rag-gain
    judged the old answer "Paris" as the new question's (label 0, "hurts"), with no warning."""
    _label("closed-book", tmp_path)
    edited = _questions("What is the capital of Germany?", "Berlin")
    with pytest.raises(DataError, match=r"closed-book\.jsonl: 1 closed-book rows here were made "
                       r"for other questions under the same id \(id 'a'"):  # fmt: skip
        _label(policy, tmp_path, edited)
    assert not (tmp_path / LLM / f"{policy}.jsonl").exists()
    assert _label(policy, tmp_path)["rows"] == 2  # the questions it was made for: labelled


def test_retrievalqa_style_rows_carry_the_questions_stamp(tmp_path):
    """Its rows carried no stamp: train over questions edited since read them unchecked."""
    _label("closed-book", tmp_path)
    _label("retrievalqa-style", tmp_path)
    rows = LabelFile(tmp_path / LLM / "retrievalqa-style.jsonl").rows
    assert all(isinstance(r.get("question_sha"), str) for r in rows.values())


@pytest.mark.parametrize("policy", ["rag-gain", "rrcp"])
@pytest.mark.parametrize(
    "gen, message",
    [(_Answers(backend="transformers"), "made with backend='vllm', and this run answers with "
      "'transformers'"),
     (_Answers(checksum="b" * 64), "made with other weights of its generator")],
)  # fmt: skip
def test_closed_book_rows_of_another_engine_or_weights_are_refused(tmp_path, policy, gen, message):
    """Closed-book labelled with transformers, rag-gain with vLLM: the rag-gain file claimed
    vLLM while its closed-book measures were transformers' answers."""
    _label("closed-book", tmp_path)
    with pytest.raises(DataError, match=message):
        _label(policy, tmp_path, gen=gen)
    assert not (tmp_path / LLM / f"{policy}.jsonl").exists()
    assert _label(policy, tmp_path, gen=_Answers(backend="ray:vllm-engine"))["rows"] == 2


# ---------------------------------------------------------------- 2. questions without documents


def test_bundled_questions_without_documents_are_labelled_over_a_corpus(tmp_path, capsys):
    """`--dataset freshqa --corpus FILE` labelled 0 questions and ended 0: every FreshQA
    question was dropped for carrying no documents, though bm25 over the corpus had some."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "d1", "title": "Paris", "text": "Paris is in France."}\n')
    req = dict(generator=LLM, datasets=["freshqa"], limit=2, labels_dir=tmp_path)
    made = label(LabelRequest("rag-gain", **req, options={"corpus": corpus}), _Answers(), _Docs())
    assert made["rows"] == 2
    with pytest.raises(InputError, match="none of the .* questions carries any.*--corpus FILE"):
        label(LabelRequest("rag-gain", **{**req, "labels_dir": tmp_path / "n"}), _Answers())
    assert main(["label", "--policy", "rag-gain", "--dataset", "toolqa", "--limit", "2",
                 "--labels-dir", str(tmp_path / "cli")]) == 2  # fmt: skip
    assert "--corpus FILE" in capsys.readouterr().err
    assert not (tmp_path / "n").exists() and not (tmp_path / "cli").exists()


# ---------------------------------------------------------------- 3. another backend


def test_a_resume_with_another_backend_is_refused_before_any_engine(tmp_path):
    """vLLM's rows, then transformers' appended, under a sidecar claiming transformers."""
    first = _questions()[:1]
    _label("closed-book", tmp_path, first)
    out = tmp_path / LLM / "closed-book.jsonl"
    before = out.read_bytes()
    with pytest.raises(DataError, match="made with backend='vllm', not 'transformers'"):
        _label("closed-book", tmp_path, gen=_Answers(backend="transformers"))
    req = LabelRequest("closed-book", generator=LLM, questions=first, labels_dir=tmp_path,
                       backend="transformers")  # fmt: skip
    with pytest.raises(DataError, match="made with backend='vllm', not 'transformers'"):
        label(req)  # --backend transformers, no generator built
    assert out.read_bytes() == before and read_meta(out.with_suffix(".meta.json"))["backend"] == (
        "vllm"
    )
    # vLLM as Ray actors answers as the in-process engine: the same resume
    assert _label("closed-book", tmp_path, gen=_Answers(backend="ray:vllm-engine"))["rows"] == 2


# ---------------------------------------------------------------- 4. --report, --throughput


@pytest.mark.parametrize(
    "argv, flag",
    [(["--report", "--out", "{tmp}/cb.jsonl"], "--out"),
     (["--report", "--policy", "closed-book", "--labels-dir", "{tmp}"], "--policy"),
     (["--report", "--dataset", "popqa", "--labels-dir", "{tmp}"], "--dataset"),
     (["--report", "--limit", "3"], "--limit"),
     (["--report", "--criterion", "em"], "--criterion"),
     (["--throughput", "1", "--out", "{tmp}/tp.jsonl"], "--out"),
     (["--throughput", "1", "--policy", "closed-book"], "--policy"),
     (["--throughput", "1", "--dataset", "popqa"], "--dataset")],
)  # fmt: skip
def test_a_flag_report_or_throughput_does_not_read_is_refused(argv, flag, tmp_path, capsys):
    """`--report --out FILE` reported data/labels, `--report --limit 3` every row,
    `--throughput 1 --dataset popqa` RetrievalQA: each ended 0."""
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert main(["label", *argv]) == 2
    err = capsys.readouterr().err
    assert f"{flag} is not read by {argv[0]}" in err and f"drop {flag}" in err, err
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- 5. the flag a refusal names


def test_a_refusal_under_labels_dir_names_labels_dir(tmp_path):
    """It said "--out needs a .jsonl file path" and "pass another --out", a flag not given."""
    (tmp_path / "f" / LLM / "closed-book.jsonl").mkdir(parents=True)
    user = tmp_path / "u" / LLM / "closed-book.jsonl"
    user.parent.mkdir(parents=True)
    user.write_text('{"id": "x", "label": 1}\n')
    for folder in ("f", "u"):
        req = LabelRequest("closed-book", generator=LLM, questions=_questions(),
                           labels_dir=tmp_path / folder)  # fmt: skip
        with pytest.raises(DataError, match="pass another --labels-dir") as e:
            label(req, generator=_Answers())
        assert "--out" not in str(e.value)
    with pytest.raises(DataError, match="pass another --labels-dir") as e:
        relabel("closed-book", "em", LLM, tmp_path / "u")  # --relabel --labels-dir too
    assert "--out" not in str(e.value)
    assert user.read_text() == '{"id": "x", "label": 1}\n'


# ---------------------------------------------------------------- 6. a sidecar without rows


@pytest.mark.parametrize("rows", [None, b""])
def test_a_sidecar_no_row_was_written_under_binds_no_settings(tmp_path, rows):
    """Ctrl-C before the first chunk left eq.meta.json and no eq.jsonl; another policy on it
    was refused with "pass another --out (or move the file)", a file that was not there."""
    out = tmp_path / "eq.jsonl"
    meta = {"policy": "closed-book", "generator": LLM, "criterion": "loose-no-guess"}
    out.with_suffix(".meta.json").write_text(json.dumps(meta))
    if rows is not None:
        out.write_bytes(rows)
    assert _label("rag-gain", tmp_path, out=out)["rows"] == 2
    assert read_meta(out.with_suffix(".meta.json"))["policy"] == "rag-gain"
