"""The method registry: every method behind one interface, planned, stored and rebuilt alike;
the parameter rules the API and the service share; the budget helpers."""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.db.models import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus
from app.methods.base import CountsMode, Stored
from app.methods.registry import (
    METHODS,
    Counts,
    MethodKind,
    ParamsError,
    UnknownMethodError,
    configure,
    get_method,
    param_fields,
)
from app.privacy.accounting import Accounting
from app.privacy.budget import FIT_TOLERANCE, fits_budget, is_epsilon
from app.privacy.events import GaussianEvent, to_dict
from app.privacy.params import TangParams
from app.privacy.synthesis import SynthesisPrivacy
from app.privacy.unit import release_counts
from app.results import SynthesisResult
from app.synthesis.tasks import BUILTIN_TASKS

TREC = BUILTIN_TASKS["trec"]
# The dataset's one count release (issue 41), drawn once here: a plan reads its estimates.
RELEASE = release_counts(
    {label: 30 for label in TREC.labels}, 0.2, 5e-8, np.random.default_rng(41), "release-1"
)
COUNTS = Counts.released(RELEASE, public=40)
SMALL = {
    MethodKind.TANG: {"M": 4, "N": 2, "tmax": 4, "K": 10},
    MethodKind.ADADPSYN: {"M": 4, "N": 2, "tmax": 4, "K": 10, "variant": "paper"},
    MethodKind.PROMPTPATE: {"teachers": 6, "queries": 20, "candidates": 2, "group_size": 8},
    MethodKind.PROMPTDPSGD: {"steps": 5, "batch_size": 8, "prompt_length": 2},
}


def test_every_built_in_method_is_registered_once_under_its_name() -> None:
    assert list(METHODS) == [kind.value for kind in MethodKind]
    for name, method in METHODS.items():
        assert type(name) is str and method.name == name
        assert get_method(name) is method
    with pytest.raises(UnknownMethodError, match="one of tang, adadpsyn, promptpate"):
        get_method("promptsgd")


@pytest.mark.parametrize("kind", list(MethodKind))
def test_a_stored_plan_rebuilds_to_the_event_admission_reserved(kind: MethodKind) -> None:
    method = get_method(kind)
    config = configure(
        method,
        TREC,
        epsilon=4.0,
        delta=0.01,
        shots=2,
        accounting=Accounting.TIGHT,
        params=SMALL[kind],
    )
    # as the service gives them: a method that reads no counts (PromptPATE) is given none
    counts = COUNTS if method.reads_counts else Counts(None, COUNTS.public)
    plan = method.plan(TREC, config, counts)
    assert plan.epsilon() <= 4.0 * (1 + 1e-9) and plan.delta == 0.01
    stored = plan.stored()
    rebuilt = method.rebuild(TREC, stored)
    assert to_dict(rebuilt.event()) == to_dict(plan.event())
    assert rebuilt.epsilon() == plan.epsilon()
    assert rebuilt.progress_total == plan.progress_total > 0
    assert rebuilt.stored() == stored  # everything the worker needs is in the row
    assert not hasattr(rebuilt, "expected_records")  # the worker checks the dataset's row
    # the job row names the release its counts came from, and says they were released
    released = stored.config.get("count_release") == RELEASE.id
    assert released is method.reads_counts
    mode = method.counts_mode(stored)
    assert mode is (CountsMode.RELEASED if method.reads_counts else None)
    assert rebuilt.public_records == (COUNTS.public if method.reads_public else None)
    accounting, shots = method.summary(stored)
    # a soft prompt has no demonstrations: the job's shots do not apply to PromptDPSGD
    assert (accounting, shots) == ("tight", 0 if kind is MethodKind.PROMPTDPSGD else 2)


