"""``dpsyn advise``: which method, shots and epsilon to spend on, measured on a public set.

Runs the candidate methods on a public labelled set as if it were the private data
(:mod:`app.eval.advice`), prints the table beside zero-shot and the majority label, and a
recommendation. Spends nothing: no server, no ledger, no budget is involved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from app.cli.errors import err, fail, reported_errors
from app.cli.eval import _floats, parse_params
from app.cli.model_options import DtypeOpt, ModelOpt, quiet_progress_bars, training_dtype
from app.cli.options import ColumnOptions, CustomTaskOptions, with_groups
from app.cli.synthesize import SpecOpt, TaskOpt, TaskOptions, task_and_records
from app.eval.advice import DEFAULT_METHODS, Advice, AdviceConfig, advise, check
from app.eval.datasets import DATASETS, load_split, public_path
from app.eval.methods import get
from app.eval.verdict import CONFIDENCE
from app.llm.factory import BackendKind, Dtype, make_backend
from app.privacy.display import epsilon_text
from app.synthesis.data import Record
from app.synthesis.tasks import BUILTIN_TASKS, TaskSpec

DEFAULT_SELECTION = ",".join(DEFAULT_METHODS)
DatasetOpt = Annotated[
    str | None,
    typer.Option(
        "--dataset",
        help=f"A built-in public benchmark ({'|'.join(DATASETS)}): its training split stands "
        "in for the private set.",
    ),
]
DataOpt = Annotated[
    Path | None,
    typer.Option(
        "--data",
        help="A public labelled file of your own, read as dpsyn synthesize reads it (--task, "
        "--spec, or --labels/--label-map, and columns).",
    ),
]
MethodsOpt = Annotated[
    str,
    typer.Option(
        "--methods",
        help="Comma-separated registered methods to try (promptpate needs --public or a "
        "built-in set with public inputs; promptdpsgd trains on the local model: slow on CPU).",
    ),
]
ShotsOpt = Annotated[
    str | None,
    typer.Option("--shots", help="Comma-separated shot counts; default 4 and one per label."),
]
EpsilonsOpt = Annotated[str, typer.Option("--epsilons", help="Comma-separated epsilons to try.")]
SeedsOpt = Annotated[int, typer.Option("--seeds", min=1, max=20, help="Runs per candidate.")]
QueriesOpt = Annotated[
    int,
    typer.Option(
        "--queries", min=10, max=5000, help="Held-out queries (at most a quarter of the set)."
    ),
]
PublicOpt = Annotated[
    Path | None, typer.Option("--public", help="Unlabelled public inputs for promptpate.")
]
ParamOpt = Annotated[
    list[str] | None,
    typer.Option("--param", help="A method parameter NAME=VALUE (as in dpsyn eval)."),
]
JsonOpt = Annotated[bool, typer.Option("--json/--no-json", help="Print the advice as JSON.")]


def _records(
    dataset: str | None, data: Path | None, options: TaskOptions
) -> tuple[TaskSpec, list[Record]]:
    """The public labelled set and its task: a built-in benchmark's training split, or
    ``--data`` read exactly as ``dpsyn synthesize`` reads it (a task name, a spec file, or
    ``--labels``/``--label-map`` and column names or numbers)."""
    if (dataset is None) == (data is None):
        raise fail("give one of --dataset (a built-in benchmark) or --data FILE with its task")
    if dataset is not None:
        if dataset not in DATASETS:
            raise fail(f"--dataset must be one of {', '.join(DATASETS)}, got {dataset!r}")
        train, _test = load_split(dataset)
        return BUILTIN_TASKS[dataset], train
    assert data is not None
    return task_and_records(data, options)


def _public(config: AdviceConfig, dataset: str | None, public: Path | None) -> list[str] | None:
    if not any(get(m).reads_public for m in config.methods):
        return None
    from app.pate.public import read_public

    source = public if public is not None else (public_path(dataset) if dataset else None)
    if source is None:
        raise fail("--methods promptpate needs --public PATH (unlabelled public inputs)")
    return read_public(source)


def print_advice(advice: Advice) -> None:
    """The table, best first, beside the two baselines, and the recommendation."""
    typer.echo(
        f"{advice.task}: {advice.n_standin} public records as the private stand-in, "
        f"{advice.n_queries} held-out queries"
    )
    calibrated = advice.zero_shot_calibrated
    typer.echo(
        f"zero-shot {advice.zero_shot:.1%}"
        + (f" (calibrated {calibrated:.1%})" if calibrated is not None else "")
        + (f", majority label {advice.majority:.1%}" if advice.majority is not None else "")
    )
    typer.echo("| method | shots | ε | accuracy (mean ± SE) | against the baselines | calibrated |")
    typer.echo("|---|---|---|---|---|---|")
    for c in sorted(advice.candidates, key=lambda c: (c.epsilon, -c.mean)):
        cal = f"{sum(c.calibrated) / len(c.calibrated):.1%}" if c.calibrated else "-"
        typer.echo(
            f"| {c.method} | {c.shots} | {epsilon_text(c.epsilon)} | {c.mean:.1%} ± {c.se:.1%} "
            f"| {c.against(advice.bar).outcome.words} | {cal} |"
        )
    if calibrated is not None:
        typer.echo(
            "calibrated: contextual calibration of the same runs' answers, as 'dpsyn prompts "
            "complete --calibrated' answers (no privacy cost)"
        )
    typer.echo(
        f"against the baselines: ahead, behind or cannot tell at {CONFIDENCE}, against the "
        "better of zero-shot and the majority label"
    )
    typer.echo(advice.summary())


@with_groups
def advise_command(
    dataset: DatasetOpt = None,
    data: DataOpt = None,
    task: TaskOpt = None,
    spec: SpecOpt = None,
    methods: MethodsOpt = DEFAULT_SELECTION,
    shots: ShotsOpt = None,
    epsilons: EpsilonsOpt = "1,4",
    seeds: SeedsOpt = 3,
    queries: QueriesOpt = 100,
    public: PublicOpt = None,
    param: ParamOpt = None,
    model: ModelOpt = None,
    dtype: DtypeOpt = Dtype.AUTO,
    as_json: JsonOpt = False,
    *,
    columns: ColumnOptions,  # the group's options (with_groups)
    custom: CustomTaskOptions,
) -> None:
    """Measure methods, shots and epsilons on a public set before spending any budget.

    --data is read as ``dpsyn synthesize`` reads it (--task, --spec, --labels, --label-map,
    column names or numbers); its records stand in for the private set.
    """
    options = TaskOptions(task, spec, custom, columns)
    chosen = tuple(m.strip() for m in methods.split(",") if m.strip())
    try:
        counts = tuple(int(s) for s in shots.split(",")) if shots else ()
    except ValueError:
        raise fail(f"--shots takes comma-separated whole numbers, got {shots!r}") from None
    with reported_errors() as private:
        config = AdviceConfig(
            methods=chosen,
            shots=counts,
            epsilons=_floats(epsilons, "--epsilons"),
            seeds=seeds,
            test_size=queries,
            params=parse_params(param, {}),
        )
        task_spec, records = _records(dataset, data, options)
        private.read(records)  # they stand for the private set: a method's error is checked
        check(task_spec, config)  # before the model loads
        texts = _public(config, dataset, public)
        quiet_progress_bars()
        trains = any(get(m).needs_gradients for m in config.methods)
        backend = make_backend(
            BackendKind.TRANSFORMERS, model=model, url=None, dtype=training_dtype(trains, dtype)
        )
        result = advise(
            task_spec,
            records,
            backend,
            config,
            texts,
            log=lambda line: err.print(line, markup=False, highlight=False),
        )
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        print_advice(result)
