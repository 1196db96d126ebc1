"""What `transfer` and the tables its report is made of do with awkward inputs: two label files
of one name, a source name holding `|`, a file of one source; and a BM25 corpus with no word
to index."""

from __future__ import annotations

import json
import re

import pytest

from retrieval_gate import tables
from retrieval_gate.cli import main
from retrieval_gate.errors import ConfigError, InputError
from retrieval_gate.evaluation import transfer  # scipy, sklearn, matplotlib: at collection


def _user_files(folder, sources, labels=("mine",)):
    """A question CSV over `sources` (30 questions each) and one label file per name in
    `labels`, each in a folder of its own; the second and later ones flip every label."""
    rows, ys = ["id,question,answer,source"], []
    for i in range(30 * len(sources)):
        y = i % 2
        word = ("latest", "today's") if y else ("capital", "author")
        rows.append(f'u{i},what is the {word[i % 4 // 2]} figure of item {i}?,x,'
                    f'"{sources[i % len(sources)]}"')  # fmt: skip
        ys.append(y)
    questions = folder / "mine.csv"
    questions.write_text("\n".join(rows) + "\n")
    files = []
    for n, name in enumerate(labels):
        path = folder / f"labels-{n}" / f"{name}.jsonl"
        path.parent.mkdir()
        path.write_text("".join(json.dumps({"id": f"u{i}", "label": y if n == 0 else 1 - y})
                                + "\n" for i, y in enumerate(ys)))  # fmt: skip
        files.append(path)
    return questions, files


def _cells(line: str) -> list[str]:
    """A markdown table row's cells as GitHub reads them: a `|` after a backslash is text."""
    return re.split(r"(?<!\\)\|", line)[1:-1]


def test_two_label_files_of_one_name_are_refused_before_any_cell(tmp_path, capsys):
    """Two files named closed-book.jsonl (other folders, other labels) ran with exit 0: both
    filed as `closed-book` in transfer.json, transfer.md showing the first's figures only, and
    --learned training on the last file alone. Refused, naming both, before any cell."""
    questions, files = _user_files(tmp_path, ["wiki", "news"], labels=("closed-book",) * 2)
    out = tmp_path / "report"
    code = main(["transfer", "--questions", str(questions), "--labels", *map(str, files),
                 "--gates", "tfidf", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and not (out / "transfer.json").exists()
    assert f"--labels {files[0]} and {files[1]} share the name 'closed-book'" in err
    assert "once per file (each with its own --out), or rename one" in err
    with pytest.raises(ConfigError, match="share the name 'closed-book'"):
        transfer.run_transfer(files, ["tfidf"], out, None)  # the API refuses them too
    assert list(transfer.named_label_files([files[0], tmp_path / "rag-gain.jsonl"])) == [
        "closed-book", "rag-gain"]  # fmt: skip


def test_two_label_file_names_differing_only_in_case_are_refused(tmp_path, capsys):
    """`A.jsonl` and `a.jsonl` ran with exit 0, writing transfer-A.png and transfer-a.png (and
    learned runs transfer-A-... and transfer-a-...): one file where case is ignored (macOS,
    Windows), so one label file's figure overwrote the other's. Refused, naming both."""
    questions, files = _user_files(tmp_path, ["wiki", "news"], labels=("A", "a"))
    out = tmp_path / "report"
    code = main(["transfer", "--questions", str(questions), "--labels", *map(str, files),
                 "--gates", "tfidf", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and not out.exists(), err
    assert (
        f"--labels {files[0]} and {files[1]} have names ('A', 'a') that differ only in "
        "letter case" in err
    ), err
    assert "transfer-a.png" in err and "Rename one of them" in err
    with pytest.raises(ConfigError, match="differ only in letter case"):
        transfer.named_label_files(files)  # the API refuses them too


def test_a_pipe_or_a_newline_in_a_name_stays_in_its_cell(tmp_path):
    """A source `a|b` made a transfer table row one cell longer than its header (`c\\|d` was
    read as c|d): every report's table writer escapes `|`, keeps a typed `\\|` as typed, and
    turns a newline (which ended the row) into a space."""
    questions, (labels,) = _user_files(tmp_path, ["a|b", "c\\|d"])
    out = tmp_path / "report"
    assert main(["transfer", "--questions", str(questions), "--labels", str(labels),
                 "--gates", "tfidf", "--out", str(out)]) == 0  # fmt: skip
    lines = [x for x in (out / "transfer.md").read_text().splitlines() if x.startswith("|")]
    assert "| a\\|b (n=" in lines[0] and "| c\\\\\\|d (n=" in lines[0]
    assert [len(_cells(x)) for x in lines] == [3] * 4

    cell = tables.cell_text
    assert cell("a|b") == "a\\|b" and cell("c\\|d") == "c\\\\\\|d" and cell("a\\b") == "a\\b"
    assert cell("two\nlines\r\nhere") == "two lines here"
    table = tables.markdown_table(["gate", "a|b"], [["x\ny", 0.5]], pad=True).splitlines()
    assert table[0] == "| gate | a\\|b  |" and table[2] == "| x y  | 0.500 |"


def test_a_source_column_of_one_value_is_named_as_such(tmp_path, capsys):
    """A file whose `source` column holds one value was told to give --questions a `source`
    column: the message says which source all the questions have and what to change."""
    questions, (labels,) = _user_files(tmp_path, ["only"])
    code = main(["transfer", "--questions", str(questions), "--labels", str(labels),
                 "--gates", "tfidf", "--out", str(tmp_path / "report")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "every labelled question here has source 'only'" in err
    assert "a `source` column with two or more values" in err


@pytest.mark.parametrize("texts", [["A", "B"], ["the of", "and a"], ["x y z", "1 2"]])
def test_a_bm25_corpus_without_an_indexable_word_is_refused(texts):
    """Letters, stop words, single characters: bm25s failed with `max() arg is an empty
    sequence` (exit 1, a traceback)."""
    from retrieval_gate.retrieval import BM25Retriever, Document

    docs = [Document(str(i), "", t) for i, t in enumerate(texts)]
    said = r"has an indexable word.* all its 2 document\(s\) hold \(the first: id '0'"
    with pytest.raises(InputError, match=r"no document of the corpus \(--corpus\) " + said):
        BM25Retriever(docs)
    assert BM25Retriever([*docs, Document("w", "", "Paris")]).retrieve([]) == []


def test_rag_refuses_a_corpus_of_letters_before_the_engine(tmp_path, capsys, monkeypatch):
    """`rag --corpus letters.csv` ended in a traceback; now exit 2 before any engine."""
    import retrieval_gate.rag.experiment as experiment

    def no_engine(**_):
        raise AssertionError("the engine started before the corpus was checked")

    monkeypatch.setattr(experiment, "open_generator", no_engine)
    corpus = tmp_path / "letters.csv"
    corpus.write_text("id,title,text\n1,,A\n2,,B\n")
    code = main(["rag", "--modes", "always", "--limit", "1", "--corpus", str(corpus)])
    assert code == 2 and "no document of the corpus (--corpus)" in capsys.readouterr().err
