"""Label files: one JSON object a line keyed by question id (never the question text), written
as results arrive so an interrupted run resumes where it stopped, plus a `.meta.json` sidecar
with provenance (policy, generator and checksum, prompt id, decoding, date, version).

Row fields: `id`, `label` (1 = needs retrieval, 0 = does not, null = dropped by the policy),
then whatever the policy records (prediction, match, mean_logprob, ...), and in the rows of a
resumable run or an outcomes import `question_sha` (a hash of the question's text and gold
answers) and `text_sha` (the text alone): a resume, or a train, evaluate or tune, over
questions changed under the same ids is refused (`resume_over`, `check_made_for`; reading
compares the text alone where the questions carry no gold answers, or the labels were made
without any); rows without one (written before it) are not checked. Fields are added, never
renamed, so older files load: e.g. `token_logprobs` (the answer's token log-probabilities,
`labels.logprobs`) is optional, absent from files written before it. There is no format version
field; the sidecar's `package_version` says which release wrote a file. A whole last row
without its newline (a hand-written file) is a row; a half-written one (an interrupted run) is
not read, with a note, and the next append cuts it off."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..fileio import content_id, not_a_file, regular_target, write_json, write_text
from ..questions import Question, row_id
from ..strict_rows import RepeatedKeyError, loads, parse_json
from ..text_bytes import not_utf8

log = logging.getLogger(__name__)

LABELS_ENV = "RETRIEVAL_GATE_LABELS"
# The committed label files: $RETRIEVAL_GATE_LABELS, else data/labels under the working
# directory (the repository root); commands that read or write labels also take a flag.
LABELS_DIR = Path(os.environ.get(LABELS_ENV) or Path.cwd() / "data" / "labels")


def read_meta(mp: Path) -> dict[str, Any]:
    """A label file's provenance (its `.meta.json`), refused by name when damaged."""
    try:
        meta = loads(mp.read_text(encoding="utf-8-sig"))  # a byte-order mark: an editor's
    except ValueError:  # not JSON or UTF-8, nested too deeply, a key twice
        raise DataError("provenance file is not valid JSON (damaged: re-run the `label` "
                        "command that wrote it)", mp) from None  # fmt: skip
    if not isinstance(meta, dict):
        raise DataError("provenance file must hold a JSON object", mp)
    return meta


def meta_path(path: Path) -> Path:
    """`<name>.meta.json` beside `<name>.jsonl`. Writers take only names that end in `.jsonl`
    (`require_ours`): `<name>` and `<name>.jsonl` would share one provenance file."""
    return path.with_name(path.name.removesuffix(".jsonl") + ".meta.json")


LABEL_VALUES = (0, 1, None)
# half-written last lines already noted in this process: a command reads its label file
# several times (its checksum, its labels, its outcomes), and said it as often
_NOTED_PARTIAL: set[tuple[str, int, bytes]] = set()
# What a reader takes from a row: two rows of one id must agree on them (two label files
# joined with `cat` whose runs labelled a question differently name no label of it)
TARGET_FIELDS = ("label", "target", "correct", "cost")

# Provenance fields a resumed file must share with the run that started it: rows made under
# another policy, generator, backend, criterion, prompt or documents (retriever, corpus, k) or
# another policy option would mix while the `.meta.json` claims one.
RESUME_KEYS = ("policy", "generator", "backend", "criterion", "prompt_id", "prompt_ids",
               "retriever", "corpus_sha256", "top_k", "neither_label", "evaluator", "t_ans",
               "t_com")  # fmt: skip


