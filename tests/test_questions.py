import pytest

from retrieval_gate.questions import Question, exact_match, match, normalize_answer, token_f1


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Beatles", "beatles"),
        ("  A  tale of Two   Cities! ", "tale of two cities"),
        ("U.S.A.", "usa"),
        ("Rock 'n' Roll", "rock n roll"),
        ("Ｔｏｋｙｏ", "tokyo"),  # full-width letters fold under NFKC
        ("José «Pepe» García", "josé pepe garcía"),  # unicode quotes are punctuation; accents stay
        ("1,000", "1000"),
        ("3.5", "35"),
        ("an apple", "apple"),
        ("theatre", "theatre"),  # 'the' only as a whole word
        ("", ""),
    ],
)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


def test_match_is_gold_substring_of_prediction():
    assert match("I think it is the city of Paris, France.", ["Paris"])
    assert match("Paris", ["paris", "Lutetia"])
    assert not match("London", ["Paris"])
    assert not match("Paris", [""])  # empty gold never matches
    assert not match("anything", [])
    assert match("He was born in 1,000 BC", ["1000"])


def test_exact_match_and_f1():
    assert exact_match("The Paris", ["paris"])
    assert not exact_match("Paris, France", ["Paris"])
    assert token_f1("Paris France", ["Paris"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert token_f1("the", ["a"]) == 0.0
    assert token_f1("New York City", ["York", "new york city"]) == 1.0
    assert token_f1("x", []) == 0.0


def test_question_rejects_empty_text_and_round_trips():
    with pytest.raises(ValueError, match="empty question"):
        Question(id="x", text="  ", answers=("a",), source="s")
    q = Question(
        id="x", text="Q?", answers=("a",), source="s", contexts=({"title": "t", "text": "b"},)
    )
    assert Question.from_dict(q.to_dict()) == q


def test_a_feature_cell_is_a_finite_number_or_unknown():
    """An infinite cell (`inf`, `1e400`) passed as a number: the scaling made NaN and training
    stopped with scikit-learn's 'Input X contains NaN' traceback."""
    from retrieval_gate.errors import InputError
    from retrieval_gate.questions import Question, feature_value

    def q(value):
        return Question(id="q1", text="Q?", answers=(), source="s", extra={"views": value})

    assert feature_value(q("12.5"), "views") == 12.5 and feature_value(q(-5), "views") == -5
    assert feature_value(q(""), "views") is None and feature_value(q("nan"), "views") is None
    for bad in ("inf", "1e400", "-Infinity", "abc", [1]):
        with pytest.raises(InputError, match=r"question 'q1': feature column 'views' .* not a "
                           "finite number"):  # fmt: skip
            feature_value(q(bad), "views")


def test_a_feature_cell_of_an_integer_past_the_float_range_is_refused():
    """JSON reads 10**400 exactly, and float() of it raised OverflowError (exit 1, a bug)."""
    from retrieval_gate.errors import InputError
    from retrieval_gate.questions import Question, feature_value, id_text

    big = -(10**400)
    q = Question(id="q1", text="Q?", answers=(), source="s", extra={"views": big})
    with pytest.raises(InputError, match=r"'views' .* holds -1000.*\(402 characters\), not a fin"):
        feature_value(q, "views")
    assert id_text(10**400) == "1" + "0" * 400  # an id: its digits, exactly
