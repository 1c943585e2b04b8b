"""YAML as Herald reads what people write to configure it (``config.yaml``, a ``config set`` value, a
SKILL.md's front matter): safe, and a key given twice in one mapping is an error naming both lines.

PyYAML keeps the last of two equal keys without a word, so a second ``model:`` section further down a
long file silently replaced the first; the YAML spec says keys are unique, and the person who wrote
both meant one of them.
"""

from __future__ import annotations

from typing import Any

import yaml

MERGE = "tag:yaml.org,2002:merge"


class DuplicateKey(yaml.YAMLError):
    """A mapping names one key twice; the message names the key (dotted from the top) and both lines."""

    def __init__(self, key: str, first_line: int, line: int) -> None:
        where = f"lines {first_line} and {line}" if line != first_line else f"both on line {line}"
        super().__init__(f"the key {key} is given twice ({where}); keep one of them")
        self.key = key
        self.first_line = first_line
        self.line = line


def load_yaml(text: str, *, first_line: int = 1) -> Any:
    """The plain data of ``text`` (``yaml.safe_load``), refusing a key given twice in a mapping with
    :class:`DuplicateKey`. ``first_line``: the number of the text's first line in its file (a front
    matter starts on line 2), so the lines named are the file's."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicates(node, (), first_line - 1, set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _refuse_duplicates(node: yaml.Node, path: tuple[str, ...], offset: int, walked: set[int]) -> None:
    """Walk ``node`` (the composed document, before any value is built) and raise on the first key a
    mapping holds twice. Keys are compared as written with their resolved tag, so ``1`` and ``"1"``
    are two keys, as they are once loaded; merge keys (``<<``) are YAML's own overriding, not duplicates.
    A node reached again through an alias is walked once (``walked``): aliases may nest or recurse."""
    if id(node) in walked:
        return
    walked.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == MERGE:
                _refuse_duplicates(value, path, offset, walked)
                continue
            line = key.start_mark.line + 1 + offset
            if (key.tag, key.value) in seen:
                raise DuplicateKey(".".join((*path, key.value)), seen[key.tag, key.value], line)
            seen[key.tag, key.value] = line
            _refuse_duplicates(value, (*path, key.value), offset, walked)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _refuse_duplicates(item, (*path[:-1], f"{path[-1] if path else ''}[{index}]"), offset, walked)
