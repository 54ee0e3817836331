"""The house stays easy to read: every module at most 400 lines, every algorithm module at most 300.

A module that outgrows its limit holds more than one responsibility; split it by responsibility
(docs/architecture.md lists where each belongs) rather than raising the limit.
"""

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "simdist"
MODULE_LIMIT, ALGORITHM_LIMIT = 400, 300


def _limit(path: Path) -> int:
    return ALGORITHM_LIMIT if path.parent.name == "algorithms" else MODULE_LIMIT


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_package_has_modules_to_check():
    assert len(MODULES) > 50 and any(p.parent.name == "algorithms" for p in MODULES)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_a_module_stays_within_its_line_limit(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= _limit(path), (f"{path.relative_to(PACKAGE.parent)} has {lines} lines, over its limit of "
                                   f"{_limit(path)}: split it by responsibility")
