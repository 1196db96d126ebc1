"""README.md and docs/*.md as the docs tests read them (tests/test_docs.py).

- A fenced block (```python, ```bash, ```console or an untagged ``` with `$ ` lines) is
  preceded by a marker that says whether the suite runs it:
      <!-- test: run -->            run it (Python: exec; shell: each command in-process)
      <!-- test: run, output -->    run it and compare the output the block shows
      <!-- not run: REASON -->      not run, and why (a GPU, a server, a full training run...)
  Every Python block, and every shell block with a `retrieval-gate` command, carries one.
- Every `retrieval-gate ...` command line, in a block or in inline code, is parsed by the real
  argument parser. Inline code may leave out required flags and elide with `...`; a block's
  command is complete.

New pages (docs/*.md) are picked up by themselves."""

from __future__ import annotations

import io
import re
import shlex
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHELL = {"bash", "sh", "shell", "console", ""}
MARKER = re.compile(r"^<!--\s*(test:\s*run(?:\s*,\s*output)?|not run:\s*(?P<reason>.+?))\s*-->$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
INLINE = re.compile(r"`(retrieval-gate [^`]+)`")
CUT = {"|", "&&", "||", ";", ">", ">>", "2>&1", "&"}  # the shell's, not the command's
VERB_PLACEHOLDERS = {"VERB", "<verb>"}


def doc_files(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str | None  # the marker's text, None when the block has none

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def runs(self) -> bool:
        return bool(self.marker) and self.marker.startswith("test:")

    @property
    def checks_output(self) -> bool:
        return self.runs and "output" in str(self.marker)

    @property
    def reason(self) -> str | None:
        m = MARKER.match(f"<!-- {self.marker} -->") if self.marker else None
        return m.group("reason") if m else None

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL

    @property
    def needs_marker(self) -> bool:
        return self.lang == "python" or bool(self.is_shell and self.commands())

    def commands(self) -> list[Command]:
        return block_commands(self) if self.is_shell else []


@dataclass
class Command:
    where: str
    text: str
    argv: list[str]
    complete: bool  # a block's command (required flags enforced), not an inline mention
    output: list[str] = field(default_factory=list)  # what the block shows it printing


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start = len(m.group("indent")), i
        body = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        before = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
        marker = MARKER.match(before)
        text = "\n".join(body)
        out.append(
            Block(path, start + 1, m.group("lang"), text, marker.group(1) if marker else None)
        )
        i += 1
    return out


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(offset, line) with backslash continuations joined."""
    out: list[tuple[int, str]] = []
    pending, first = "", 0
    for n, line in enumerate(text.splitlines()):
        if not pending:
            first = n
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((first, pending + line))
        pending = ""
    if pending:
        out.append((first, pending))
    return out


def argv_of(line: str) -> list[str] | None:
    """The arguments after `retrieval-gate` (or `-m retrieval_gate.cli`), up to a shell
    operator; None when the line runs something else."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:
        return None
    for i, token in enumerate(tokens):
        if token.rstrip(")").endswith("retrieval-gate") or token == "retrieval_gate.cli":
            if i + 1 < len(tokens) and tokens[i + 1].endswith(":"):
                return None  # `retrieval-gate train: error: ...`: a message, not a command
            argv = []
            for t in tokens[i + 1 :]:
                if t in CUT:
                    break
                argv.append(t)
            return argv
    return None


def block_commands(block: Block) -> list[Command]:
    prompts = any(ln.lstrip().startswith("$ ") for ln in block.text.splitlines())
    if block.lang == "" and not prompts:
        return []  # a file's contents or an output, not commands
    lines = _logical_lines(block.text)
    out: list[Command] = []
    for n, line in lines:
        stripped = line.strip()
        if prompts and not stripped.startswith("$ "):
            if out and out[-1].where == f"{block.where}+{out[-1].where.rsplit('+', 1)[-1]}":
                pass
            if out and stripped != "":
                out[-1].output.append(line.rstrip())
            continue
        stripped = stripped.removeprefix("$ ")
        argv = argv_of(stripped)
        if argv is not None:
            out.append(Command(f"{block.where}+{n}", stripped, argv, complete=True))
    return out


def inline_commands(path: Path) -> list[Command]:
    """`retrieval-gate ...` in inline code outside fenced blocks."""
    out, fenced = [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line) or re.match(r"^\s*```\s*$", line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in INLINE.finditer(line):
            argv = argv_of(m.group(1))
            if argv is not None:
                out.append(Command(f"{path.relative_to(REPO)}:{n}", m.group(1), argv, False))
    return out


def lenient(argv: list[str]) -> list[str]:
    """Inline mentions elide: `...` dropped, `[--flag value]` unwrapped."""
    out = []
    for token in argv:
        if token == "...":
            continue
        out.append(token.lstrip("[").rstrip("]") if token != "[]" else token)
    return out


def parse_error(command: Command) -> str | None:
    """Why the real parser refuses `command` (its error text), or None when it accepts it."""
    from retrieval_gate.cli import VERBS, build_parser

    argv = command.argv if command.complete else lenient(command.argv)
    verb = next((a for a in argv if not a.startswith("-")), None)
    if verb in VERB_PLACEHOLDERS:
        return None  # `retrieval-gate -q VERB`: a pattern, not a command
    if verb is not None and verb not in VERBS:
        return f"unknown verb {verb!r}"
    parser = build_parser(argv, abbrev=False)
    if not command.complete:
        _nothing_required(parser)
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        try:
            parser.parse_args(argv)
        except SystemExit as e:
            return None if e.code == 0 else err.getvalue().strip().splitlines()[-1]
    return None


def _nothing_required(parser) -> None:
    import argparse

    for action in parser._actions:
        action.required = False if action.option_strings else action.required
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _nothing_required(sub)