def _token_loop_row(*, planned: bool, count_sigma: float | None) -> tuple[Stored, dict]:
    """A token-loop job row as an older admission wrote it: the exact ``sizes`` always; from
    issue 32, the ``planned_sizes`` it priced and sampled with and its own count release's
    multiplier in its plan (priced inside its event). Returns the row and its sizes."""
    method = get_method(MethodKind.TANG)
    config = configure(
        method, TREC, epsilon=4.0, delta=1e-6, shots=2, accounting=Accounting.TIGHT,
        params=SMALL[MethodKind.TANG],
    ).model_dump(mode="json")  # fmt: skip
    privacy = SynthesisPrivacy(
        params=TangParams(sigma=3.0), M=4, N=2, tmax=4, count_sigma=count_sigma
    )
    exact = {label: 30 for label in TREC.labels}
    row = {"synthesis": config, "plan": privacy.model_dump(mode="json"), "sizes": exact}
    sizes = exact
    if planned:
        sizes = {label: 30 + 3 * i for i, label in enumerate(TREC.labels)}
        row["planned_sizes"] = sizes
    else:
        row["synthesis"].pop("public_counts")
        row["plan"].pop("count_sigma")
    return Stored(config=row, schedule=["Description", "Entity"], delta=1e-6), sizes


@pytest.mark.parametrize("issue_32", [False, True])
def test_older_token_loop_rows_rebuild_to_the_event_they_reserved(issue_32: bool) -> None:
    """Rows stored before issue 41 (exact sizes kept for the worker, no ``count_release``,
    one multiplier for every label) rebuild and price as they did; a row of issue 32 prices
    its own count release inside its event and says its counts were released."""
    stored, sizes = _token_loop_row(planned=issue_32, count_sigma=30.0 if issue_32 else None)
    method = get_method(MethodKind.TANG)
    rebuilt = method.rebuild(TREC, stored)
    privacy = SynthesisPrivacy.model_validate(stored.config["plan"])
    expected = privacy.synthesis_event(sizes, {"Description": 1, "Entity": 1})
    assert rebuilt.event() == expected
    assert rebuilt.epsilon() == privacy.accountant.dataset_epsilon(expected, 1e-6)
    releases = {label.count_release for label in rebuilt.event().labels}
    assert releases == ({GaussianEvent(30.0)} if issue_32 else {None})
    assert method.counts_mode(stored) is (CountsMode.RELEASED if issue_32 else None)
    assert rebuilt.plan.privacy.noise_by_label() == {}  # one multiplier, not per label
    assert rebuilt.stored().config["count_release"] is None


def test_a_parameter_of_another_method_is_refused_naming_who_takes_it() -> None:
    pate, tang = get_method(MethodKind.PROMPTPATE), get_method(MethodKind.TANG)
    common = {"epsilon": 4.0, "delta": 0.01, "shots": 2, "accounting": Accounting.TIGHT}
    with pytest.raises(ParamsError, match=r"params\.M: a parameter of method tang or adadpsyn, "):
        configure(pate, TREC, params={"M": 4}, **common)
    with pytest.raises(ParamsError, match=r"params\.teachers: a parameter of method promptpate"):
        configure(tang, TREC, params={"teachers": 4}, **common)
    with pytest.raises(ParamsError, match=r"params\.bogus: not a parameter of method tang"):
        configure(tang, TREC, params={"bogus": 1}, **common)
    with pytest.raises(ParamsError, match="teachers"):  # the config's own bounds
        configure(pate, TREC, params={"teachers": 0}, **common)


def test_the_api_parameters_are_the_methods_own() -> None:
    fields = param_fields()
    for kind, method in METHODS.items():
        for name in method.params.model_fields:
            assert kind in fields[name].description(), (name, kind)
    assert set(fields) == {n for m in METHODS.values() for n in m.params.model_fields}
    assert "teachers" in fields and "seed" not in fields and "student_shots" not in fields


