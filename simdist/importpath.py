"""Objects named by ``"package.module:attribute"``: a user's model factory or algorithm class.

Importing a module runs its code, so callers import only where the scenario allows it
(``workload.allow_code_import``). A bad path, a module that fails to import or a missing
attribute is an :class:`~simdist.errors.InputError` naming the path.
"""

from __future__ import annotations

import importlib

from .errors import InputError

__all__ = ["import_object"]


def import_object(path: str, what: str) -> object:
    """The object at ``"package.module:attr"`` (``attr`` may be dotted); ``what`` names it in errors."""
    module_name, sep, attr = str(path).partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{what} import path must look like 'package.module:{'factory' if what == 'model' else 'Name'}'"
                         f", got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise InputError(f"cannot import module {module_name!r} for {what} {path!r}: {err}") from None
    target: object = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise InputError(f"module {module_name!r} has no attribute {attr!r} ({what} {path!r})")
        target = getattr(target, part)
    return target
