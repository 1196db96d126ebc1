"""Loaders on the real files in ../shared/datasets and on official-schema fixtures."""

import json
from collections import Counter

import pytest

from retrieval_gate.cli import main
from retrieval_gate.data import (
    BadRows,
    DataError,
    assign_splits,
    dataset_names,
    load_all,
    load_dataset,
    load_entityquestions_train,
    load_hub,
    popqa_relation,
    resolve_data_dir,
)
from retrieval_gate.errors import BackendError
from retrieval_gate.questions import normalize_answer

# PROVENANCE.md's row counts (PopQA: the three files merged by id, 381 rows of the paragraphs
# file matched to the other two by question and s_pop).
EXPECTED_ROWS = {
    "retrievalqa": 250,
    "popqa": 3818,
    "freshqa": 600,
    "entityquestions": 22075,
    "toolqa": 1530,
    "triviaqa": 1000,
}


@pytest.fixture(scope="module")
def everything():
    return {name: load_dataset(name) for name in dataset_names()}


def test_every_dataset_loads_with_provenance_counts(everything):
    assert {n: len(qs) for n, qs in everything.items()} == EXPECTED_ROWS
    for name, qs in everything.items():
        assert len({q.id for q in qs}) == len(qs), f"duplicate ids in {name}"
        assert all(q.source == name and q.text.strip() for q in qs)


def test_popqa_subsets_merge_without_duplicates(everything):
    popqa = everything["popqa"]
    files = Counter(s for q in popqa for s in q.extra["popqa_subsets"])
    assert files == {"longtail": 1399, "random2000": 2000, "first1000": 1000}
    both = [q for q in popqa if {"longtail", "random2000"} <= set(q.extra["popqa_subsets"])]
    assert len(both) == 200  # PROVENANCE: 200 ids overlap
    assert all(q.s_pop is not None and q.relation for q in popqa)
    assert sum(1 for q in popqa if q.contexts) == 1000
    assert all(q.s_pop < 100 for q in popqa if "longtail" in q.extra["popqa_subsets"])
    # the random file has no relation column: it is read off the question template
    assert popqa_relation("What sport does Pelé play?") == "sport"
    assert popqa_relation("What is Paris the capital of?") == "capital of"


def test_source_specific_metadata(everything):
    rqa = everything["retrievalqa"]
    assert Counter(q.extra["data_source"] for q in rqa) == {
        "realtimeqa": 50,
        "freshqa": 50,
        "toolqa": 50,
        "popqa": 50,
        "triviaqa": 50,
    }
    assert all(len(q.contexts) >= 5 for q in rqa)  # top-5 or more documents per row
    assert next(q for q in rqa if q.extra["data_source"] == "realtimeqa").date == "2023-10-13"
    fresh = everything["freshqa"]
    assert Counter(q.fact_type for q in fresh)["fast-changing"] == 154
    assert sum(q.false_premise for q in fresh) == 149
    assert {q.hops for q in fresh} == {"one-hop", "multi-hop"}
    eq = everything["entityquestions"]
    assert len({q.relation for q in eq}) == 24
    tool = everything["toolqa"]
    assert Counter(q.extra["domain"] for q in tool)["agenda"] == 200  # genda-hard.jsonl fixed
    assert {q.extra["difficulty"] for q in tool} == {"easy", "hard"}
    assert len(everything["triviaqa"][0].answers) > 1


# ------------------------------------------------------------ official schemas, as fixtures

RQA_ROWS = [
    {
        "data_source": "popqa",
        "question_id": "popqa_1",
        "question": "Who is X?",
        "ground_truth": ["y"],
        "context": [{"title": "t", "text": "x is y"}],
        "param_knowledge_answerable": 0,
    },
    {
        "data_source": "triviaqa",
        "question_id": "triviaqa_qw_2",
        "question": "What is Z?",
        "ground_truth": ["z"],
        "context": [],
        "param_knowledge_answerable": 1,
    },
]
POPQA_ROWS = [
    {
        "id": 4222362,
        "subj": "George Rankin",
        "prop": "occupation",
        "obj": "politician",
        "subj_id": 1850297,
        "prop_id": 22,
        "obj_id": 2834605,
        "s_aliases": "[]",
        "o_aliases": "[]",
        "s_uri": "u",
        "o_uri": "u",
        "s_wiki_title": "George Rankin",
        "o_wiki_title": "Politician",
        "s_pop": 142,
        "o_pop": 25692,
        "question": "What is George Rankin's occupation?",
        "possible_answers": '["politician", "political leader"]',
    },
]


