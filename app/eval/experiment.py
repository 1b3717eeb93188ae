"""The evaluation grid of the papers' Table 2: settings x seeds, aggregation and outputs.

Settings:

* ``zero-shot``: the instruction and the query, no demonstrations (one run: nothing random);
* ``instruction-only`` at epsilon = 0: demonstrations generated from the instruction alone;
* each method (``adadpsyn``, ``tang``, ``promptpate`` when public inputs are given, and
  ``promptdpsgd``: a soft prompt trained with DP-SGD, scored through
  :class:`~app.promptdpsgd.backend.SoftPromptedBackend`) at each finite epsilon, its noise
  calibrated to it;
* ``noise-free`` at epsilon = inf: the first synthesis method run without noise;
* ``real`` at epsilon = inf: randomly chosen training records, one per scheduled label.

Every run draws its demonstrations with its own seed and is scored on the same test subset.
Runs record demonstrations of the synthetic settings (DP releases, or no private data at all);
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

from app.eval.icl import Score, evaluate, normalise
from app.eval.memo import MemoBackend
from app.llm.base import LLMBackend
from app.privacy.budget import is_epsilon
from app.privacy.params import Method
from app.privacy.plan import label_schedule
from app.synthesis.config import DEFAULT_SHOTS, SynthesisConfig
from app.synthesis.data import Record
from app.synthesis.generator import synthesize
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.tasks import TaskKind, TaskSpec

Log = Callable[[str], None]
METHOD_NAMES = {
    "adadpsyn": "AdaDPSyn",
    "tang": "DP few-shot generation",
    "promptpate": "PromptPATE",
    "promptdpsgd": "PromptDPSGD",
}
SYNTHESIS_METHODS = ("adadpsyn", "tang")
ZERO_SHOT, INSTRUCTION_ONLY = "zero-shot", "instruction-only"
NOISE_FREE, REAL = "noise-free", "real"
TEST_SUBSET_SEED = 12345  # the same test queries for every setting and seed


@dataclass(frozen=True)
class Setting:
    """One row of the table: how demonstrations are obtained, at which epsilon."""

    kind: str  # "instruction-only", a method name, "noise-free" or "real"
    epsilon: float
    method: str | None = None  # the synthesis method run (None for "real")

    @property
    def key(self) -> str:
        if self.kind in METHOD_NAMES:
            return f"{self.kind}@{self.epsilon:g}"
        return self.kind

    @property
    def title(self) -> str:
        if self.kind == ZERO_SHOT:
            return "zero-shot (no demonstrations)"
        if self.kind == INSTRUCTION_ONLY:
            return "ε = 0 (instruction-only)"
        if self.kind == NOISE_FREE:
            return f"ε = ∞ ({METHOD_NAMES.get(self.method or '', self.method)}, no noise)"
        if self.kind == REAL:
            return "ε = ∞ (random real demonstrations)"
        return f"{METHOD_NAMES[self.kind]}, ε = {self.epsilon:g}"


def settings_grid(
    epsilons: Sequence[float], methods: Sequence[str], baselines: bool = True
) -> list[Setting]:
    """Zero-shot and epsilon 0, every method at every epsilon, then the two epsilon = inf
    baselines (the baselines that generate use the first synthesis method, else AdaDPSyn).
    ``baselines=False`` keeps zero-shot and the methods only (no synthesis baselines)."""
    unknown = [m for m in methods if m not in METHOD_NAMES]
    if unknown or not methods:
        raise ValueError(f"methods must be among {', '.join(METHOD_NAMES)}, got {list(methods)}")
    bad = [e for e in epsilons if not is_epsilon(e)]
    if bad:
        raise ValueError(f"epsilons must be finite and > 0, got {bad}")
    generator = next((m for m in methods if m in SYNTHESIS_METHODS), "adadpsyn")
    grid = [Setting(ZERO_SHOT, 0.0)]
    if baselines:
        grid.append(Setting(INSTRUCTION_ONLY, 0.0, generator))
    grid += [Setting(m, float(e), m) for m in methods for e in sorted(set(epsilons))]
    if baselines:
        grid += [Setting(NOISE_FREE, math.inf, generator), Setting(REAL, math.inf)]
    return grid


# Per-task reductions that keep a quick run within 15 minutes on two cores. AG News prompts
# hold two news items per teacher, about three times the tokens of a TREC prompt (paper's
# M = 10: about 18 minutes); MIT-G/D run M = 40 teacher prompts per demonstration (about 22).
QUICK_TASK_OVERRIDES: dict[str, dict[str, int]] = {
    "agnews": {"M": 6},
    "mitg": {"M": 20},
    "mitd": {"M": 20},
}


@dataclass(frozen=True)
class ExperimentConfig:
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    test_size: int | None = None  # None: the whole test set
    epsilons: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    methods: tuple[str, ...] = ("adadpsyn", "tang")
    shots: int = DEFAULT_SHOTS
    # M, N, tmax, K (and the AdaDPSyn variant) for SynthesisConfig.for_task
    overrides: dict[str, Any] = field(default_factory=dict)
    calibrated: bool = True
    # PateConfig fields (teachers, queries, ...), of several types: PateConfig validates them.
    pate: dict[str, Any] = field(default_factory=dict)
    # PromptDpsgdConfig fields (steps, batch_size, ...): PromptDpsgdConfig validates them.
    dpsgd: dict[str, Any] = field(default_factory=dict)
    # the epsilon = 0 and epsilon = inf synthesis baselines (instruction-only, noise-free, real)
    baselines: bool = True

    @classmethod
    def quick(cls, task: str | None = None, **changes: object) -> ExperimentConfig:
        """100 test queries, 2 seeds, T_max 8, K 50; PromptPATE with 30 teachers, noise sized
        for 40 answers, at most 100 public inputs of 300 characters, 8 student candidates
        (the CPU profile). ``task`` adds its entry of :data:`QUICK_TASK_OVERRIDES`."""
        base: dict[str, Any] = {  # field values; the dataclass is not validated
            "seeds": (0, 1),
            "test_size": 100,
            "overrides": {"tmax": 8, "K": 50, **QUICK_TASK_OVERRIDES.get(task or "", {})},
            "pate": {
                "teachers": 30,
                "queries": 40,
                "max_public": 100,
                "max_chars": 300,
                "candidates": 8,
            },
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


PROFILES = ("quick", "compare", "paper")


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
    started = time.perf_counter()
    if setting.kind == ZERO_SHOT:
        prompt = demonstration_prompt(task, [])
        demos: list[dict[str, object]] = []
        charged = 0.0
    elif setting.kind == "promptpate":
        prompt, demos, charged = _promptpate(task, train, public, setting, seed, backend, config)
    elif setting.kind == "promptdpsgd":
        scorer, prompt, demos, charged = _promptdpsgd(task, train, setting, seed, backend, config)
        score = evaluate(scorer, task, prompt, test, calibrated=config.calibrated)
        return _run(setting, seed, score, charged, demos, started)
    elif setting.kind == REAL:
        picked = real_demonstrations(task, train, config.shots, seed)
        prompt = demonstration_prompt(task, [train[i] for _, i in picked])
        demos = [{"label": lab, "train_index": i} for lab, i in picked]
        charged = math.inf
    else:
        synth = SynthesisConfig.for_task(
            task.name,
            method=Method(setting.method or "adadpsyn"),
            epsilon=setting.epsilon,
            shots=config.shots,
            seed=seed,
            **config.overrides,
        )
        result = synthesize(task, train, synth, backend)
        prompt = result.prompt
        demos = [{"label": d.label, "text": d.text} for d in result.demonstrations]
        charged = result.epsilon
    score = evaluate(backend, task, prompt, test, calibrated=config.calibrated)
    return _run(setting, seed, score, charged, demos, started)


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


def _promptpate(
    task: TaskSpec,
    train: Sequence[Record],
    public: Sequence[str] | None,
    setting: Setting,
    seed: int,
    backend: LLMBackend,
    config: ExperimentConfig,
) -> tuple[str, list[dict[str, object]], float]:
    """A PromptPATE student prompt: teachers from ``train``, labels for ``public``."""
    from app.pate.config import PateConfig
    from app.pate.plan import plan_pate, public_count
    from app.pate.run import run_pate

    if not public:
        raise ValueError("PromptPATE needs public inputs (dpsyn eval --public PATH)")
    pate = PateConfig(epsilon=setting.epsilon, seed=seed, **config.pate)
    plan = plan_pate(task, len(train), public_count(len(public), pate), pate)
    result = run_pate(task, train, public, plan, backend)
    demos: list[dict[str, object]] = [
        {"label": d.label, "text": d.text} for d in result.demonstrations
    ]
    return result.prompt, demos, result.epsilon


def _promptdpsgd(
    task: TaskSpec,
    train: Sequence[Record],
    setting: Setting,
    seed: int,
    backend: LLMBackend,
    config: ExperimentConfig,
) -> tuple[LLMBackend, str, list[dict[str, object]], float]:
    """A soft prompt trained on ``train`` with DP-SGD, and the backend that answers with it.

    The run records the soft prompt's hash and shape, not its embeddings."""
    from app.promptdpsgd.artifact import SoftPrompt
    from app.promptdpsgd.backend import SoftPromptedBackend
    from app.promptdpsgd.config import PromptDpsgdConfig
    from app.promptdpsgd.plan import plan_promptdpsgd
    from app.promptdpsgd.train import run_promptdpsgd

    dpsgd = PromptDpsgdConfig(epsilon=setting.epsilon, seed=seed, **config.dpsgd)
    plan = plan_promptdpsgd(task, len(train), dpsgd)
    result = run_promptdpsgd(task, train, plan, backend)
    soft = result.soft_prompt
    assert isinstance(soft, SoftPrompt)  # what PromptDPSGD releases
    info: list[dict[str, object]] = [
        {
            "soft_prompt_sha256": soft.sha256,
            "length": soft.length,
            "noise_multiplier": plan.noise_multiplier,
            "steps": dpsgd.steps,
            "batch_size": dpsgd.batch_size,
        }
    ]
    return SoftPromptedBackend(backend, soft), result.prompt, info, result.epsilon


