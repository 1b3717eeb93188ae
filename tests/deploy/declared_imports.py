"""Run by tests/deploy/test_package.py with the python of the venv that holds the installed
wheel (standard library only, so it needs nothing the venv may lack).

Prints one JSON object:

* ``undeclared``: each top-level package that a file of the installed ``app`` or ``workers``
  imports, anywhere in the file (a function's lazy import too), whose distribution is not one
  of dpsyn's own requirements (pyproject's ``dependencies``; an extra's do not count, and
  neither does a package that only arrives as another package's dependency), with the files
  that import it. ``dpsyn_client`` is no exception: it belongs to the ``dpsyn-client``
  distribution, which dpsyn must declare like any other;
* ``failed``: each module of ``app`` and ``workers`` that does not import, with the error's
  type and message (import errors name modules, never data).
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
import sys
from importlib import metadata
from pathlib import Path

PACKAGES = ("app", "workers")  # the wheel's own packages


def canonical(name: str) -> str:
    """A distribution name as packaging normalises it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    """The distributions dpsyn requires outside any extra."""
    names = set()
    for line in metadata.requires("dpsyn") or []:
        if re.search(r"\bextra\s*==", line):
            continue
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if match:
            names.add(canonical(match.group(1)))
    return names


def imported_tops(root: Path) -> dict[str, set[str]]:
    """Top-level names of the absolute imports in every file under ``root``."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(root.parent)))
    return found


def undeclared() -> dict[str, list[str]]:
    """Imported third-party packages that no declared distribution provides."""
    owners = metadata.packages_distributions()
    allowed = declared()
    out: dict[str, list[str]] = {}
    for package in PACKAGES:
        root = Path(importlib.import_module(package).__file__ or "").parent
        for top, files in imported_tops(root).items():
            if top in sys.stdlib_module_names or top in PACKAGES:
                continue
            if not {canonical(dist) for dist in owners.get(top, [])} & allowed:
                out.setdefault(top, []).extend(sorted(files))
    return out


def print_nothing(name: str) -> None:
    """``walk_packages``' error handler: the failure is already in the report."""


def failed() -> dict[str, str]:
    """Modules of the packages that raise when imported."""
    out: dict[str, str] = {}
    for package in PACKAGES:
        module = importlib.import_module(package)
        # onerror: a package that fails is recorded below, not raised by the walk.
        for info in pkgutil.walk_packages(module.__path__, f"{package}.", onerror=print_nothing):
            try:
                importlib.import_module(info.name)
            except Exception as err:
                out[info.name] = f"{type(err).__name__}: {err}"
    return out


if __name__ == "__main__":
    print(json.dumps({"undeclared": undeclared(), "failed": failed()}, sort_keys=True))
