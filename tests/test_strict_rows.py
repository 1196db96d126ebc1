"""strict_rows: json.loads and csv.DictReader keep the last of two same-named keys silently."""

from __future__ import annotations

import json

import pytest

from retrieval_gate.strict_rows import RepeatedKeyError, first_repeated, loads


def test_loads_reads_what_json_reads():
    text = '{"id": "q1", "label": 1, "meta": {"a": [1, {"b": null}]}, "s": "\\u00e9"}'
    assert loads(text) == json.loads(text) and loads(text.encode()) == json.loads(text)


@pytest.mark.parametrize("text, key", [
    ('{"id": "q1", "label": 1, "label": 0}', "label"),
    ('{"outer": {"x": 1, "y": 2, "x": 1}}', "x"),  # the same value twice is still ambiguous
    ('[{"a": 1}, {"a": 1, "b": 2, "b": 3}]', "b"),
])  # fmt: skip
def test_a_key_given_twice_in_one_object_is_refused(text, key):
    with pytest.raises(RepeatedKeyError, match=f"key '{key}' is given twice"):
        loads(text)


def test_first_repeated():
    assert first_repeated(["a", "b", "c"]) is None
    assert first_repeated(["a", "b", "b", "a"]) == "b"
