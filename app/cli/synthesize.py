"""``dpsyn synthesize``: private dataset in, DP demonstrations (or a soft prompt) out.

``--method`` is any registered method (``app.methods.registry``); its parameters are options
of their own, made from the method's declarations (:mod:`app.cli.method_options`), and an
option of another method is refused by name. A method whose result is a soft prompt writes it
next to the JSON result (``--out x.json`` also writes ``x.safetensors``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.custom_task import (
    custom_task,
    empty_labels,
    given_flags,
    label_counts_line,
    parse_column,
    parse_pairs,
    shots_coverage,
)
from app.cli.errors import err, fail, reported_errors
from app.cli.method_options import (
    RegistryCommand,
    given_options,
    method_inputs,
    refuse_other_options,
)
from app.cli.model_options import DtypeOpt, ModelOpt, quiet_progress_bars, training_dtype
from app.cli.options import (
    ColumnOptions,
    CustomTaskOptions,
    PaperAccountingOpt,
    RegisteredMethodOpt,
    with_groups,
)
from app.cli.progress import progress_reporter
from app.llm.factory import BackendKind, Dtype, make_backend
from app.methods.base import Stored, plan_local
from app.methods.registry import (
    DEFAULT_METHOD,
    Method,
    counts_refusal,
    get_method,
    kinds_where,
)
from app.pate.public import read_public
from app.privacy.accounting import Accounting
from app.privacy.display import delta_text, epsilon_text
from app.privacy.unit import DEFAULT_DELTA
from app.results import Progress, SynthesisResult
from app.synthesis.data import Record, load_dataset, own_format
from app.synthesis.generator import partition_sizes
from app.synthesis.tasks import TaskSpec, get_task

# The command's own options (the methods' come from the registry).
DataOpt = Annotated[Path, typer.Option("--data", help="Private dataset file.")]
TaskOpt = Annotated[
    str | None,
    typer.Option(
        "--task",
        help="trec|trec14|agnews|sst2|mitg|mitd|custom, or a spec file (default: custom when "
        "--labels or --label-map is given).",
    ),
]
EpsilonOpt = Annotated[
    str, typer.Option("--epsilon", help="Privacy budget (> 0, or inf: no noise).")
]
BaselineOpt = Annotated[
    bool,
    typer.Option(
        "--instruction-only/--no-instruction-only", help="epsilon = 0 baseline: no private data."
    ),
]
DeltaOpt = Annotated[
    float | None,
    typer.Option("--delta", help=f"Default {DEFAULT_DELTA:g} (public; never 1/|D|)."),
]
PublicCountsOpt = Annotated[
    bool,
    typer.Option(
        "--public-counts/--no-public-counts",
        help="You, the data owner, declare the records per label of --data public: the run "
        "plans with the exact counts and releases none (needed for --accounting paper). "
        "Default: it releases the counts it plans with under DP, within its epsilon.",
    ),
]
BackendOpt = Annotated[
    BackendKind,
    typer.Option("--backend", help="transformers: the model in this process; vllm: a server."),
]
UrlOpt = Annotated[str | None, typer.Option("--url", help="vLLM server URL.")]
SeedOpt = Annotated[
    int | None, typer.Option("--seed", help="Testing only: a known seed voids privacy.")
]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Write the result as JSON.")]
SpecOpt = Annotated[Path | None, typer.Option("--spec", help="Custom task spec file.")]
CandidatesOpt = Annotated[
    str | None, typer.Option("--candidates", help="Extraction: public slot values, a,b,...")
]
PublicOpt = Annotated[
    Path | None,
    typer.Option(
        "--public",
        help="Public unlabelled inputs (.jsonl/.csv/.txt), for a method that reads them.",
    ),
]
PublicFieldOpt = Annotated[
    str, typer.Option("--public-field", help="--public: JSONL field or CSV column.")
]


@dataclass(frozen=True)
class TaskOptions:
    """The options that say what the task is and how to read the dataset's columns."""

    task: str | None
    spec: Path | None
    custom: CustomTaskOptions
    columns: ColumnOptions
    candidates: str | None = None


