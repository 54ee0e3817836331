"""Reading YAML from users safely: the safe loader, with every way to abuse it refused.

PyYAML's safe loader builds no objects from tags, but a small file can still:

* expand into an enormous structure through anchors and aliases ("billion laughs") or refer
  to itself: aliases are counted (at most :data:`MAX_ALIASES`), the values a document stands
  for once aliases are expanded are counted (at most :data:`MAX_EXPANDED_VALUES`), and
  recursive aliases are refused;
* nest deeper than any scenario needs and exhaust the interpreter's stack: nesting is
  bounded by :data:`MAX_DEPTH`;
* repeat a key, which PyYAML silently resolves to the last value: a duplicate key is an
  error naming the key and both lines;
* hold an integer of thousands of digits (slow to convert, then refused by Python) or one
  beyond 2**53, which no field takes: both are errors at the integer.

Numbers follow YAML 1.2: ``1e-3`` and ``2E6`` are floats (PyYAML's YAML 1.1 rules read them
as strings, which a strictly typed field would then refuse). ``.inf`` and ``.nan`` still
parse as floats; the configuration models refuse non-finite numbers.

:func:`safe_load_limited` reads a document, :func:`parse_scalar` one ``--set`` value, both
with the same rules.
"""

from __future__ import annotations

import re

import yaml

__all__ = ["safe_load_limited", "parse_scalar", "MAX_ALIASES", "MAX_DEPTH", "MAX_EXPANDED_VALUES"]

MAX_ALIASES = 256
MAX_EXPANDED_VALUES = 100_000  # a scenario has a few hundred values; sweep grids a few thousand
MAX_INTEGER = 2**53  # counts, sizes and seeds all stay below; past it a float cannot tell neighbours apart
MAX_DEPTH = 32  # a scenario nests about six levels; sweep points and compare variants a few more

_YAML12_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?$")


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader that counts aliases, bounds nesting and refuses duplicate keys."""

    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> values it expands to (collections only)
        self._open_anchors: set[str] = set()

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self._aliases += 1
            if event.anchor in self._open_anchors:
                raise yaml.composer.ComposerError(None, None, f"recursive alias *{event.anchor}", event.start_mark)
            if self._aliases > MAX_ALIASES:
                raise yaml.composer.ComposerError(None, None, f"more than {MAX_ALIASES} aliases", event.start_mark)
            return super().compose_node(parent, index)
        nests = isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent))
        if nests:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep",
                                                  event.start_mark)
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open_anchors.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            if anchor is not None:
                self._open_anchors.discard(anchor)
            if nests:
                self._depth -= 1
        self._count_expanded(node, event)
        return node

    def _count_expanded(self, node, event) -> None:
        """The values ``node`` stands for once every alias in it is expanded (aliases share one
        object in memory, but every walk over the data — validation, copies, messages — visits
        each use): refused past MAX_EXPANDED_VALUES, so nine aliases of nine aliases of ... cannot
        cost a billion steps later."""
        children = node.value if isinstance(node, yaml.SequenceNode) else (
            [part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) else [])
        size = 1 + sum(self._sizes.get(id(child), 1) for child in children)
        if size > MAX_EXPANDED_VALUES:
            raise yaml.composer.ComposerError(None, None, f"expands to more than {MAX_EXPANDED_VALUES:,} values "
                                              "through aliases", event.start_mark)
        if children:
            self._sizes[id(node)] = size

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: let PyYAML report it
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {first.line + 1}); a key may appear once "
                    "per mapping", key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


    def construct_yaml_str(self, node):
        value = super().construct_yaml_str(node)
        if any("\ud800" <= ch <= "\udfff" for ch in value):  # "\udc80" escapes: not text, cannot be written
            raise yaml.constructor.ConstructorError(None, None, "a string with a lone surrogate (\\uD800-\\uDFFF) "
                                                    "is not Unicode text", node.start_mark)
        return value

    def construct_yaml_int(self, node):
        if len(node.value) > 24:  # int() of thousands of digits is refused by Python, slowly
            raise yaml.constructor.ConstructorError(None, None, f"an integer of {len(node.value)} characters",
                                                    node.start_mark)
        value = super().construct_yaml_int(node)
        if abs(value) > MAX_INTEGER:
            raise yaml.constructor.ConstructorError(
                None, None, f"integer {value} is beyond 2**53; no simdist field takes one", node.start_mark)
        return value


_LimitedLoader.add_constructor("tag:yaml.org,2002:int", _LimitedLoader.construct_yaml_int)
_LimitedLoader.add_constructor("tag:yaml.org,2002:str", _LimitedLoader.construct_yaml_str)
_LimitedLoader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789."))


def safe_load_limited(text: str):
    """Parse a YAML document under the rules above (raises :class:`yaml.YAMLError`)."""
    return yaml.load(text, Loader=_LimitedLoader)  # noqa: S506 - a SafeLoader subclass


def parse_scalar(text: str):
    """One ``--set`` value: ``64``, ``1e-3``, ``true``, ``[1, 2]``, ``{a: 1}`` or a string."""
    return safe_load_limited(text) if text.strip() else ""