def check_resume(path: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Refuses to continue a label file made under other settings (see RESUME_KEYS) or other
    weights of the same generator (a model folder changed in place, a server's model name now
    serving other weights)."""
    _check_weights(path, old.get("generator_checksum"), new.get("generator_checksum"))
    _check_root(path, old.get("generator_root"), new.get("generator_root"))
    for key in RESUME_KEYS:
        if key == "backend" and not other_engine(old.get(key), new.get(key)):
            continue  # compared by engine (vLLM in-process or as Ray actors answers alike)
        if key in old and key in new and old[key] != new[key]:
            fix = (
                "pass --relabel to recompute its labels under the new --criterion"
                if key == "criterion"
                else "pass another --out (or move the file) to label under the new settings"
            )
            raise DataError(
                f"this label file was made with {key}={old[key]!r}, not {new[key]!r}; "
                f"resuming would mix rows under one provenance: {fix}",
                path,
            )


def other_weights(old: str | None, new: str | None) -> bool:
    """Two generator checksums name other weights. A server's identity names its URL, which a
    restarted or moved server changes: only weights checksums (a model folder's) differ."""
    if not old or not new or old == new:
        return False
    return not (old.startswith("remote:") or new.startswith("remote:"))


# A recorded backend -> the engine that answered: vLLM in-process or as Ray actors answers
# alike, and so does one server asked directly or through Ray; vLLM and transformers do not.
_ENGINES = {"ray:vllm-engine": "vllm", "ray:openai-server": "server", "RemoteGenerator": "server"}


def other_engine(old: Any, new: Any) -> bool:
    """Two recorded backends name engines that answer otherwise (unknown ones, a file from
    before backends were recorded: not compared)."""
    if not old or not new or "?" in (old, new):
        return False
    return _ENGINES.get(str(old), str(old)) != _ENGINES.get(str(new), str(new))


def _check_weights(path: Path, old: str | None, new: str | None) -> None:
    if not old or not new or not other_weights(old, new):
        return
    raise DataError(f"this label file was made with other weights of its generator (checksum "
                    f"{old[:12]}..., now {new[:12]}...): resuming would mix their answers under "
                    "one provenance; pass another --out (or move the file) to label with these "
                    "weights", path)  # fmt: skip


def _check_root(path: Path, old: str | None, new: str | None) -> None:
    """A server's weights as it lists them (vLLM's `root`), where both runs recorded one: the
    URL may change between runs, the weights behind the model's name may not."""
    if not old or not new or old == new:
        return
    raise DataError(f"this label file was made with the generator server serving {old!r} under "
                    f"that model name; it now serves {new!r}: resuming would mix their answers "
                    "under one provenance; pass another --out (or move the file) to label with "
                    "these weights, or serve the first ones again", path)  # fmt: skip


def question_sha(q: Question) -> str:
    """What a row's label was made from: the question's text and its gold answers."""
    return content_id(q.text, *sorted(q.answers))


def text_sha(q: Question) -> str:
    """The question's text alone: `question_sha` of the question without gold answers."""
    return content_id(q.text)


# A row's stamp as read: its question_sha and its text_sha (None in rows written before it)
Stamp = tuple[str, str | None]


class LabelFile:
    """A label file on disk: read what is there, append new rows, record provenance."""

    def __init__(
        self,
        path: str | Path,
        replacing: bool = False,
        extra_meta: dict[str, Any] | None = None,
        flag: str = "--out",
    ):
        self.path = Path(path)
        self.flag = flag  # the flag that named the file: what a refusal tells to change
        # recorded in every provenance write (the questions file a run labels: `train` names it)
        self.extra_meta = extra_meta or {}
        # True when every row is rewritten (relabelling, rebuilt policies): the provenance may
        # then change, as no row of the old settings survives.
        self.replacing = replacing
        self.rows: dict[str, dict[str, Any]] = {}
        self._partial_at: int | None = None  # byte offset of a half-written last line
        self._unterminated = False  # a whole last row without its newline (a user's file)
        self._shas: dict[str, str] = {}  # id -> question_sha, stamped on appended rows
        if self.path.is_file():
            self._read()

    def _read(self) -> None:
        try:
            with open(self.path, "rb") as f:
                lines = f.readlines()
        except OSError as e:
            raise DataError(f"cannot read the label file ({e.strerror})", self.path) from None
        if len(lines) == 1 and b"\r" in lines[0].rstrip(b"\r\n"):  # read as one half-written row
            raise DataError("rows end in a lone carriage return (old Mac line endings), not "
                            "a newline: convert them (tr '\\r' '\\n' < FILE > NEW)",
                            self.path)  # fmt: skip
        offset, first_line = 0, {}
        for lineno, raw in enumerate(lines, start=1):
            start, offset = offset, offset + len(raw)
            if lineno == len(lines) and not raw.endswith(b"\n") and raw.startswith(b"{"):
                if not _whole_object(raw):
                    # What an interrupted run leaves (or a run still writing): skipped; the
                    # next `append` cuts it off, so the resumed run redoes that id cleanly.
                    noted = (str(self.path.resolve()), start, raw)
                    if noted not in _NOTED_PARTIAL:
                        _NOTED_PARTIAL.add(noted)
                        log.info(f"{self.path}: line {lineno} is half-written (an interrupted "
                                 "labelling run?): not read; `label` redoes it")  # fmt: skip
                    self._partial_at = start
                    break
                self._unterminated = True  # a whole row, only its newline missing: kept
            if not raw.strip():
                continue
            try:
                row = loads(raw)
            except RepeatedKeyError as e:
                raise DataError(str(e), self.path, lineno) from None
            except UnicodeDecodeError as e:
                raise DataError(not_utf8(raw, e.start, self.path), self.path, lineno) from None
            except json.JSONDecodeError as e:  # a CSV's header, an integer too long, ...
                raise DataError(f"malformed JSON ({e.msg}): a label file holds one JSON object "
                                'per line, such as {"id": "q1", "label": 1}', self.path,
                                lineno) from None  # fmt: skip
            if not isinstance(row, dict) or "id" not in row or "label" not in row:
                raise DataError("label row needs 'id' and 'label' fields", self.path, lineno)
            if row["label"] not in LABEL_VALUES or isinstance(row["label"], bool):
                raise DataError(
                    f"label={row['label']!r}: a label is 1 (needs retrieval), 0 (does not) or "
                    "null (dropped by the policy)",
                    self.path,
                    lineno,
                )
            rid = row_id(row["id"], self.path, lineno)
            if rid in self.rows:
                self._check_repeat(self.rows[rid], row, first_line[rid], lineno)
            first_line.setdefault(rid, lineno)
            self.rows[rid] = row

    def _check_repeat(self, first: dict, row: dict, first_line: int, lineno: int) -> None:
        """A second row of an id: kept (the last row is read) when it labels the question as
        the first did, else refused: which of the two is the label?"""
        differ = [k for k in TARGET_FIELDS if first.get(k) != row.get(k)]
        if differ:
            raise DataError(
                f"id {row['id']!r} is here twice, on lines {first_line} and {lineno}, with "
                f"another {differ[0]} ({first.get(differ[0])!r}, then {row.get(differ[0])!r}): "
                "keep the row of the run you trust and delete the other",
                self.path,
                lineno,
            )

    @property
    def meta(self) -> dict[str, Any]:
        mp = meta_path(self.path)
        if not mp.exists():
            raise DataError(f"label file has no provenance file {mp.name} beside it", self.path)
        return read_meta(mp)

    def require_ours(self) -> None:
        require_ours(self.path, self.flag)

    def meta_binds(self) -> bool:
        """Whether its `.meta.json` binds a resuming run to its settings: not when no row was
        written under it (a run stopped before its first chunk refused every other setting,
        naming a file that did not exist); this run's provenance then replaces it, said."""
        if not meta_path(self.path).exists():
            return False
        if not self.rows:
            log.info(f"{meta_path(self.path)}: the provenance of a run that wrote no row "
                     "(stopped before its first chunk); replaced by this run's")  # fmt: skip
            self.replacing = True
            return False
        return True

    def write_meta(self, meta: dict[str, Any]) -> None:
        self.require_ours()
        meta = {**meta, **self.extra_meta}
        if meta_path(self.path).exists() and not self.replacing:
            check_resume(self.path, self.meta, meta)
        write_json(meta_path(self.path), meta)

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        """Appends rows and flushes them to disk at once (resumability)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._partial_at is not None:  # only the writer repairs (readers never truncate)
                self.require_ours()  # and only in a file a label run made
                with open(self.path, "r+b") as f:
                    f.truncate(self._partial_at)
                self._partial_at = None
            with open(self.path, "a", encoding="utf-8") as f:
                if self._unterminated:  # end the kept last row before the new ones
                    f.write("\n")
                    self._unterminated = False
                for row in rows:
                    row = self._stamped(row)
                    f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
                    self.rows[str(row["id"])] = row
                f.flush()
        except OSError as e:
            raise DataError(f"cannot write the label file ({e.strerror})", self.path) from None

    def rewrite(self, rows: Iterable[dict[str, Any]]) -> None:
        """Replaces the whole file atomically (temp file + rename; a crash keeps the old one)."""
        self.require_ours()
        rows = [self._stamped(r) for r in rows]
        text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)
        write_text(self.path, text)
        self.rows = {str(r["id"]): r for r in rows}
        self._partial_at, self._unterminated = None, False

    def resume_over(self, questions: Iterable[Question]) -> None:
        """Before a run appends rows for `questions`: the rows already here must be of these
        very questions (their `question_sha`), else a DataError; the rows appended next carry
        theirs. An edited questions file that kept its ids (or another one numbering its rows
        1, 2, ...) was "resumed": its changed questions kept the labels of the old ones."""
        questions = list(questions)
        self.made_for(questions)
        if changed := _made_for_others(stamped(self.rows), questions, exact=True):
            n = len(changed)
            raise DataError(
                f"{n} question{'s' * (n != 1)} labelled here now read otherwise under the same "
                f"id (id {changed[0]!r}: its text or gold answers changed since), so their rows "
                "would stand for questions they were not made for: pass another --out (or "
                "--labels-dir), or remove those rows",
                self.path,
            )

    def made_for(self, questions: Iterable[Question]) -> None:
        """The rows written next (appended or rewritten) carry these questions'
        `question_sha` and `text_sha`: a train, evaluate or tune over questions edited since
        is refused."""
        self._shas = {q.id: {"question_sha": question_sha(q), "text_sha": text_sha(q)}
                      for q in questions}  # fmt: skip

    def _stamped(self, row: dict[str, Any]) -> dict[str, Any]:
        shas = self._shas.get(str(row["id"]))
        return row if shas is None else {**row, **shas}

    def done_ids(self) -> set[str]:
        return set(self.rows)

    def labels(self) -> dict[str, int]:
        """id -> label for the rows the policy kept (label not null)."""
        return {i: int(r["label"]) for i, r in self.rows.items() if r["label"] is not None}


def stamped(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, Stamp]:
    """id -> the stamp of the rows that carry one (rows written before it do not)."""
    return {i: (r["question_sha"], r["text_sha"] if isinstance(r.get("text_sha"), str) else None)
            for i, r in rows.items() if isinstance(r.get("question_sha"), str)}  # fmt: skip


def check_made_for(
    shas: Mapping[str, Stamp], questions: Iterable[Question], path: str | Path
) -> None:
    """Before training, evaluating or tuning on a label file's rows (`shas`: `stamped` of the
    rows as read) over `questions`: the stamped rows must be of these very questions (rows of
    a questions file edited since under the same ids were read as the new questions' labels)."""
    if changed := _made_for_others(shas, questions):
        n = len(changed)
        raise DataError(
            f"{n} row{'s' * (n != 1)} here {'were' if n != 1 else 'was'} labelled for other "
            f"questions under the same id{'s' * (n != 1)} (id {changed[0]!r}: its text or "
            "gold answers differ from the question given): label these questions again "
            "(`retrieval-gate label` with another --out), or read the questions these "
            "labels were made for",
            path,
        )


def made_for_others(
    recorded: Mapping[str, Stamp], questions: Iterable[Question], exact: bool = False
) -> list[str]:
    """The ids of `questions` whose stamped row (`stamped`) was made for another question
    (`exact`: another text or other gold answers, as a labelling run compares them)."""
    return _made_for_others(recorded, questions, exact)


def _made_for_others(
    recorded: Mapping[str, Stamp], questions: Iterable[Question], exact: bool = False
) -> list[str]:
    """Ids whose row was made for another question: another text, or other gold answers.
    `exact` (a labelling run resuming: it judges answers against the gold ones) compares both
    always; reading labels compares the text alone where a side has no gold answers (labels
    made without them, or a questions file that leaves them out). Unstamped rows pass."""
    return [
        q.id
        for q in questions
        if (stamp := recorded.get(q.id)) is not None and not _same_question(stamp, q, exact)
    ]


def _same_question(stamp: Stamp, q: Question, exact: bool) -> bool:
    sha, text = stamp
    if sha == question_sha(q):
        return True
    if exact:
        return False
    plain = text_sha(q)
    return sha == plain or (text == plain and not q.answers)


def _whole_object(raw: bytes) -> bool:
    try:
        return isinstance(parse_json(raw), dict)  # whole; a repeated key is refused when read
    except ValueError:  # not JSON or UTF-8, nested too deeply
        return False


def missing(path: Path, what: str = "label file", fix: str | None = None) -> str:
    """Why `what` at `path` cannot be read: not there (with `not_found`'s hint), or there but
    a folder, device or pipe (reading /dev/zero or a FIFO would never end)."""
    if path.exists() and (kind := not_a_file(path)):  # a link to nothing: not found
        return f"{what} is {kind}, not a regular file: pass the file's path{_inside(path)}"
    return f"{what} not found; {not_found(path) if fix is None else not_found(path, fix)}"


def _inside(folder: Path) -> str:
    """The hint naming the .jsonl files a folder holds (a labelling run's folder, given where
    its closed-book.jsonl goes)."""
    try:
        files = sorted(p.name for p in folder.glob("*.jsonl") if p.is_file())
    except OSError:  # not a folder, or not readable: nothing to name
        return ""
    return f", e.g. {folder / files[0]} (it holds {', '.join(files[:4])})" if files else ""


def not_found(path: Path, fix: str = "run `retrieval-gate label` first or pass a path") -> str:
    """What to say of a label file that is not there: the file that differs in case only,
    where there is one (`label` writes its generator's folder in lower case: --generator
    MyLLM -> labels/myllm), else `fix`."""
    here, parts = Path(path.anchor or "."), path.parts[1:] if path.anchor else path.parts
    for part in parts:  # each level's one entry named alike, whatever the case
        alike = (
            [c for c in here.iterdir() if c.name.lower() == part.lower()] if here.is_dir() else []
        )
        if len(alike) != 1:
            return fix
        here = alike[0]
    if not here.is_file() or here == path:
        return fix
    return f"did you mean {here}? (`label` writes the generator's folder in lower case)"


def read_labels(path: str | Path) -> dict[str, int]:
    """id -> label of a label file; a clear error when it is missing or empty."""
    return read_label_file(path).labels()


def require_ours(path: Path, flag: str = "--out") -> None:
    """Writers change only files a label run made: an existing non-empty file without its
    `.meta.json` (written before the first row) is the user's, never truncated; and only
    files named `*.jsonl`, so no two label files share a sidecar (`meta_path`). Checked before
    the file is read, so a user's text file is named as such, not as malformed rows. `flag`:
    what picks another file (an import into a folder: `--labels-dir`)."""
    if path.is_dir():
        if flag == "--out":
            raise DataError("is a folder; --out needs a .jsonl file path", path)
        raise DataError(f"is a folder where the label file goes: pass another {flag} or move "
                        "the folder", path)  # fmt: skip
    regular_target(path)  # not a device or pipe: rewrite() would replace it
    mp = meta_path(path)
    if mp.exists() and not (mp.is_file() and isinstance(read_meta(mp).get("policy"), str)):
        # every label writer records its policy: without one, a file of the user's name
        raise DataError(f"{mp.name} beside it is not a label file's provenance (no "
                        f"'policy'); refusing to replace it: pass another {flag} or move it",
                        path)  # fmt: skip
    if path.is_file() and path.stat().st_size and not mp.exists():
        raise DataError(
            f"exists and is not a retrieval-gate label file (no {mp.name} beside it); "
            f"refusing to change it: pass another {flag} or move the file",
            path,
        )
    if not path.name.endswith(".jsonl"):
        # its sidecars are named from the name less `.jsonl`: `l` would write the provenance
        # (and the list of failed questions) of `l.jsonl`
        raise DataError(f"a label file's name must end in .jsonl: {meta_path(path).name}, its "
                        f"provenance, would also be {path.name}.jsonl's; pass a {flag} that "
                        "ends in .jsonl (a label file an earlier release made under this name: "
                        "add .jsonl to its name, its provenance stays beside it)",
                        path)  # fmt: skip


def read_label_file(path: str | Path) -> LabelFile:
    """A label file to read labels from: a clear error when it is missing or has none."""
    path = Path(path)
    if not path.is_file():
        raise DataError(missing(path), path)
    lf = LabelFile(path)
    if not lf.labels():
        raise DataError("label file has no labelled rows", path)
    return lf