def run_experiment(
    task: TaskSpec,
    train: Sequence[Record],
    test: Sequence[Record],
    backend: LLMBackend,
    config: ExperimentConfig,
    log: Log | None = None,
    public: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Run]:
    """Every setting of the grid with every seed (progress lines go to ``log``).

    ``progress(done, total)`` is called before the first run and after each, in runs.

    ``public``: unlabelled inputs for PromptPATE. Its teachers' votes do not depend on epsilon,
    so the backend is wrapped in a memo and each seed's votes are computed once.
    """
    grid = settings_grid(config.epsilons, config.methods, config.baselines)
    queries = pick_test_subset(test, config.test_size)
    if "promptpate" in config.methods:
        backend = MemoBackend(backend)
    runs = []
    total = sum(1 if s.kind == ZERO_SHOT else len(config.seeds) for s in grid)
    if progress is not None:
        progress(0, total)
    for setting in grid:
        for seed in config.seeds[:1] if setting.kind == ZERO_SHOT else config.seeds:
            run = run_one(task, train, queries, setting, seed, backend, config, public)
            runs.append(run)
            if log is not None:
                cal = run.calibrated_accuracy
                cal_text = "" if cal is None else f" cal {cal:.3f}"
                log(
                    f"[{len(runs)}/{total}] {setting.key} seed {seed}: "
                    f"acc {run.accuracy:.3f}{cal_text} ({run.seconds:.1f} s)"
                )
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
    eps_all = sorted({r.epsilon for r in rows if r.kind in METHOD_NAMES})
    for method, name in METHOD_NAMES.items():
        mine = sorted((r for r in rows if r.kind == method), key=lambda r: r.epsilon)
        if not mine:
            continue
        x = np.array([r.epsilon for r in mine])
        y = np.array([100 * r.mean for r in mine])
        s = np.array([100 * r.std for r in mine])
        (line,) = ax.plot(x, y, marker="o", label=name)
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