def test_only_public_stats_of_a_run_are_kept() -> None:
    result = SynthesisResult(
        task="trec",
        method="promptpate",
        model="m",
        demonstrations=[],
        prompt="",
        epsilon=1.0,
        delta=0.01,
        plan={},
        event={},
        stats={"processed": 24, "answered": 5, "rejected": 19, "seconds": 3.5},
    )
    pate, tang = get_method(MethodKind.PROMPTPATE), get_method(MethodKind.TANG)
    assert pate.public_stats(result) == {"processed": 24, "answered": 5, "rejected": 19}
    assert pate.progress_done(result, 40) == 24
    assert tang.public_stats(result) is None and tang.progress_done(result, 40) == 40
    result.stats = {"backend_calls": 9, "planner_T": 2, "planner_checks": True}
    adadpsyn = get_method(MethodKind.ADADPSYN)
    assert adadpsyn.public_stats(result) == {"planner_T": 2, "planner_checks": True}


def test_statuses_are_active_or_terminal() -> None:
    assert ACTIVE_STATUSES.isdisjoint(TERMINAL_STATUSES)
    assert set(JobStatus) == ACTIVE_STATUSES | TERMINAL_STATUSES
    assert "succeeded" in TERMINAL_STATUSES and "queued" in ACTIVE_STATUSES


def test_epsilon_and_budget_fit_rules() -> None:
    assert is_epsilon(0.5) and is_epsilon(1e-12)
    assert not any(is_epsilon(v) for v in (0.0, -1.0, math.inf, math.nan))
    assert fits_budget(4.0, 4.0) and fits_budget(4.0 * (1 + FIT_TOLERANCE / 2), 4.0)
    assert not fits_budget(4.0 * (1 + 10 * FIT_TOLERANCE), 4.0)


def test_the_methods_never_load_the_web_or_database_layers() -> None:
    code = (
        "import sys, app.methods.registry\n"
        "layers = ('app.db', 'app.api', 'app.services', 'workers', 'sqlalchemy', 'fastapi')\n"
        "print(sorted(m for m in sys.modules if m.startswith(layers)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"


# --- layering: parsed from the source, so a function-level or TYPE_CHECKING import counts ---

ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> Iterator[str]:
    """Every module name ``path`` imports, anywhere in it (``from a import b`` yields ``a``
    and ``a.b``: ``b`` may be a module); relative imports resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _imports(*packages: str) -> dict[str, set[str]]:
    return {
        _module_name(path): set(_imported(path))
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_app_never_imports_workers() -> None:
    offenders = sorted(
        (module, target)
        for module, targets in _imports("app").items()
        for target in targets
        if _under(target, "workers")
    )
    assert offenders == []


def test_no_production_module_imports_the_tests() -> None:
    offenders = sorted(
        (module, target)
        for module, targets in _imports("app", "workers").items()
        for target in targets
        if _under(target, "tests")
    )
    assert offenders == []


def _package_graph() -> dict[str, set[str]]:
    """``app``'s top-level packages and modules (``app.synthesis``, ``app.results``...) and
    the others each imports."""
    tops = {
        _module_name(p)
        for p in (ROOT / "app").iterdir()
        if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())
    } - {"app"}

    def top(module: str) -> str | None:
        return next((t for t in tops if _under(module, t)), None)

    graph: dict[str, set[str]] = {t: set() for t in tops}
    for module, targets in _imports("app").items():
        source = top(module)
        for target in targets:
            if source and (dest := top(target)) and dest != source:
                graph[source].add(dest)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([node, *component]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_packages_of_app_import_each_other_without_cycles() -> None:
    graph = _package_graph()
    assert {"app.synthesis", "app.promptdpsgd", "app.results", "app.services"} <= set(graph)
    assert "app.promptdpsgd" in graph["app.methods"]  # the graph does see imports
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_the_shared_result_types_do_not_load_the_token_loop_or_safetensors() -> None:
    code = (
        "import sys, app.results\n"
        "print(sorted(m for m in sys.modules if m.startswith(('app.', 'safetensors'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "['app.results']"
