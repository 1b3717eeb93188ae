"""``dpsyn eval``: the ICL evaluation grid on one shared data set (table, JSON, plot).

The command knows no method: ``--methods`` takes any registered method, and each method's
parameters are options generated from the registry, as for ``synthesize``, ``jobs submit``
and ``privacy quote`` (``--M``, ``--teachers``, ``--steps``, a plug-in's own), or
``--param NAME=VALUE``; every method asked for that takes a parameter gets it, and each
validates it as it does a job's params.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.errors import err, fail, reported_errors
from app.cli.method_options import RegistryCommand, given_options, params_by_name
from app.cli.model_options import DtypeOpt, ModelOpt, quiet_progress_bars, training_dtype
from app.cli.progress import progress_reporter
from app.eval.datasets import DATASETS, load_split, public_path
from app.eval.experiment import (
    DEFAULT_METHODS,
    PROFILES,
    ExperimentConfig,
    aggregate,
    check_config,
    plot,
    reads_public,
    run_experiment,
    settings_grid,
    write_json,
    write_table,
)
from app.eval.methods import get, untaken
from app.llm.base import LLMBackend
from app.llm.factory import BackendKind, Dtype, make_backend
from app.privacy.budget import is_epsilon
from app.synthesis.config import DEFAULT_SHOTS
from app.synthesis.data import Record
from app.synthesis.tasks import BUILTIN_TASKS

DEFAULT_SELECTION = ",".join(DEFAULT_METHODS)
# The options of earlier command lines (docs/results.md's), hidden: option (its argument) ->
# the method parameter it sets. Each method parameter has its own flag, generated from the
# registry like every command's (``--M``, ``--steps``, a plug-in's ``--words``).
ALIASES = {"dpsgd_steps": "steps", "dpsgd_batch_size": "batch_size"}

Dataset = Annotated[str, typer.Option("--dataset", help="trec|trec14|sst2|agnews|mitg|mitd")]
Quick = Annotated[
    bool,
    typer.Option(
        "--quick/--no-quick",
        help="100 test queries, 2 seeds, T_max 8, K 50; AG News M 6, MIT M 20 (CPU profile).",
    ),
]
Profile = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="quick (= --quick), compare (quick with 5 seeds, 300 test queries: about 90 "
        "min for SST-2 on 2 cores) or paper (every test query, the papers' T_max and K).",
    ),
]
Seeds = Annotated[
    int | None, typer.Option("--seeds", help="Number of seeds (0..n-1); default 5, quick 2.")
]
TestSize = Annotated[
    int | None, typer.Option("--test-size", help="Test queries; default all, quick 100.")
]
Epsilons = Annotated[str, typer.Option("--epsilons", help="Finite epsilons.")]
Methods = Annotated[
    str,
    typer.Option("--methods", help="Comma-separated registered methods ({methods})."),
]
Baselines = Annotated[
    bool,
    typer.Option(
        "--baselines/--no-baselines",
        help="The synthesis baselines: instruction-only (epsilon 0), noise-free and real "
        "demonstrations (epsilon inf). Zero-shot always runs.",
    ),
]
Public = Annotated[
    Path | None,
    typer.Option(
        "--public",
        help="Unlabelled inputs for a method that reads some, e.g. PromptPATE "
        "(JSONL/CSV/TSV/text); sst2: IMDB sample.",
    ),
]
PublicField = Annotated[
    str, typer.Option("--public-field", help="Text field of a JSONL/CSV public file.")
]
OutDir = Annotated[Path | None, typer.Option("--out-dir", help="Default out/eval/<dataset>.")]
DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="Default $DATA_DIR or ../shared/data.")
]
Shots = Annotated[int, typer.Option("--shots", help="The job's shots (demonstrations).")]
Params = Annotated[
    list[str] | None,
    typer.Option(
        "--param",
        help="A method parameter, NAME=VALUE (repeat it); VALUE is read as JSON if it can be "
        "(8, 0.5, true), else as text. Every method asked for that takes NAME gets it.",
    ),
]
Calibrate = Annotated[
    bool, typer.Option("--calibrate/--no-calibrate", help="Contextual calibration.")
]


PublicCounts = Annotated[
    bool,
    typer.Option(
        "--public-counts/--no-public-counts",
        help="Plan with the exact label counts, as a job on a dataset whose owner declared "
        "them public. Default off: each run releases the counts it plans with under DP, "
        "within its epsilon (what the utility tables measure).",
    ),
]
DpsgdSteps = Annotated[
    int | None,
    typer.Option("--dpsgd-steps", min=1, hidden=True, help="Former name of --steps."),
]
DpsgdBatch = Annotated[
    int | None,
    typer.Option("--dpsgd-batch-size", min=1, hidden=True, help="Former --batch-size."),
]


def _floats(text: str, option: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise fail(f"{option} takes comma-separated numbers, got {text!r}") from None
    if not values or not all(is_epsilon(v) for v in values):
        raise fail(f"{option} values must be finite and > 0, got {text!r}")
    return values


def _value(text: str) -> Any:
    """A --param value: JSON when it parses (numbers, booleans), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_params(items: list[str] | None, flags: dict[str, Any]) -> dict[str, Any]:
    """The parameters given on the command line: ``--param`` items, then the parameters of
    the flags that are set, by name (a flag wins over a ``--param`` of the same name)."""
    params: dict[str, Any] = {}
    for item in items or []:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise fail(f"--param takes NAME=VALUE, got {item!r}")
        params[name.strip()] = _value(text.strip())
    params.update({name: value for name, value in flags.items() if value is not None})
    return params