def _synthesize(
    data: DataOpt,
    task: TaskOpt = None,
    epsilon: EpsilonOpt = "4",
    method: RegisteredMethodOpt = DEFAULT_METHOD,
    instruction_only: BaselineOpt = False,
    delta: DeltaOpt = None,
    accounting: PaperAccountingOpt = Accounting.TIGHT,
    public_counts: PublicCountsOpt = False,
    backend: BackendOpt = BackendKind.TRANSFORMERS,
    model: ModelOpt = None,
    dtype: DtypeOpt = Dtype.AUTO,
    url: UrlOpt = None,
    seed: SeedOpt = None,
    out: OutOpt = None,
    spec: SpecOpt = None,
    candidates: CandidatesOpt = None,
    public: PublicOpt = None,
    public_field: PublicFieldOpt = "text",
    *,
    columns: ColumnOptions,  # the group's options (with_groups)
    custom: CustomTaskOptions,
    **method_options: Any,
) -> None:
    """Generate DP demonstrations (or a soft prompt) from a private dataset.

    The method's own options are listed under "Method parameters"; each says which methods
    take it. A method that reads public inputs needs --public; a soft prompt is written next
    to --out, as .safetensors.
    """
    options = TaskOptions(task, spec, custom, columns, candidates)
    with reported_errors() as private:
        chosen = get_method(method)
        given = given_options(method_options)
        _check_options(chosen, given, instruction_only=instruction_only, public=public)
        _check_training(chosen, backend, out)
        _check_counts(accounting, public_counts)
        target = 0.0 if instruction_only else _parse_epsilon(epsilon)
        spec_task, records = task_and_records(data, options)
        private.read(records)  # from here on, an error that quotes one is withheld
        shots, params = method_inputs(chosen, given)
        config = chosen.configure(
            spec_task,
            epsilon=target,
            delta=delta,
            shots=shots,
            accounting=accounting,
            params=params,
            seed=seed,
        )
        inputs = read_public(public, public_field) if public is not None else []
        sizes = partition_sizes(spec_task, records)
        local = plan_local(
            chosen, spec_task, config, sizes, declared_public=public_counts, public=len(inputs)
        )
        plan = local.plan
        precision = training_dtype(chosen.needs_gradients, dtype).value
        quiet_progress_bars()
        llm = make_backend(backend, model=model, url=url, dtype=precision)
        result = _with_progress(
            chosen.verb,
            chosen.unit,
            lambda progress: local.report(plan.run(records, llm, progress, inputs)),
            _plan_lines(chosen, spec_task, plan.stored()),
        )
    _print_result(chosen, spec_task, result, accounting, out)


synthesize_command = RegistryCommand(with_groups(_synthesize))


def _plan_lines(method: Method, task: TaskSpec, stored: Stored) -> str | None:
    """The method's settings line and, for a plan that draws a label per shot, how many of
    the task's labels its shots cover (a 14-label task's default 4 shots cover 4)."""
    lines = [line] if (line := method.settings(stored)) else []
    if stored.schedule and task.labels:
        covered = len(set(stored.schedule) & set(task.labels))
        lines.append(shots_coverage(len(stored.schedule), covered, len(task.labels)))
    return "\n".join(lines) or None


def _parse_epsilon(text: str) -> float:
    try:
        value = float(text)  # accepts "inf"
    except ValueError:
        raise fail(f"--epsilon must be a number > 0 (or inf), got {text!r}") from None
    if math.isnan(value) or value <= 0:
        raise fail(
            f"--epsilon must be > 0 (or inf for the no-noise baseline), got {text}; "
            "for the epsilon = 0 baseline use --instruction-only"
        )
    return value


def _task_spec(options: TaskOptions, label_map: dict[str, str] | None) -> TaskSpec:
    """The task of ``--task``/``--spec``, or of the custom-task options (``--labels`` ...)."""
    task, spec, custom = options.task, options.spec, options.custom.given()
    given = given_flags(custom)
    if task is None and spec is None and not (given or label_map):
        raise fail(
            "--task is required: trec|trec14|agnews|sst2|mitg|mitd, a spec file, or custom with "
            "--labels a,b,... (or --spec FILE)"
        )
    if task not in (None, "custom"):
        if given or spec is not None:
            extra = ", ".join(given + (["--spec"] if spec is not None else []))
            raise fail(f"{extra}: only for a custom task (--task custom), not --task {task}")
        return get_task(task)
    if spec is not None:
        if given:
            raise fail(f"{', '.join(given)}: the spec file describes the task, drop these")
        return get_task(spec)
    return custom_task(custom, label_map)


