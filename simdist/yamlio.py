"""Reading YAML from users safely: ``safe_load`` only, with alias bombs refused.

PyYAML's safe loader builds no objects from tags, but anchors and aliases can still make a
small file expand into an enormous structure ("billion laughs") or a self-referencing one.
This loader counts aliases and refuses recursive ones.
"""

from __future__ import annotations

import yaml

__all__ = ["safe_load_limited", "MAX_ALIASES"]

MAX_ALIASES = 256


class _LimitedLoader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0
        self._open_anchors: set[str] = set()

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self._aliases += 1
            if event.anchor in self._open_anchors:
                raise yaml.composer.ComposerError(None, None, f"recursive alias *{event.anchor}", event.start_mark)
            if self._aliases > MAX_ALIASES:
                raise yaml.composer.ComposerError(None, None, f"more than {MAX_ALIASES} aliases", event.start_mark)
            return super().compose_node(parent, index)
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        if anchor is None:
            return super().compose_node(parent, index)
        self._open_anchors.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._open_anchors.discard(anchor)


def safe_load_limited(text: str):
    """``yaml.safe_load`` that refuses recursive aliases and more than MAX_ALIASES aliases."""
    return yaml.load(text, Loader=_LimitedLoader)  # noqa: S506 - a SafeLoader subclass
