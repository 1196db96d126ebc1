"""YAML a user writes (training configs, `--set` values, strategies files), read strictly: a
key given twice in one mapping is an error naming the key and both lines. PyYAML keeps the
last one silently, so a config with two `trainer:` sections trained with the second alone.
A document is refused, before anything uses it, when its aliases expand past a million values
or hold themselves; nesting past 100 levels and a string escaping a lone surrogate are refused
as they are read. `misreads` lists the plain scalars YAML 1.1 reads as something other than
what was likely meant (`010` as 8, `1:30` as 90, `yes` as true), for a reader to refuse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from .errors import clipped
from .text_bytes import not_utf8, nul_byte

# A document's values, each alias counted as what it expands to: configs and strategies files
# hold hundreds. Aliases of aliases (a "billion laughs" document, a few hundred bytes) expand
# to billions, which a deepcopy, a checksum or the repr in an error message then builds.
MAX_VALUES = 1_000_000
# Levels of nesting a document may have (configs have a few). PyYAML's scanner does work that
# grows with the square of the flow nesting it has reached (it looks up to 1,024 characters
# ahead for a key), so `a: [[[[...` took 2.6 s to reach Python's recursion limit (~490
# levels) before it was refused; the scanner and the composer now stop here: 6 ms.
MAX_DEPTH = 100
_TOO_DEEP = f"nested too deeply to read: more than {MAX_DEPTH} levels"


class _StrictLoader(yaml.SafeLoader):
    """`yaml.safe_load`, except for a key repeated in one mapping, aliases that expand past
    `MAX_VALUES` values, a value that holds itself (`&a [*a]`), and nesting past `MAX_DEPTH`."""

    depth = 0

    def fetch_flow_collection_start(self, token_class: type) -> None:
        if self.flow_level >= MAX_DEPTH:  # `[` or `{` inside as many
            raise yaml.scanner.ScannerError(None, None, _TOO_DEEP, self.get_mark())
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.depth += 1  # block and flow nesting alike
        try:
            if self.depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, _TOO_DEEP,
                                                  self.peek_event().start_mark)  # fmt: skip
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {}, set())
        return node


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """The values under `node` with every alias expanded (`sizes`: each node's, so a shared one
    is walked once); a cycle or a size past `MAX_VALUES` is a `yaml.YAMLError`."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:  # json.dumps and deepcopy of such a value never end well
        raise yaml.composer.ComposerError(
            None, None, "an alias refers to a value that holds it (a cycle): write it out",
            node.start_mark,
        )  # fmt: skip
    open_nodes.add(key)
    children = node.value if isinstance(node, yaml.SequenceNode) else (
        [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])  # fmt: skip
    size = 1 + sum(_expanded_size(child, sizes, open_nodes) for child in children)
    if size > MAX_VALUES:
        raise yaml.composer.ComposerError(
            None, None, f"aliases expand to more than {MAX_VALUES:,} values (aliases of "
            "aliases: a 'billion laughs' document); write the values out", node.start_mark,
        )  # fmt: skip
    open_nodes.discard(key)
    sizes[key] = size
    return size


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    lines: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may override: no repeat
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            if key in lines:
                where = f"line {line}" if lines[key] == line else f"lines {lines[key]} and {line}"
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice ({where}); keep one",
                    key_node.start_mark,
                )  # fmt: skip
            lines[key] = line
        except TypeError:  # an unhashable key: PyYAML's own error says so
            break
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _guarded(construct: Any) -> Any:
    """A scalar constructor whose `ValueError` (an integer past Python's 4,300 digits, a date
    such as 2001-13-45) is a `yaml.YAMLError` naming the value and its line, not a traceback."""

    def run(loader: _StrictLoader, node: yaml.ScalarNode) -> Any:
        try:
            return construct(loader, node)
        except ValueError as e:
            why = f"{clipped(node.value, 20)!r} cannot be read ({str(e).split(';')[0]})"
            raise yaml.constructor.ConstructorError(None, None, why, node.start_mark) from None

    return run


def _text(loader: _StrictLoader, node: yaml.ScalarNode) -> str:
    """A string; a double-quoted one may escape a lone surrogate ("\\ud800"), which no path,
    file or tokenizer takes (a run named so was an internal error). PyYAML reads the escapes
    of a UTF-16 pair ("\\ud83d\\ude00") as two halves: they are joined, as JSON does."""
    value = loader.construct_scalar(node)
    if value.isascii():
        return value
    value = value.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        why = f"{value[e.start]!r} is a lone surrogate, not Unicode text; write it as UTF-8"
        raise yaml.constructor.ConstructorError(None, None, why, node.start_mark) from None
    return value