def _base(dataset: str, quick: bool, profile: str | None) -> tuple[str, ExperimentConfig]:
    """The profile's name and config (--quick is --profile quick)."""
    if dataset not in DATASETS:
        raise fail(f"--dataset must be one of {', '.join(DATASETS)}, got {dataset!r}")
    if quick and profile not in (None, "quick"):
        raise fail(f"--quick is --profile quick; it cannot be combined with --profile {profile}")
    if profile is not None and profile not in PROFILES:
        raise fail(f"--profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    name = profile or ("quick" if quick else "paper")
    return name, ExperimentConfig.profile(name, dataset)


def build_config(
    base: ExperimentConfig,
    given: dict[str, Any],
    *,
    seeds: int | None,
    test_size: int | None,
    epsilons: str,
    methods: str,
    **settings: Any,
) -> ExperimentConfig:
    """The profile's config with the command line's settings (``shots``, ``calibrate``,
    ``baselines``, ``public_counts``) and parameters ``given``; a parameter that no method
    asked for takes is refused by name (a value a method refuses is refused by
    :func:`check_config`)."""
    if seeds is not None and seeds < 1:
        raise fail("--seeds must be at least 1")
    if test_size is not None and test_size < 1:
        raise fail("--test-size must be at least 1")
    chosen = tuple(m.strip() for m in methods.split(",") if m.strip())
    with reported_errors():
        settings_grid((1.0,), chosen)  # every method is registered
    if missing := untaken(given, chosen):
        raise fail(f"--param {missing[0]}: none of --methods {','.join(chosen)} takes it")
    return ExperimentConfig(
        seeds=tuple(range(seeds)) if seeds else base.seeds,
        test_size=test_size or base.test_size,
        epsilons=_floats(epsilons, "--epsilons"),
        methods=chosen,
        shots=settings["shots"],
        params={**base.params, **given},
        calibrated=settings["calibrate"],
        baselines=settings["baselines"],
        public_counts=bool(settings.get("public_counts", False)),
    )


def _public(
    config: ExperimentConfig,
    dataset: str,
    public: Path | None,
    data_dir: Path | None,
    field: str,
) -> list[str] | None:
    """The public inputs, if a method asked for reads some (the dataset's default file
    unless --public names one)."""
    if not reads_public(config.methods):
        return None
    from app.pate.public import read_public

    source = public if public is not None else public_path(dataset, data_dir)
    if source is None:
        readers = [m for m in config.methods if get(m).reads_public]
        raise fail(f"--methods {','.join(readers)} needs --public PATH for {dataset}")
    return read_public(source, field)


def _backend(config: ExperimentConfig, model: str | None, dtype: Dtype) -> LLMBackend:
    """The local model, in float32 under ``auto`` when a method trains."""
    trains = any(get(m).needs_gradients for m in config.methods)
    chosen = training_dtype(trains, dtype)
    quiet_progress_bars()
    return make_backend(BackendKind.TRANSFORMERS, model=model, url=None, dtype=chosen)


def _evaluate(
    dataset: str,
    config: ExperimentConfig,
    records: tuple[list[Record], list[Record]],
    public: list[str] | None,
    backend: LLMBackend,
) -> list[Any]:
    train, test = records
    n_settings = len(settings_grid(config.epsilons, config.methods, config.baselines))
    err.print(
        f"{dataset}: {len(train)} training and {len(test)} test records; "
        f"{n_settings} settings x {len(config.seeds)} seeds",
        highlight=False,
    )
    with progress_reporter(err, "evaluating", "runs") as report:
        return run_experiment(
            BUILTIN_TASKS[dataset],
            train,
            test,
            backend,
            config,
            log=lambda line: err.print(line, markup=False, highlight=False),
            public=public,
            progress=lambda done, total: report(done, total),
        )


def _write(runs: list[Any], config: ExperimentConfig, out: Path, meta: dict[str, Any]) -> None:
    """The table (also on stdout), the runs as JSON and the plot."""
    rows = aggregate(runs, settings_grid(config.epsilons, config.methods, config.baselines))
    title = f"{meta['dataset']} ({meta['model']})"
    paths = [
        write_table(rows, out / "results.md", title),
        write_json(runs, out / "runs.json", meta),
        plot(rows, out / "accuracy_vs_epsilon.png", title),
    ]
    typer.echo((out / "results.md").read_text(encoding="utf-8"))
    for path in paths:
        err.print(f"wrote {path}", markup=False, highlight=False)


def _eval(
    dataset: Dataset,
    quick: Quick = False,
    profile: Profile = None,
    model: ModelOpt = None,
    dtype: DtypeOpt = Dtype.AUTO,
    seeds: Seeds = None,
    test_size: TestSize = None,
    epsilons: Epsilons = "1,2,4,8",
    methods: Methods = DEFAULT_SELECTION,
    baselines: Baselines = True,
    public: Public = None,
    public_field: PublicField = "text",
    out_dir: OutDir = None,
    data_dir: DataDir = None,
    shots: Shots = DEFAULT_SHOTS,
    param: Params = None,
    calibrate: Calibrate = True,
    public_counts: PublicCounts = False,
    dpsgd_steps: DpsgdSteps = None,
    dpsgd_batch_size: DpsgdBatch = None,
    **method_options: Any,
) -> None:
    """Evaluate ICL accuracy of DP synthetic prompts against the papers' baselines."""
    profile_name, base = _base(dataset, quick, profile)
    flags = params_by_name(given_options(method_options))
    aliases = {"dpsgd_steps": dpsgd_steps, "dpsgd_batch_size": dpsgd_batch_size}
    flags |= {ALIASES[name]: value for name, value in aliases.items() if value is not None}
    config = build_config(
        base,
        parse_params(param, flags),
        seeds=seeds,
        test_size=test_size,
        epsilons=epsilons,
        methods=methods,
        shots=shots,
        calibrate=calibrate,
        baselines=baselines,
        public_counts=public_counts,
    )
    started = time.perf_counter()
    with reported_errors() as private:
        check_config(BUILTIN_TASKS[dataset], config)  # before the data and the model load
        records = load_split(dataset, data_dir)
        private.read(*records)  # the training split stands for a private set
        texts = _public(config, dataset, public, data_dir, public_field)
        backend = _backend(config, model, dtype)
        runs = _evaluate(dataset, config, records, texts, backend)
    meta = {
        "dataset": dataset,
        "model": backend.name,
        "quick": quick,
        "profile": profile_name,
        "config": asdict(config),
        "seconds": time.perf_counter() - started,
    }
    _write(runs, config, out_dir if out_dir is not None else Path("out") / "eval" / dataset, meta)


# The registered methods' parameters are options, and their names are in --methods' help, as
# the command is built (plug-ins too); the job's shots are eval's own --shots.
eval_command = RegistryCommand(_eval, shots=False)
