"""``dpsyn synthesize``: private dataset in, DP demonstrations out.

``--method tang|adadpsyn`` synthesises texts (``app.synthesis``); ``--method promptpate``
labels public inputs with private teacher prompts (``app.pate``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from app.cli.errors import err, fail, reported_errors
from app.llm.factory import BackendKind, Dtype, make_backend
from app.methods.registry import Counts, Method, MethodKind, get_method, kinds_where
from app.pate.public import read_public
from app.privacy.accounting import Accounting
from app.privacy.params import AdaDPSynVariant
from app.synthesis.data import load_dataset
from app.synthesis.generator import SynthesisResult, partition_sizes
from app.synthesis.tasks import TaskKind, TaskSpec, get_task

# The options that set a method's parameters, by parameter name (this command's argument
# where it differs): a method refuses those of the others (``app.methods``), naming them.
PARAM_OPTIONS = {
    "M": ("--M", "M"),
    "N": ("--N", "N"),
    "tmax": ("--tmax", "tmax"),
    "K": ("--K", "K"),
    "variant": ("--variant", "variant"),
    "teachers": ("--teachers", "teachers"),
    "shots": ("--teacher-shots", "teacher_shots"),
    "queries": ("--queries", "queries"),
    "max_public": ("--max-public", "max_public"),
    "max_chars": ("--max-chars", "max_chars"),
}
# The job's shots have one spelling per method (``Method.cli_shots_option``).
SHOTS_OPTIONS = {"--shots": "shots", "--student-shots": "student_shots"}


def _parse_epsilon(text: str) -> float:
    value = float(text)  # accepts "inf"
    if math.isnan(value) or value <= 0:
        raise fail(
            f"--epsilon must be > 0 (or inf for the no-noise baseline), got {text}; "
            "for the epsilon = 0 baseline use --instruction-only"
        )
    return value


def _custom_task(
    labels: str | None, instruction: str | None, text_field: str, label_field: str
) -> TaskSpec:
    if not labels:
        raise fail("--task custom needs --spec FILE or --labels a,b,...")
    names = [x.strip() for x in labels.split(",") if x.strip()]
    return TaskSpec(
        name="custom",
        kind=TaskKind.CLASSIFICATION,
        instruction=instruction or f"Given a {label_field.lower()}, write a text of that kind.",
        icl_instruction=f"Classify each text by its {label_field.lower()}.",
        text_field=text_field,
        label_field=label_field,
        labels=tuple(names),
    )


def synthesize_command(
    ctx: typer.Context,
    data: Annotated[Path, typer.Option("--data", help="Private dataset file.")],
    task: Annotated[
        str, typer.Option("--task", help="trec|agnews|sst2|mitg|mitd|custom, or a spec file.")
    ],
    epsilon: Annotated[
        str, typer.Option("--epsilon", help="Privacy budget (> 0, or inf: no noise).")
    ] = "4",
    method: Annotated[MethodKind, typer.Option("--method")] = MethodKind.ADADPSYN,
    instruction_only: Annotated[
        bool, typer.Option("--instruction-only", help="epsilon = 0 baseline: no private data.")
    ] = False,
    delta: Annotated[float | None, typer.Option("--delta", help="Default 1/|D|.")] = None,
    accounting: Annotated[Accounting, typer.Option("--accounting")] = Accounting.TIGHT,
    shots: Annotated[
        int | None, typer.Option("--shots", help="Demonstrations (tang/adadpsyn; default 4).")
    ] = None,
    M: Annotated[int | None, typer.Option("--M")] = None,
    N: Annotated[int | None, typer.Option("--N")] = None,
    tmax: Annotated[int | None, typer.Option("--tmax")] = None,
    K: Annotated[int, typer.Option("--K", help="Public vocabulary size.")] = 100,
    variant: Annotated[
        AdaDPSynVariant,
        typer.Option("--variant", help="adadpsyn: pooled (default) or paper (as published)."),
    ] = AdaDPSynVariant.POOLED,
    backend: Annotated[BackendKind, typer.Option("--backend")] = BackendKind.TRANSFORMERS,
    model: Annotated[
        str | None, typer.Option("--model", help="gemma-3-270m, smollm2-135m, or a path.")
    ] = None,
    dtype: Annotated[
        Dtype, typer.Option("--dtype", help="Local model precision (auto: bfloat16 if native).")
    ] = Dtype.AUTO,
    url: Annotated[str | None, typer.Option("--url", help="vLLM server URL.")] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Testing only: a known seed voids privacy.")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the result as JSON.")] = None,
    text_col: Annotated[str | None, typer.Option("--text-col")] = None,
    label_col: Annotated[str | None, typer.Option("--label-col")] = None,
    spec: Annotated[Path | None, typer.Option("--spec", help="Custom task spec file.")] = None,
    labels: Annotated[str | None, typer.Option("--labels", help="Custom task labels.")] = None,
    instruction: Annotated[str | None, typer.Option("--instruction")] = None,
    text_field: Annotated[str, typer.Option("--text-field")] = "Text",
    label_field: Annotated[str, typer.Option("--label-field")] = "Label",
    candidates: Annotated[
        str | None, typer.Option("--candidates", help="Extraction: public slot values, a,b,...")
    ] = None,
    public: Annotated[
        Path | None,
        typer.Option("--public", help="promptpate: public unlabelled inputs (.jsonl/.csv/.txt)."),
    ] = None,
    public_field: Annotated[
        str, typer.Option("--public-field", help="promptpate: JSONL field or CSV column.")
    ] = "text",
    teachers: Annotated[
        int, typer.Option("--teachers", help="promptpate: teacher prompts (ensemble size).")
    ] = 100,
    teacher_shots: Annotated[
        int, typer.Option("--teacher-shots", help="promptpate: private examples per teacher.")
    ] = 1,
    queries: Annotated[
        int, typer.Option("--queries", help="promptpate: answered queries the noise is sized for.")
    ] = 100,
    max_public: Annotated[
        int, typer.Option("--max-public", help="promptpate: public inputs processed at most.")
    ] = 1000,
    student_shots: Annotated[
        int, typer.Option("--student-shots", help="promptpate: examples in the result prompt.")
    ] = 4,
    max_chars: Annotated[
        int, typer.Option("--max-chars", help="promptpate: public inputs cut to this length.")
    ] = 600,
) -> None:
    """Generate DP demonstrations from a private dataset.

    tang/adadpsyn synthesise texts token by token; promptpate labels public inputs (--public)
    with teacher prompts built from the private data and keeps the best labelled prompt.
    """
    chosen = get_method(method)
    given = _given_options(ctx, locals())
    with reported_errors():
        _check_options(chosen, given, instruction_only=instruction_only, public=public)
        target = 0.0 if instruction_only else _parse_epsilon(epsilon)
        if task == "custom":
            spec_task = (
                get_task(spec)
                if spec
                else _custom_task(labels, instruction, text_field, label_field)
            )
        else:
            spec_task = get_task(task)
        if candidates:
            spec_task = spec_task.with_candidates([c.strip() for c in candidates.split(",")])
        records = load_dataset(spec_task, data, text_col=text_col, label_col=label_col)
        config = chosen.configure(
            spec_task,
            epsilon=target,
            delta=delta,
            shots=given.get(chosen.cli_shots_option),
            accounting=accounting,
            params={p: given[o] for p, (o, _) in PARAM_OPTIONS.items() if o in given},
            seed=seed,
        )
        inputs = read_public(public, public_field) if public is not None else []
        counts = Counts(partition_sizes(spec_task, records), len(records), len(inputs))
        plan = chosen.plan(spec_task, config, counts)
        llm = make_backend(backend, model=model, url=url, dtype=dtype)
        result = _with_progress(
            chosen.verb,
            chosen.unit,
            lambda progress: plan.run(records, llm, progress, inputs),
        )

    for number, demo in enumerate(result.demonstrations, 1):
        typer.echo(f"[{number}] {spec_task.label_field}: {demo.label}")
        typer.echo(f"    {spec_task.text_field}: {demo.text}")
    if (line := chosen.report(result)) is not None:
        typer.echo(line)
    typer.echo(
        f"epsilon = {result.epsilon:.4g} at delta = {result.delta:.3g} "
        f"({result.method}, {accounting.value} accounting, model {result.model})"
    )
    if out is not None:
        out.write_text(json.dumps(result.to_dict(), indent=2))
        typer.echo(f"wrote {out}")


def _given_options(ctx: typer.Context, arguments: dict[str, Any]) -> dict[str, Any]:
    """The method options given on the command line (not left at a default), by option."""
    options = {**dict(PARAM_OPTIONS.values()), **SHOTS_OPTIONS}
    given = {}
    for option, argument in options.items():
        source = ctx.get_parameter_source(argument)
        if source is not None and source.name != "DEFAULT":  # typer bundles its own click
            given[option] = arguments[argument]
    return given


def _check_options(
    spec: Method, given: dict[str, Any], *, instruction_only: bool, public: Path | None
) -> None:
    """Refuse options the method would silently ignore, naming the methods that take them."""
    name = spec.kind.value
    readers = "/".join(kinds_where(lambda m: m.reads_public))
    if spec.reads_public and public is None:
        raise fail(f"--method {name} needs --public FILE (public unlabelled inputs)")
    if not spec.reads_public and public is not None:
        raise fail(f"--public is only used with --method {readers}")
    if instruction_only and not spec.zero_epsilon_baseline:
        baselines = "/".join(kinds_where(lambda m: m.zero_epsilon_baseline))
        raise fail(f"--instruction-only is a baseline of {baselines}, not {name}")
    for option in ("--shots", "--student-shots"):
        if option in given and option != spec.cli_shots_option:
            takers = "/".join(kinds_where(lambda m, o=option: m.cli_shots_option == o))
            raise fail(f"{option} is for {takers}; {name} takes {spec.cli_shots_option}")
    takes = spec.params.model_fields
    unused = [(p, o) for p, (o, _) in PARAM_OPTIONS.items() if o in given and p not in takes]
    if unused:
        param = unused[0][0]
        takers = "/".join(kinds_where(lambda m: param in m.params.model_fields))
        raise fail(f"{', '.join(o for _, o in unused)} are for {takers}, not {name}")


def _with_progress(
    verb: str, unit: str, job: Callable[[Callable[[int, int], None]], SynthesisResult]
) -> SynthesisResult:
    """Run ``job`` with a transient progress bar on stderr fed by its progress callback."""
    with Progress(
        TextColumn(verb),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn(unit),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        bar_task = bar.add_task(unit, total=None)
        return job(lambda done, total: bar.update(bar_task, completed=done, total=total))