_StrictLoader.add_constructor("tag:yaml.org,2002:str", _text)

for _kind in ("int", "timestamp"):  # the SafeLoader's scalars that call int() or datetime()
    _tag = f"tag:yaml.org,2002:{_kind}"
    _StrictLoader.add_constructor(_tag, _guarded(_StrictLoader.yaml_constructors[_tag]))


class Misread(NamedTuple):
    """A plain scalar that YAML 1.1 reads otherwise than most people (and YAML 1.2) do."""

    path: tuple[Any, ...]  # the keys (and list indexes) from the document's top
    text: str  # as written
    value: Any  # as read
    kind: str  # "an octal number", "a hex number", "a binary number", "a base-60 number",
    # "a boolean"
    line: int

    def where(self, prefix: tuple[Any, ...] = ()) -> str:
        """Its place as a message writes it: `strategies[0].cost`."""
        parts = (*prefix, *self.path)
        return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")

    def read_as(self, where: str) -> str:
        """`WHERE: YAML 1.1 reads TEXT as KIND (VALUE)`, a message's first half."""
        return f"{where or 'the value'}: YAML 1.1 reads {self.text} as {self.kind} ({self.value})"

    def decimal(self) -> Any:
        """The number most people read in the text: `010` is 10 (to YAML 1.1, 8)."""
        return int(self.text.replace("_", "")) if self.kind == "an octal number" else self.value


def _yaml11_kind(node: yaml.ScalarNode) -> str | None:
    """What YAML 1.1 alone reads a plain scalar as: `010` octal (8), `0x3` hex, `0b11` binary,
    `1:30` base 60 (90), `yes`/`no`/`on`/`off` a boolean; None for anything else."""
    if node.style is not None:  # quoted or a block scalar: text, as written
        return None
    kind = node.tag.rsplit(":", 1)[-1]
    text = node.value.lstrip("+-")
    if kind == "bool":
        return None if text.lower() in ("true", "false") else "a boolean"
    if kind not in ("int", "float"):
        return None
    if ":" in text:
        return "a base-60 number"
    if kind == "int" and text[:2] in ("0x", "0b"):
        return "a hex number" if text[1] == "x" else "a binary number"
    return "an octal number" if kind == "int" and len(text) > 1 and text[0] == "0" else None


def yaml11_misreads(node: yaml.Node | None) -> Iterator[Misread]:
    """The scalars under `node` (a composed document) that YAML 1.1 misreads; a value an
    alias repeats is named at its first place. Mappings merged in (`<<: *x`) keep the path."""
    stack: list[tuple[yaml.Node | None, tuple[Any, ...]]] = [(node, ())]
    seen: set[int] = set()
    while stack:
        item, path = stack.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, yaml.ScalarNode):
            if (kind := _yaml11_kind(item)) is not None:
                value = yaml.safe_load(item.value)  # the plain scalar, read alone
                yield Misread(path, item.value, value, kind, item.start_mark.line + 1)
        elif isinstance(item, yaml.SequenceNode):
            stack += [(n, (*path, i)) for i, n in reversed(list(enumerate(item.value)))]
        elif isinstance(item, yaml.MappingNode):
            for key, value in reversed(item.value):
                merged = key.tag == "tag:yaml.org,2002:merge"
                stack.append((value, path if merged else (*path, key.value)))


def load_yaml(text: str, misreads: list[Misread] | None = None) -> Any:
    """The parsed document, as `yaml.safe_load` gives it; a repeated key, nesting past
    `MAX_DEPTH` (`[[[[...`), aliases past `MAX_VALUES` or holding their own value, or a scalar
    Python cannot convert, is a `yaml.YAMLError`. `misreads`, when given, is extended with the
    scalars YAML 1.1 misreads (`yaml11_misreads`), for the caller to judge by key."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        value = None if node is None else loader.construct_document(node)
        if misreads is not None:
            misreads.extend(yaml11_misreads(node))
        return value
    except RecursionError:
        raise yaml.YAMLError("nested too deeply to read") from None  # past Python's stack
    finally:
        loader.dispose()


def read_yaml(path: Path, misreads: list[Misread] | None = None) -> Any:
    """`load_yaml` of a file; one that is not UTF-8 text is a `yaml.YAMLError` too (it was a
    UnicodeDecodeError, an internal error, for a config saved as Latin-1 or damaged)."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise yaml.YAMLError(not_utf8(data, e.start, path)) from None
    if why := nul_byte(data, path):  # PyYAML said "unacceptable character #x0000" alone
        raise yaml.YAMLError(why)
    return load_yaml(text, misreads)
