"""Property tests (hypothesis) for the readers of user files: label files, question files
(a dataset's JSONL) and `score` input. Arbitrary bytes in -> rows or a clear
RetrievalGateError out, never another exception, never a modified input file."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval_gate.data.bad_rows import BadRows
from retrieval_gate.data.loaders import load_retrievalqa
from retrieval_gate.data.question_lines import read_question_lines
from retrieval_gate.errors import RetrievalGateError
from retrieval_gate.labels.label_files import LabelFile, read_labels

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Bytes that look like the real thing often enough to get past the first checks: JSON-ish
# fragments, CSV-ish lines and field names mixed with raw bytes.
PIECES = [b"{", b"}", b'"id"', b'"label"', b'"question"', b'"text"', b":", b",", b"\n", b"\r\n",
          b"0", b"1", b"2", b"null", b"true", b'"yes"', b'"q1"', b"[", b"]", b"\xff", b"\x00",
          b"id,question\n", b"question\n", b'"', b" ", b"\xe2\x82", b"Who wrote Hamlet?"]  # fmt: skip
CONTENT = st.one_of(
    st.binary(max_size=300),
    st.lists(st.sampled_from(PIECES), max_size=40).map(b"".join),
)


def _check(data: bytes, name: str, read) -> None:
    """`read(path)` either returns or raises a RetrievalGateError; the file is unchanged."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        try:
            read(path)
        except RetrievalGateError as e:
            assert str(e)  # a message, not an empty error
        assert path.read_bytes() == data


@SETTINGS
@given(CONTENT)
def test_label_file_reader(data: bytes) -> None:
    _check(data, "labels.jsonl", lambda p: (LabelFile(p).labels(), read_labels(p)))


@SETTINGS
@given(CONTENT, st.sampled_from(["q.txt", "q.jsonl", "q.csv"]))
def test_score_input_reader(data: bytes, name: str) -> None:
    def read(path: Path) -> None:
        for rec in read_question_lines(path):
            assert ("text" in rec) != ("error" in rec) and isinstance(rec["id"], str)

    _check(data, name, read)


@SETTINGS
@given(CONTENT, st.booleans())
def test_question_file_reader(data: bytes, skip: bool) -> None:
    def read(path: Path) -> None:
        for q in load_retrievalqa(path.parents[1], BadRows(skip=skip)):
            assert isinstance(q.text, str) and q.id

    _check(data, "data/retrievalqa/retrievalqa.jsonl", read)
