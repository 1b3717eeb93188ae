"""The evaluation grid of the papers' Table 2: settings x seeds, aggregation and outputs.

Settings:

* ``zero-shot``: the instruction and the query, no demonstrations (one run: nothing random);
* ``instruction-only`` at epsilon = 0: demonstrations generated from the instruction alone;
* each method asked for (any registered method: ``adadpsyn``, ``tang``, ``promptpate`` when
  public inputs are given, ``promptdpsgd``, ...) at each finite epsilon, its noise calibrated
  to it;
* ``noise-free`` at epsilon = inf: a generating method run without noise;
* ``real`` at epsilon = inf: randomly chosen training records, one per scheduled label.

Every method setting runs as a job does (:mod:`app.eval.methods`: the registry's configure,
plan from counts, run), so the accuracy reported is that of what the service's jobs release.
The two generated baselines use the first method asked for that declares
``zero_epsilon_baseline`` (its epsilon = 0 run reads no private data, and it runs without
noise at epsilon = inf), else the first such method of the default selection. A run is scored
by what it released (:func:`app.eval.methods.scorer`): demonstrations through their prompt, a
soft prompt through a backend that puts it in front of every prompt.

Method parameters (``ExperimentConfig.params``) are one namespace, as in the API's ``params``
object: each method takes the names its ``params`` model declares and validates them itself.

Every run draws its demonstrations with its own seed and is scored on the same test subset.
Runs record the releases of the synthetic settings (DP releases, or no private data at all);
for ``real`` runs they record only the label and the training record's index, never its text.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.eval import methods as eval_methods
from app.eval.icl import Score, evaluate, normalise
from app.eval.memo import MemoBackend
from app.llm.base import LLMBackend
from app.privacy.accounting import Accounting
from app.privacy.budget import is_epsilon
from app.privacy.synthesis import label_schedule
from app.synthesis.config import DEFAULT_SHOTS
from app.synthesis.data import Record
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.tasks import TaskKind, TaskSpec

Log = Callable[[str], None]
ZERO_SHOT, INSTRUCTION_ONLY = "zero-shot", "instruction-only"
NOISE_FREE, REAL = "noise-free", "real"
BASELINES = (ZERO_SHOT, INSTRUCTION_ONLY, NOISE_FREE, REAL)  # the evaluation's own settings
DEFAULT_METHODS = ("adadpsyn", "tang")  # the selection when none is asked for
TEST_SUBSET_SEED = 12345  # the same test queries for every setting and seed


@dataclass(frozen=True)
class Setting:
    """One row of the table: how demonstrations are obtained, at which epsilon."""

    kind: str  # a baseline (:data:`BASELINES`) or a method name
    epsilon: float
    method: str | None = None  # the method run (None for zero-shot and "real")

    @property
    def key(self) -> str:
        if self.kind not in BASELINES:
            return f"{self.kind}@{self.epsilon:g}"
        return self.kind

    @property
    def title(self) -> str:
        if self.kind == ZERO_SHOT:
            return "zero-shot (no demonstrations)"
        if self.kind == INSTRUCTION_ONLY:
            return "ε = 0 (instruction-only)"
        if self.kind == NOISE_FREE:
            return f"ε = ∞ ({eval_methods.title(self.method or '')}, no noise)"
        if self.kind == REAL:
            return "ε = ∞ (random real demonstrations)"
        return f"{eval_methods.title(self.kind)}, ε = {self.epsilon:g}"


def baseline_method(methods: Sequence[str]) -> str | None:
    """The method the generated baselines run: the first of ``methods`` (then of
    :data:`DEFAULT_METHODS`) whose epsilon = 0 run reads no private data; None if none is."""
    known = eval_methods.registered_methods()
    for name in (*methods, *DEFAULT_METHODS):
        if name in known and known[name].zero_epsilon_baseline:
            return name
    return None


def settings_grid(
    epsilons: Sequence[float], methods: Sequence[str], baselines: bool = True
) -> list[Setting]:
    """Zero-shot and epsilon 0, every method at every epsilon, then the two epsilon = inf
    baselines (see :func:`baseline_method`). ``baselines=False`` keeps zero-shot and the
    methods only (no synthesis baselines)."""
    known = eval_methods.registered_methods()
    unknown = [m for m in methods if m not in known or m in BASELINES]
    if unknown or not methods:
        raise ValueError(f"methods must be among {', '.join(known)}, got {list(methods)}")
    bad = [e for e in epsilons if not is_epsilon(e)]
    if bad:
        raise ValueError(f"epsilons must be finite and > 0, got {bad}")
    generator = baseline_method(methods) if baselines else None
    grid = [Setting(ZERO_SHOT, 0.0)]
    if generator is not None:
        grid.append(Setting(INSTRUCTION_ONLY, 0.0, generator))
    grid += [Setting(m, float(e), m) for m in methods for e in sorted(set(epsilons))]
    if generator is not None:
        grid.append(Setting(NOISE_FREE, math.inf, generator))
    if baselines:
        grid.append(Setting(REAL, math.inf))
    return grid


# Per-task reductions that keep a quick run within 15 minutes on two cores. AG News prompts
# hold two news items per teacher, about three times the tokens of a TREC prompt (paper's
# M = 10: about 18 minutes); MIT-G/D run M = 40 teacher prompts per demonstration (about 22).
QUICK_TASK_OVERRIDES: dict[str, dict[str, int]] = {
    "agnews": {"M": 6},
    "mitg": {"M": 20},
    "mitd": {"M": 20},
}
# The quick profile's method parameters (by name: a method takes those it declares): the
# token loop's T_max and K; PromptPATE's ensemble, answered queries, public inputs and
# student candidates (the CPU profile).
QUICK_PARAMS: dict[str, Any] = {
    "tmax": 8,
    "K": 50,
    "teachers": 30,
    "queries": 40,
    "max_public": 100,
    "max_chars": 300,
    "candidates": 8,
}


@dataclass(frozen=True)
class ExperimentConfig:
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    test_size: int | None = None  # None: the whole test set
    epsilons: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    methods: tuple[str, ...] = DEFAULT_METHODS
    shots: int = DEFAULT_SHOTS  # the job's shots (a method without demonstrations ignores it)
    # Method parameters by name (M, tmax, teachers, steps, ...): each method takes the names
    # its params model declares and validates them, as it does a job's params.
    params: dict[str, Any] = field(default_factory=dict)
    calibrated: bool = True
    accounting: Accounting = Accounting.TIGHT
    # The owner's declaration that the label counts are public (``dpsyn eval --public-counts``);
    # off by default: the tables measure what a job on an undeclared dataset releases.
    public_counts: bool = False
    # the epsilon = 0 and epsilon = inf synthesis baselines (instruction-only, noise-free, real)
    baselines: bool = True

    @classmethod
    def quick(cls, task: str | None = None, **changes: object) -> ExperimentConfig:
        """100 test queries, 2 seeds, :data:`QUICK_PARAMS` (T_max 8, K 50; PromptPATE with 30
        teachers, noise sized for 40 answers, at most 100 public inputs of 300 characters, 8
        student candidates). ``task`` adds its entry of :data:`QUICK_TASK_OVERRIDES`."""
        base: dict[str, Any] = {  # field values; the dataclass is not validated
            "seeds": (0, 1),
            "test_size": 100,
            "params": {**QUICK_PARAMS, **QUICK_TASK_OVERRIDES.get(task or "", {})},
        }
        base.update(changes)
        return cls(**base)

    @classmethod
    def profile(cls, name: str, task: str | None = None) -> ExperimentConfig:
        """A named profile (:data:`PROFILES`): ``quick`` (above), ``compare`` (the quick
        shape with 5 seeds and 300 test queries, about 90 minutes for SST-2 on two cores:
        enough runs to separate methods by a few points), or ``paper`` (every test query,
        5 seeds, the papers' T_max and K: GPU-sized)."""
        if name == "quick":
            return cls.quick(task)
        if name == "compare":
            return cls.quick(task, seeds=(0, 1, 2, 3, 4), test_size=300)
        if name == "paper":
            return cls()
        raise ValueError(f"unknown profile {name!r}: one of {', '.join(PROFILES)}")

    def job(self, setting: Setting, seed: int) -> eval_methods.JobSpec:
        """The job fields of ``setting``'s run with ``seed``."""
        return eval_methods.JobSpec(
            epsilon=setting.epsilon,
            shots=self.shots,
            accounting=self.accounting,
            seed=seed,
            public_counts=self.public_counts,
        )


PROFILES = ("quick", "compare", "paper")


def check_config(task: TaskSpec, config: ExperimentConfig) -> None:
    """Refuse, before anything runs, a grid that cannot be built or a method that refuses its
    parameters (a ValueError naming the setting or parameter, never data)."""
    grid = settings_grid(config.epsilons, config.methods, config.baselines)
    for setting in grid:
        if setting.method is not None:
            eval_methods.configure(setting.method, task, config.job(setting, 0), config.params)


@dataclass
class Run:
    setting: str
    kind: str
    method: str | None
    epsilon_target: float
    seed: int
    accuracy: float
    calibrated_accuracy: float | None
    epsilon_charged: float
    n_test: int
    demonstrations: list[dict[str, object]]
    seconds: float


def pick_test_subset(test: Sequence[Record], size: int | None) -> list[Record]:
    """A fixed random subset of ``size`` test records (all of them if ``size`` is None)."""
    if size is None or size >= len(test):
        return list(test)
    rng = np.random.default_rng(TEST_SUBSET_SEED)
    return [test[i] for i in sorted(rng.choice(len(test), size=size, replace=False))]


def real_demonstrations(
    task: TaskSpec, train: Sequence[Record], shots: int, seed: int
) -> list[tuple[str, int]]:
    """(label, training index) of random real demonstrations, one per scheduled label.

    Extraction schedules the task's candidates; a candidate with no matching record is
    replaced by a random record.
    """
    rng = np.random.default_rng(seed)
    schedule = label_schedule(list(task.target_labels()), shots, rng)
    key = normalise if task.kind == TaskKind.EXTRACTION else (lambda s: s)
    by_label: dict[str, list[int]] = {}
    for i, record in enumerate(train):
        by_label.setdefault(key(record.label), []).append(i)
    out = []
    for label in schedule:
        pool = by_label.get(key(label)) or range(len(train))
        index = int(pool[int(rng.integers(len(pool)))])
        out.append((train[index].label, index))
    return out


@dataclass(frozen=True)
class Prompted:
    """What a setting's run is scored with: the backend that answers, the prompt, what the
    run records of its demonstrations, and the epsilon it charged."""

    scorer: LLMBackend
    prompt: str
    demonstrations: list[dict[str, object]]
    charged: float


def _prompted(
    task: TaskSpec,
    train: Sequence[Record],
    setting: Setting,
    seed: int,
    backend: LLMBackend,
    config: ExperimentConfig,
    public: Sequence[str] | None,
) -> Prompted:
    """The prompt of one run: none (zero-shot), real records, or a method's release."""
    if setting.kind == ZERO_SHOT:
        return Prompted(backend, demonstration_prompt(task, []), [], 0.0)
    if setting.kind == REAL:
        picked = real_demonstrations(task, train, config.shots, seed)
        prompt = demonstration_prompt(task, [train[i] for _, i in picked])
        demos: list[dict[str, object]] = [{"label": lab, "train_index": i} for lab, i in picked]
        return Prompted(backend, prompt, demos, math.inf)
    # A method's run is a job (:func:`app.eval.methods.run_method`).
    name = setting.method or setting.kind
    job = config.job(setting, seed)
    result = eval_methods.run_method(name, task, train, backend, job, config.params, public).result
    stats = eval_methods.get(name).public_stats(result)
    released = eval_methods.released(result, stats)
    return Prompted(eval_methods.scorer(backend, result), result.prompt, released, result.epsilon)


def run_one(
    task: TaskSpec,
    train: Sequence[Record],
    test: Sequence[Record],
    setting: Setting,
    seed: int,
    backend: LLMBackend,
    config: ExperimentConfig,
    public: Sequence[str] | None = None,
) -> Run:
    """One setting with one seed, scored on ``test``."""
    started = time.perf_counter()
    prompted = _prompted(task, train, setting, seed, backend, config, public)
    score = evaluate(prompted.scorer, task, prompted.prompt, test, calibrated=config.calibrated)
    return _run(setting, seed, score, prompted.charged, prompted.demonstrations, started)


def _run(
    setting: Setting,
    seed: int,
    score: Score,
    charged: float,
    demos: list[dict[str, object]],
    started: float,
) -> Run:
    return Run(
        setting=setting.key,
        kind=setting.kind,
        method=setting.method,
        epsilon_target=setting.epsilon,
        seed=seed,
        accuracy=score.accuracy,
        calibrated_accuracy=score.calibrated_accuracy,
        epsilon_charged=charged,
        n_test=score.n,
        demonstrations=demos,
        seconds=time.perf_counter() - started,
    )


def reads_public(methods: Sequence[str]) -> bool:
    """Whether any of ``methods`` reads public inputs."""
    return any(eval_methods.get(name).reads_public for name in methods)


def _log_line(run: Run, done: int, total: int) -> str:
    cal = run.calibrated_accuracy
    cal_text = "" if cal is None else f" cal {cal:.3f}"
    return (
        f"[{done}/{total}] {run.setting} seed {run.seed}: "
        f"acc {run.accuracy:.3f}{cal_text} ({run.seconds:.1f} s)"
    )


def run_experiment(
    task: TaskSpec,
    train: Sequence[Record],
    test: Sequence[Record],
    backend: LLMBackend,
    config: ExperimentConfig,
    log: Log | None = None,
    public: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_run: Callable[[Run], None] | None = None,
) -> list[Run]:
    """Every setting of the grid with every seed (progress lines go to ``log``).

    ``progress(done, total)`` is called before the first run and after each, in runs;
    ``on_run(run)`` after each run too.

    ``public``: unlabelled inputs for the methods that read some (PromptPATE). Its teachers'
    votes do not depend on epsilon, so the backend is wrapped in a memo and each seed's votes
    are computed once.
    """
    grid = settings_grid(config.epsilons, config.methods, config.baselines)
    queries = pick_test_subset(test, config.test_size)
    if reads_public(config.methods):
        backend = MemoBackend(backend)
    runs = []
    total = sum(1 if s.kind == ZERO_SHOT else len(config.seeds) for s in grid)
    if progress is not None:
        progress(0, total)
    for setting in grid:
        for seed in config.seeds[:1] if setting.kind == ZERO_SHOT else config.seeds:
            run = run_one(task, train, queries, setting, seed, backend, config, public)
            runs.append(run)
            if on_run is not None:
                on_run(run)
            if log is not None:
                log(_log_line(run, len(runs), total))
            if progress is not None:
                progress(len(runs), total)
    return runs


@dataclass(frozen=True)
class Row:
    setting: str
    title: str
    kind: str
    epsilon: float
    n_runs: int
    mean: float
    std: float
    calibrated_mean: float | None
    calibrated_std: float | None
    epsilon_charged: float


def aggregate(runs: Sequence[Run], grid: Sequence[Setting] | None = None) -> list[Row]:
    """Mean and (population) standard deviation per setting, in grid order."""
    order: dict[str, Setting] = {}
    for s in grid or []:
        order[s.key] = s
    for r in runs:
        order.setdefault(r.setting, Setting(r.kind, r.epsilon_target, r.method))
    rows = []
    for key, setting in order.items():
        mine = [r for r in runs if r.setting == key]
        if not mine:
            continue
        acc = np.array([r.accuracy for r in mine])
        cals = [r.calibrated_accuracy for r in mine if r.calibrated_accuracy is not None]
        cal = np.array(cals) if len(cals) == len(mine) else None
        rows.append(
            Row(
                setting=key,
                title=setting.title,
                kind=setting.kind,
                epsilon=setting.epsilon,
                n_runs=len(mine),
                mean=float(acc.mean()),
                std=float(acc.std()),
                calibrated_mean=None if cal is None else float(cal.mean()),
                calibrated_std=None if cal is None else float(cal.std()),
                epsilon_charged=max(r.epsilon_charged for r in mine),
            )
        )
    return rows


def _pct(mean: float | None, std: float | None) -> str:
    if mean is None or std is None:
        return "–"
    return f"{100 * mean:.1f} ± {100 * std:.1f}"


def _eps(value: float) -> str:
    return "∞" if math.isinf(value) else f"{value:.3g}"


def write_table(rows: Sequence[Row], path: Path, title: str = "") -> Path:
    """Markdown table: one row per setting, accuracy and calibrated accuracy in percent."""
    lines = [f"## {title}", ""] if title else []
    lines += [
        "| Setting | ε charged | Runs | Accuracy (%) | Calibrated accuracy (%) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.title} | {_eps(row.epsilon_charged)} | {row.n_runs} | "
            f"{_pct(row.mean, row.std)} | {_pct(row.calibrated_mean, row.calibrated_std)} |"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _jsonable(value: object) -> object:
    """Infinite floats as the string "inf" (strict JSON has no Infinity)."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def write_json(runs: Sequence[Run], path: Path, meta: dict[str, object] | None = None) -> Path:
    """Every run, with ``meta`` (task, model, configuration); infinities as "inf"."""
    doc = {"meta": meta or {}, "runs": [asdict(r) for r in runs]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(doc), indent=2, allow_nan=False), encoding="utf-8")
    return path


def read_runs(path: Path) -> list[Run]:
    """The runs of a file written by :func:`write_json`."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    runs = []
    for item in doc["runs"]:
        for name in ("epsilon_target", "epsilon_charged"):
            item[name] = float(item[name])
        runs.append(Run(**item))
    return runs


def plot(rows: Sequence[Row], path: Path, title: str = "") -> Path:
    """Accuracy against epsilon, one line per method with its standard deviation shaded,
    dashed horizontal lines for the epsilon = 0 and epsilon = inf baselines (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    eps_all = sorted({r.epsilon for r in rows if r.kind not in BASELINES})
    for method in dict.fromkeys(r.kind for r in rows if r.kind not in BASELINES):
        mine = sorted((r for r in rows if r.kind == method), key=lambda r: r.epsilon)
        x = np.array([r.epsilon for r in mine])
        y = np.array([100 * r.mean for r in mine])
        s = np.array([100 * r.std for r in mine])
        (line,) = ax.plot(x, y, marker="o", label=eval_methods.title(method))
        ax.fill_between(x, y - s, y + s, alpha=0.2, color=line.get_color())
    # Colour and matplotlib line style: a named style or (offset, (on, off)) dashes.
    styles: dict[str, tuple[str, str | tuple[int, tuple[int, int]]]] = {
        INSTRUCTION_ONLY: ("tab:gray", ":"),
        NOISE_FREE: ("tab:green", "--"),
    }
    styles[REAL] = ("tab:red", "-.")
    styles[ZERO_SHOT] = ("tab:purple", (0, (1, 3)))
    for row in rows:
        if row.kind in styles:
            color, dash = styles[row.kind]
            ax.axhline(100 * row.mean, color=color, linestyle=dash, label=row.title)
    if eps_all:
        ax.set_xscale("log", base=2)
        ax.set_xticks(eps_all, [f"{e:g}" for e in eps_all])
    ax.set_xlabel("ε")
    ax.set_ylabel("accuracy (%)")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)
    return path
