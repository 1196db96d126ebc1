"""YAML a user writes (training configs, `--set` values, strategies files), read strictly: a
key given twice in one mapping is an error naming the key and both lines. PyYAML keeps the
last one silently, so a config with two `trainer:` sections trained with the second alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class _StrictLoader(yaml.SafeLoader):
    """`yaml.safe_load`, except for a key repeated in one mapping."""


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
            value = node.value if len(node.value) <= 40 else f"{node.value[:40]}..."
            raise yaml.constructor.ConstructorError(
                None, None, f"{value!r} cannot be read ({str(e).split(';')[0]})", node.start_mark
            ) from None

    return run


for _kind in ("int", "timestamp"):  # the SafeLoader's scalars that call int() or datetime()
    _tag = f"tag:yaml.org,2002:{_kind}"
    _StrictLoader.add_constructor(_tag, _guarded(_StrictLoader.yaml_constructors[_tag]))


def load_yaml(text: str) -> Any:
    """The parsed document, as `yaml.safe_load` gives it; a repeated key, or nesting deeper than
    PyYAML's recursive composer goes (`[[[[...`), is a `yaml.YAMLError`."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506  (a SafeLoader)
    except RecursionError:
        raise yaml.YAMLError("nested too deeply to read: more than about 1,000 levels") from None


def read_yaml(path: Path) -> Any:
    """`load_yaml` of a file; one that is not UTF-8 text is a `yaml.YAMLError` too (it was a
    UnicodeDecodeError, an internal error, for a config saved as Latin-1 or damaged)."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise yaml.YAMLError(f"not UTF-8 text (byte {e.start}); save the file as UTF-8") from None
    return load_yaml(text)
