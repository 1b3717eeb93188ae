"""One meaning per name, and docs that say where things live (issue 22, "Names").

The glossary in docs/service.md ("Names: a glossary") lists the names that used to mean two
things (``Method``, the ``*Plan`` types, ``Progress``, ``calibrate``, ...). These tests keep it
true: each listed name exists in the module the glossary gives, is defined in no other module
of ``app/`` or ``workers/``, every ``*Plan`` class is listed, and the retired spellings are not
defined again. The README's layout table must name every package, so a newcomer can guess
where a thing lives.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "workers")
# Names retired because each meant two things (see the glossary for what replaced them).
RETIRED = ("PrivacyPlan", "JobPlan", "DpsgdPlan", "TokenLoopPlan", "synthesis_epsilon")


def _sources() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _definitions() -> dict[str, set[str]]:
    """Every top-level name of app/ and workers/ -> the modules (paths) that define it."""
    where: dict[str, set[str]] = defaultdict(set)
    for path in _sources():
        for name in _top_level_names(ast.parse(path.read_text())):
            where[name].add(path.relative_to(ROOT).as_posix())
    return where


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def _glossary() -> list[tuple[str, str]]:
    """(name, module path) of each row of the glossary table."""
    section = _section((ROOT / "docs" / "service.md").read_text(), "## Names: a glossary")
    rows = re.findall(r"^\| `([\w.]+)` \| `([\w/]+\.py)` \|", section, flags=re.MULTILINE)
    assert len(rows) >= 15, "the glossary table is missing or was not parsed"
    return rows


def test_each_glossary_name_lives_where_the_glossary_says():
    for name, path in _glossary():
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        owner, _, attribute = name.partition(".")
        assert hasattr(module, owner), f"{name} is not in {path}"
        if attribute:
            assert hasattr(getattr(module, owner), attribute), f"{name} is not in {path}"


def test_each_glossary_name_is_defined_in_one_module_only():
    where = _definitions()
    for name, path in _glossary():
        top = name.partition(".")[0]
        assert where[top] == {path}, f"{top} is defined in {sorted(where[top])}, not {path} alone"


def test_every_plan_type_is_in_the_glossary():
    listed = {name for name, _ in _glossary()}
    plans = {name for name in _definitions() if name.endswith("Plan")}
    assert plans, "no *Plan type found: the scan is broken"
    assert plans <= listed, f"add {sorted(plans - listed)} to the glossary in docs/service.md"


def test_retired_names_stay_retired():
    defined: set[str] = set()
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                defined.add(node.name)
    assert not defined & set(RETIRED)
    # "calibrate" alone meant both noise and contextual calibration
    assert _definitions().get("calibrate") is None


def test_the_readme_layout_names_every_package_and_top_level_module():
    layout = _section((ROOT / "README.md").read_text(), "## Layout")
    paths = set(re.findall(r"`((?:app|workers)/[\w/.]*)`", layout))
    packages = {
        init.parent.relative_to(ROOT).as_posix() + "/"
        for package in PACKAGES
        for init in (ROOT / package).rglob("__init__.py")
    } - {"app/"}
    modules = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "app").glob("*.py")
        if path.name != "__init__.py"
    }
    missing = sorted((packages | modules) - paths)
    assert not missing, f"README.md's layout table does not name {missing}"
