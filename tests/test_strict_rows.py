"""strict_rows: json.loads and csv.DictReader keep the last of two same-named keys silently."""

from __future__ import annotations

import json

import pytest

from retrieval_gate.strict_rows import RepeatedKeyError, first_repeated, loads, parse_json


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


@pytest.mark.parametrize("text, where, column", [
    ('{"q": "x\\ud800"}', "'\\ud800' in 'q'", 9),
    ('{"q": "\\ud83d\\ude00 ok \\udc00"}', "'\\udc00' in 'q'", 24),  # after a valid pair
    ('{"q": "\\\\ud800 \\uD800"}', "'\\ud800' in 'q'", 16),  # after an escaped backslash
    ('{"\\udfff": 1}', "'\\udfff' in a key", 3),
    ('[[{"a": ["\\udbff"]}]]', "'\\udbff' in 'a'", 11),
    ('{"a": "\\udc01", "b": "\\udc02"}', "'\\udc01' in 'a'", 8),  # the first, as the column
])  # fmt: skip
def test_a_lone_surrogate_is_malformed_json_naming_where(text, where, column):
    """JSON's grammar escapes half a UTF-16 pair; no tokenizer, hash or UTF-8 file takes it:
    `label --policy outcomes` and `score --questions` ended in internal errors."""
    with pytest.raises(json.JSONDecodeError, match="a lone surrogate") as e:
        loads(text)
    assert where in e.value.msg and e.value.colno == column, (e.value.msg, e.value.colno)
    with pytest.raises(json.JSONDecodeError, match="a lone surrogate"):
        parse_json(text)
    assert loads(text, lone_surrogates=True) == json.loads(text)  # a reader naming the field


def test_escapes_that_are_no_lone_surrogate_read_as_json_reads():
    for text in ['["\\ud83d\\ude00"]', '{"a": "\\\\ud800"}', '{"a": "\\ud7ff \\ue000 é"}']:
        assert loads(text) == json.loads(text) and parse_json(text) == json.loads(text)