def test_hub_rows_go_through_the_local_converters(tmp_path):
    hub = {q.id: q for q in load_hub("retrievalqa", rows=RQA_ROWS)}
    (tmp_path / "retrievalqa").mkdir()
    with open(tmp_path / "retrievalqa" / "retrievalqa.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in RQA_ROWS)
    local = {q.id: q for q in load_dataset("retrievalqa", tmp_path)}
    assert hub == local
    assert local["retrievalqa-popqa_1"].extra["param_knowledge_answerable"] == 0
    assert local["retrievalqa-triviaqa_qw_2"].extra["param_knowledge_answerable"] == 1

    (q,) = load_hub("popqa", rows=POPQA_ROWS)
    assert (q.id, q.s_pop, q.o_pop, q.relation) == ("popqa-4222362", 142, 25692, "occupation")
    assert q.answers == ("politician", "political leader")


def test_popqa_official_tsv(tmp_path):
    (tmp_path / "popqa").mkdir()
    cols = list(POPQA_ROWS[0])
    lines = ["\t".join(cols)] + ["\t".join(str(r[c]) for c in cols) for r in POPQA_ROWS]
    (tmp_path / "popqa" / "popqa.tsv").write_text("\n".join(lines) + "\n")
    (q,) = load_dataset("popqa", tmp_path)
    assert q.id == "popqa-4222362" and q.extra["popqa_subsets"] == ["tsv"]


# ------------------------------------------------------------ bad input


def _write(tmp_path, rel, text):
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_malformed_json_line_names_file_and_line(tmp_path):
    good = json.dumps({"id": "a", "question": "Q?", "answers": ["x"]})
    _write(tmp_path, "triviaqa/triviaqa_test.jsonl", good + "\n{not json\n")
    with pytest.raises(DataError, match=r"triviaqa_test.jsonl, line 2: malformed JSON"):
        load_dataset("triviaqa", tmp_path)
    bad = BadRows(skip=True)
    assert len(load_dataset("triviaqa", tmp_path, bad=bad)) == 1
    assert bad.total == 1


def test_a_json_dataset_file_not_utf8_is_refused_naming_it(tmp_path):
    row = {"question": "Who?", "answers": ["x"], "obj": "x", "relation": "P106"}
    data = json.dumps([row]).encode()
    path = tmp_path / "entityquestions" / "test" / "P106.test.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(data[:10] + b"\xff" + data[10:])  # was an internal error
    with pytest.raises(DataError, match=r"P106.test.json: not valid UTF-8 \(byte 10\)"):
        load_dataset("entityquestions", tmp_path)
    path.write_bytes(b"\xef\xbb\xbf" + data)  # a byte-order mark is not the file's
    assert len(load_dataset("entityquestions", tmp_path)) == 1


def test_a_damaged_entityquestions_train_archive_is_refused_not_read_as_other_rows(tmp_path):
    real = (resolve_data_dir() / "entityquestions" / "train.tar.gz").read_bytes()
    path = tmp_path / "entityquestions" / "train.tar.gz"
    path.parent.mkdir(parents=True)
    # a flipped byte early in the deflate stream: tarfile never reads gzip's CRC at the end
    for damaged in (real[:1000] + bytes([real[1000] ^ 0xFF]) + real[1001:], real[: len(real) // 2]):
        path.write_bytes(damaged)
        with pytest.raises(DataError, match="train.tar.gz: not a readable .tar.gz.*download"):
            load_entityquestions_train(tmp_path)


def test_rows_without_question_or_answers(tmp_path):
    rows = [{"id": "a", "answers": ["x"]}, {"id": "b", "question": "Q?", "answers": []}]
    _write(tmp_path, "triviaqa/triviaqa_test.jsonl", "\n".join(json.dumps(r) for r in rows))
    with pytest.raises(DataError, match=r"line 1: row has no 'question'"):
        load_dataset("triviaqa", tmp_path)
    bad = BadRows(skip=True)
    with pytest.raises(DataError, match="no usable rows"):
        load_dataset("triviaqa", tmp_path, bad=bad)
    assert bad.total == 2


def test_a_dataset_read_again_is_kept_until_a_file_of_its_folder_changes(tmp_path, monkeypatch):
    """A worker read the bundled datasets dozens of times (`load_all()` ~1 s each): a second
    read of an unchanged folder returns the same questions without the loader; a rewritten
    file, an added one or a file with bad rows is read afresh."""
    from retrieval_gate.data import catalog

    calls = []
    real = catalog.LOADERS["triviaqa"]
    monkeypatch.setitem(catalog.LOADERS, "triviaqa", lambda *a: calls.append(1) or real(*a))
    row = {"id": "t1", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"]}
    _write(tmp_path, "triviaqa/triviaqa_test.jsonl", json.dumps(row))
    first = load_dataset("triviaqa", tmp_path)
    assert load_dataset("triviaqa", tmp_path) == first and len(calls) == 1
    _write(tmp_path, "triviaqa/triviaqa_test.jsonl", json.dumps({**row, "question": "Who?"}))
    assert [q.text for q in load_dataset("triviaqa", tmp_path)] == ["Who?"] and len(calls) == 2
    _write(tmp_path, "notes.txt", "x")  # any file of the folder: the loaders read several
    load_dataset("triviaqa", tmp_path)
    assert len(calls) == 3
    bad_row = json.dumps({"id": "t2", "answers": ["x"]})
    _write(tmp_path, "triviaqa/triviaqa_test.jsonl", json.dumps(row) + "\n" + bad_row)
    for _ in range(2):
        bad = BadRows(skip=True)
        assert len(load_dataset("triviaqa", tmp_path, bad=bad)) == 1 and bad.total == 1
    assert len(calls) == 5


def test_the_canonical_split_follows_the_data_folder(tmp_path, monkeypatch):
    """It was computed once per process: after the data folder (or a file in it) changed, a
    long-lived process kept splitting the questions it read first."""
    from retrieval_gate.data import catalog, splits

    monkeypatch.setattr(catalog, "dataset_names", lambda optional=False: ["triviaqa"])
    rows = [{"id": f"t{i}", "question": f"Who wrote {i}?", "answers": ["x"]} for i in range(20)]
    lines = [json.dumps(r) for r in rows]
    for name, kept in (("a", lines), ("b", lines[1:])):
        _write(tmp_path / name, "triviaqa/triviaqa_test.jsonl", "\n".join(kept))
    ids = {}
    for name in ("a", "b", "a"):
        monkeypatch.setenv("RETRIEVAL_GATE_DATA", str(tmp_path / name))
        ids[name] = {q.id for q in splits.canonical_questions()}
        assert all(q.split in splits.SPLITS for q in splits.canonical_questions())
    assert "triviaqa-t0" in ids["a"] and ids["b"] == ids["a"] - {"triviaqa-t0"}
    _write(tmp_path / "a", "triviaqa/triviaqa_test.jsonl", lines[5])
    assert [q.id for q in splits.canonical_questions()] == ["triviaqa-t5"]


def test_bad_popqa_answers_field(tmp_path):
    _write(
        tmp_path,
        "popqa/popqa_random2000.json",
        json.dumps({"dev": [{"input": "Q?", "output": "not json", "id": 1}], "test": []}),
    )
    with pytest.raises(DataError, match="'output' is not a JSON list"):
        load_dataset("popqa", tmp_path)


def test_unknown_dataset_missing_file_empty_folder(tmp_path):
    with pytest.raises(DataError, match="unknown dataset 'nope'; known datasets: entityquestions"):
        load_dataset("nope")
    _write(tmp_path, "README", "x")
    with pytest.raises(
        DataError, match=r"missing file for dataset 'triviaqa': looked for .*triviaqa_test.jsonl"
    ):
        load_dataset("triviaqa", tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="is empty"):
        resolve_data_dir(empty)


def test_a_dataset_file_that_is_a_folder_pipe_or_dead_link_is_refused_not_skipped(tmp_path):
    """PopQA's optional files were checked with is_file(): a FIFO, folder or dead link at the
    long-tail file's name loaded PopQA without its 1,399 questions, without a word."""
    import os

    _write(tmp_path, "popqa/popqa_random2000.json",
           json.dumps({"dev": [{"input": "Q?", "output": '["A"]', "id": 1}], "test": []}))  # fmt: skip
    longtail = tmp_path / "popqa" / "popqa_longtail.jsonl"
    for make, what in ((os.mkfifo, "a device, pipe or socket"), (os.mkdir, "a folder"),
                       (lambda p: p.symlink_to(tmp_path / "gone"), "a link to nothing")):  # fmt: skip
        make(longtail)
        with pytest.raises(DataError, match=f"dataset 'popqa': this is {what}, not a file"):
            load_dataset("popqa", tmp_path)
        longtail.rmdir() if longtail.is_dir() and not longtail.is_symlink() else longtail.unlink()
    assert len(load_dataset("popqa", tmp_path)) == 1  # absent: the files there are read


def test_env_var_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("RETRIEVAL_GATE_DATA", str(tmp_path / "missing"))
    with pytest.raises(DataError, match=r"\$RETRIEVAL_GATE_DATA"):
        resolve_data_dir()


def test_offline_download_says_so(tmp_path, monkeypatch):
    from retrieval_gate.data import paths

    monkeypatch.setattr(paths, "OFFICIAL_FILES", [("x/y.json", "http://127.0.0.1:9/y.json", "")])
    with pytest.raises(BackendError, match="offline"):
        paths.fetch_official(tmp_path)


def test_a_failed_download_exits_3_and_says_so(tmp_path, monkeypatch, capsys):
    """A backend failure (here the network) is exit code 3 with a message, not a traceback."""
    from retrieval_gate.data import paths

    monkeypatch.chdir(tmp_path)  # no ../shared/datasets from here
    monkeypatch.delenv("RETRIEVAL_GATE_DATA", raising=False)
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(paths, "OFFICIAL_FILES", [("x/y.json", "http://127.0.0.1:9/y.json", "")])
    assert main(["data", "summary"]) == 3
    err = capsys.readouterr().err
    assert "offline" in err and "Traceback" not in err


# ------------------------------------------------------------ splits


def test_splits_are_deterministic_stratified_and_leak_free(everything):
    questions = [q for qs in everything.values() for q in qs]
    a = assign_splits(questions, seed=0)
    b = assign_splits(list(reversed(questions)), seed=0)
    assert a == b
    assert assign_splits(questions, seed=1) != a
    texts = {}
    for q in questions:
        texts.setdefault(normalize_answer(q.text), set()).add(a[q.id])
    assert all(len(s) == 1 for s in texts.values()), "a question text crosses splits"
    for source in EXPECTED_ROWS:
        counts = Counter(a[q.id] for q in everything[source])
        share = counts["train"] / sum(counts.values())
        assert 0.6 < share < 0.8, (source, counts)


def test_splits_stratify_by_label(everything):
    qs = everything["popqa"]
    labels = {q.id: int(q.s_pop < 100) for q in qs}
    split = assign_splits(qs, labels=labels, seed=3)
    for s in ("train", "dev", "test"):
        members = [labels[i] for i, v in split.items() if v == s]
        assert abs(sum(members) / len(members) - sum(labels.values()) / len(labels)) < 0.03


def test_data_summary_cli(capsys):
    assert main(["data", "summary"]) == 0
    out = capsys.readouterr().out
    for name, rows in EXPECTED_ROWS.items():
        assert f"| {name}" in out and f"| {rows} " in out
    assert "total questions: 29273" in out


@pytest.mark.parametrize("flag", [["--dataset", "popqa"], ["--skip-bad-rows"]])
def test_data_summary_of_a_file_refuses_the_bundled_datasets_flags(tmp_path, capsys, flag):
    """--dataset beside --questions was dropped unsaid: the file alone was summarised."""
    qs = tmp_path / "q.txt"
    qs.write_text("Who wrote Hamlet?\n")
    assert main(["data", "summary", "--questions", str(qs), *flag]) == 2
    assert f"{flag[0]} is for the bundled datasets" in capsys.readouterr().err


def test_load_all_matches_sum():
    assert len(load_all()) == sum(EXPECTED_ROWS.values())
