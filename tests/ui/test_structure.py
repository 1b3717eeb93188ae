"""The dashboard's code keeps its split (issue 22, finding 6): handlers get what they need of
the application through dependencies, never from ``app.state``; no route module imports
another router's module; and the support package ``app.ui`` never imports ``app.api``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROUTES = ROOT / "app" / "api" / "routes"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _reads_app_state(path: Path) -> list[int]:
    """Lines where the module touches ``<something>.app.state`` or ``request.app``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr == "app"
        and isinstance(node.value, ast.Name)
        and node.value.id == "request"
    ]


def test_the_handlers_read_no_app_state() -> None:
    pages = ROUTES / "ui" / "pages.py"
    assert _reads_app_state(pages) == []
    # Only the dependency providers do, as app/api/deps.py does for the REST routes.
    assert _reads_app_state(ROUTES / "ui" / "session.py")


def test_no_route_module_imports_another_router() -> None:
    routers = {p.stem for p in ROUTES.glob("*.py") if p.stem != "__init__"} | {"ui"}
    offenders = []
    for path in ROUTES.rglob("*.py"):
        own = path.parent.name if path.parent != ROUTES else path.stem
        for name in _imports(path):
            parts = name.split(".")
            target = parts[3] if parts[:3] == ["app", "api", "routes"] and len(parts) > 3 else own
            if target in routers and target != own:
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_the_support_package_does_not_import_the_routes() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (ROOT / "app" / "ui").rglob("*.py")
        for name in _imports(path)
        if name == "app.api" or name.startswith("app.api.")
    ]
    assert offenders == []