def task_and_records(data: Path, options: TaskOptions) -> tuple[TaskSpec, list[Record]]:
    """The task and the records read with it (``dpsyn advise --data`` reads the same way)."""
    columns = options.columns
    pairs = parse_pairs(columns.label_map, "--label-map") if columns.label_map else None
    task = _task_spec(options, pairs)
    if options.candidates:
        task = task.with_candidates([c.strip() for c in options.candidates.split(",")])
    text_col, label_col = parse_column(columns.text_col), parse_column(columns.label_col)
    if text_col is None and label_col is None and not own_format(task, data):
        text_col, label_col = "text", "label"  # a table, read as an upload reads it
    records = load_dataset(task, data, text_col=text_col, label_col=label_col, label_map=pairs)
    if pairs and (counts := label_counts_line(task, (record.label for record in records))):
        err.print(counts, markup=False, highlight=False, soft_wrap=True)
        # A mapped label without records is a map of another numbering, whatever labels
        # the shots would draw: stop before any model is loaded or budget is spent.
        if empty_labels(task, (record.label for record in records)):
            raise fail("a label of --label-map has no records (see above); fix the map")
    return task, records


def _check_training(method: Method, backend: BackendKind, out: Path | None) -> None:
    """A method that trains with gradients runs on the local model, and its result (a soft
    prompt) needs a file to go to."""
    if not method.needs_gradients:
        return
    if backend is not BackendKind.TRANSFORMERS:
        raise fail(
            f"--method {method.name} needs gradients: it runs on the local model "
            f"(--backend transformers), not --backend {backend.value}"
        )
    if out is None:
        raise fail(
            f"--method {method.name} needs --out FILE.json: its result is a soft prompt, "
            "written next to it as FILE.safetensors"
        )


def _check_counts(accounting: Accounting, public_counts: bool) -> None:
    """Refuse, before any data or model is read, an accounting that needs the counts declared
    public when they are not (paper accounting)."""
    refusal = counts_refusal(accounting, public_counts)
    if refusal is not None:
        raise fail(
            f"--accounting {accounting.value}: {refusal}; pass --public-counts if you may "
            "declare the records per label of --data public, or use --accounting tight"
        )


def soft_prompt_path(out: Path) -> Path:
    """Where a soft prompt goes beside the JSON result ``out``: the same name, .safetensors."""
    return out.with_suffix(".safetensors")


def _check_options(
    method: Method, given: Mapping[str, Any], *, instruction_only: bool, public: Path | None
) -> None:
    """Refuse options the method would silently ignore, naming the methods that take them."""
    name = method.name
    readers = "/".join(kinds_where(lambda m: m.reads_public))
    if method.reads_public and public is None:
        raise fail(f"--method {name} needs --public FILE (public unlabelled inputs)")
    if not method.reads_public and public is not None:
        raise fail(f"--public is only used with --method {readers}")
    if instruction_only and not method.zero_epsilon_baseline:
        baselines = "/".join(kinds_where(lambda m: m.zero_epsilon_baseline))
        raise fail(f"--instruction-only is a baseline of {baselines}, not {name}")
    refuse_other_options(method, given)


def _with_progress(
    verb: str,
    unit: str,
    job: Callable[[Progress], SynthesisResult],
    header: str | None = None,
) -> SynthesisResult:
    """Run ``job`` with progress on stderr (a bar, or plain lines when not a terminal).

    ``header`` is printed at the first progress call: once planning has passed, so a
    planning error stays the only line on stderr.
    """
    with progress_reporter(err, verb, unit) as report:
        pending = [header] if header else []

        def step(done: int, total: int) -> None:
            while pending:
                err.print(pending.pop(), markup=False, highlight=False, soft_wrap=True)
            report(done, total)

        return job(step)


def _print_result(
    method: Method,
    task: TaskSpec,
    result: SynthesisResult,
    accounting: Accounting,
    out: Path | None,
) -> None:
    """The demonstrations, the method's line about the run and the cost; the JSON result
    (and a soft prompt beside it) when ``out`` is given."""
    for number, demo in enumerate(result.demonstrations, 1):
        typer.echo(f"[{number}] {task.label_field}: {demo.label}")
        typer.echo(f"    {task.text_field}: {demo.text}")
    if (line := method.report(result)) is not None:
        typer.echo(line)
    typer.echo(
        f"epsilon = {epsilon_text(result.epsilon)} at delta = {delta_text(result.delta)} "
        f"({result.method}, {accounting.value} accounting, model {result.model})"
    )
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)  # a long run's result is not lost
    out.write_text(json.dumps(result.to_dict(), indent=2))
    typer.echo(f"wrote {out}")
    if result.soft_prompt is not None:
        tensor = soft_prompt_path(out)
        tensor.write_bytes(result.soft_prompt.to_bytes())
        typer.echo(f"wrote {tensor} (soft prompt, sha256 {result.soft_prompt.sha256[:12]})")
