"""Build step: copy the shipped top-level files into the wheel's package as ``simdist/_shipped/``.

The repository keeps compute profiles, platform files and example scenarios in top-level
folders (``calibration/``, ``scenarios/``) that tests, docs and benchmarks use by path; a
wheel holds only packages, so the build copies them in (what: ``simdist.resources.SHIPPED``;
how they are found at run time: ``simdist/resources.py``). An editable install copies
nothing: the package reads the top-level folders of its checkout in place. All other
metadata lives in ``pyproject.toml``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _resources_module():
    """``simdist/resources.py`` loaded on its own (standard library only; the package's
    dependencies need not be installed at build time)."""
    spec = importlib.util.spec_from_file_location("_simdist_resources", HERE / "simdist" / "resources.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shipped_sources() -> list[tuple[Path, str]]:
    """(source file, shipped name) for every file of ``SHIPPED``; a missing folder is an error
    (a wheel without its profiles would fail at the first run, not at the build)."""
    resources = _resources_module()
    files = []
    for folder, pattern in resources.SHIPPED:
        if not (HERE / folder).is_dir():
            raise FileNotFoundError(f"{HERE / folder}: folder to ship is missing (is MANIFEST.in up to date?)")
        for path in sorted((HERE / folder).glob(pattern)):
            if path.is_file():
                files.append((path, path.relative_to(HERE).as_posix()))
    return files


class BuildPyWithShipped(build_py):
    """``build_py`` that also copies the shipped files under ``<build>/simdist/_shipped``."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # the checkout is read in place (simdist.resources.shipped_root)
            return
        for target, source in self._shipped_mapping().items():
            self.mkpath(str(Path(target).parent))
            self.copy_file(source, target)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        return outputs if self.editable_mode else outputs + list(self._shipped_mapping())

    def _shipped_mapping(self) -> dict[str, str]:
        resources = _resources_module()
        base = Path(self.build_lib) / "simdist" / resources.PACKAGED_FOLDER
        return {str(base / name): str(source) for source, name in _shipped_sources()}


setup(cmdclass={"build_py": BuildPyWithShipped})
