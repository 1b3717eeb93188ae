"""``dpsyn synthesize``: private dataset in, DP demonstrations out.

``--method tang|adadpsyn`` synthesises texts (``app.synthesis``); ``--method promptpate``
labels public inputs with private teacher prompts (``app.pate``); ``--method promptdpsgd``
trains a soft prompt with DP-SGD (``app.promptdpsgd``, local model only) and writes it next
to the JSON result (``--out x.json`` also writes ``x.safetensors``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.custom_task import custom_task, parse_column, parse_pairs, settings_line
from app.cli.errors import err, fail, reported_errors
from app.cli.options import (
    ANSWER_WORDS,
    ICL_INSTRUCTION,
    INSTRUCTION,
    LABEL_COL,
    LABEL_FIELD,
    LABEL_MAP,
    LABELS,
    TEXT_COL,
    TEXT_FIELD,
)
from app.cli.progress import progress_reporter
from app.llm.factory import BackendKind, Dtype, make_backend
from app.methods.registry import Counts, Method, MethodKind, get_method, kinds_where
from app.pate.public import read_public
from app.privacy.accounting import Accounting
from app.privacy.params import AdaDPSynVariant
from app.results import SynthesisResult
from app.synthesis.config import SynthesisConfig
from app.synthesis.data import load_dataset
from app.synthesis.generator import partition_sizes
from app.synthesis.tasks import TaskSpec, get_task

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
    "prompt_length": ("--prompt-length", "prompt_length"),
    "steps": ("--steps", "steps"),
    "batch_size": ("--batch-size", "batch_size"),
    "learning_rate": ("--learning-rate", "learning_rate"),
    "clip_norm": ("--clip-norm", "clip_norm"),
}
# The job's shots have one spelling per method (``Method.cli_shots_option``).
SHOTS_OPTIONS = {"--shots": "shots", "--student-shots": "student_shots"}


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


def _task_spec(
    task: str | None,
    spec: Path | None,
    custom: dict[str, str | None],
    label_map: dict[str, str] | None,
) -> TaskSpec:
    """The task of ``--task``/``--spec``, or of the custom-task options (``--labels`` ...)."""
    given = [f"--{name.replace('_', '-')}" for name, value in custom.items() if value is not None]
    if task is None and spec is None and not (given or label_map):
        raise fail(
            "--task is required: trec|agnews|sst2|mitg|mitd, a spec file, or custom with "
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
    return custom_task(
        custom["labels"],
        label_map,
        custom["answer_words"],
        custom["instruction"],
        custom["icl_instruction"],
        custom["text_field"] or "Text",
        custom["label_field"] or "Label",
    )


def synthesize_command(
    ctx: typer.Context,
    data: Annotated[Path, typer.Option("--data", help="Private dataset file.")],
    task: Annotated[
        str | None,
        typer.Option(
            "--task",
            help="trec|agnews|sst2|mitg|mitd|custom, or a spec file (default: custom when "
            "--labels or --label-map is given).",
        ),
    ] = None,
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
    K: Annotated[int | None, typer.Option("--K", help="Public vocabulary size (100).")] = None,
    variant: Annotated[
        AdaDPSynVariant,
        typer.Option("--variant", help="adadpsyn: pooled (default) or paper (as published)."),
    ] = AdaDPSynVariant.POOLED,
    backend: Annotated[BackendKind, typer.Option("--backend")] = BackendKind.TRANSFORMERS,
    model: Annotated[
        str | None, typer.Option("--model", help="gemma-3-270m, smollm2-135m, or a path.")
    ] = None,
    dtype: Annotated[
        Dtype,
        typer.Option(
            "--dtype",
            help="Local model precision (auto: bfloat16 if native; float32 for promptdpsgd).",
        ),
    ] = Dtype.AUTO,
    url: Annotated[str | None, typer.Option("--url", help="vLLM server URL.")] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Testing only: a known seed voids privacy.")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the result as JSON.")] = None,
    text_col: Annotated[str | None, TEXT_COL] = None,
    label_col: Annotated[str | None, LABEL_COL] = None,
    label_map: Annotated[str | None, LABEL_MAP] = None,
    spec: Annotated[Path | None, typer.Option("--spec", help="Custom task spec file.")] = None,
    labels: Annotated[str | None, LABELS] = None,
    answer_words: Annotated[str | None, ANSWER_WORDS] = None,
    instruction: Annotated[str | None, INSTRUCTION] = None,
    icl_instruction: Annotated[str | None, ICL_INSTRUCTION] = None,
    text_field: Annotated[str | None, TEXT_FIELD] = None,
    label_field: Annotated[str | None, LABEL_FIELD] = None,
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
    prompt_length: Annotated[
        int, typer.Option("--prompt-length", help="promptdpsgd: soft prompt tokens.")
    ] = 8,
    steps: Annotated[int, typer.Option("--steps", help="promptdpsgd: DP-SGD steps.")] = 60,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="promptdpsgd: expected batch size.")
    ] = 16,
    learning_rate: Annotated[
        float, typer.Option("--learning-rate", help="promptdpsgd: Adam learning rate.")
    ] = 0.03,
    clip_norm: Annotated[
        float, typer.Option("--clip-norm", help="promptdpsgd: per-example clipping norm C.")
    ] = 0.1,
) -> None:
    """Generate DP demonstrations from a private dataset.

    tang/adadpsyn synthesise texts token by token; promptpate labels public inputs (--public)
    with teacher prompts built from the private data and keeps the best labelled prompt;
    promptdpsgd trains a soft prompt with DP-SGD (written next to --out, as .safetensors).
    """
    chosen = get_method(method)
    given = _given_options(ctx, locals())
    with reported_errors():
        _check_options(chosen, given, instruction_only=instruction_only, public=public)
        if chosen.needs_gradients:
            if backend is not BackendKind.TRANSFORMERS:
                raise fail(
                    f"--method {chosen.kind.value} needs gradients: it runs on the local model "
                    f"(--backend transformers), not --backend {backend.value}"
                )
            if out is None:
                raise fail(
                    f"--method {chosen.kind.value} needs --out FILE.json: its result is a soft "
                    "prompt, written next to it as FILE.safetensors"
                )
        target = 0.0 if instruction_only else _parse_epsilon(epsilon)
        custom = {
            "labels": labels,
            "answer_words": answer_words,
            "instruction": instruction,
            "icl_instruction": icl_instruction,
            "text_field": text_field,
            "label_field": label_field,
        }
        pairs = parse_pairs(label_map, "--label-map") if label_map else None
        spec_task = _task_spec(task, spec, custom, pairs)
        if candidates:
            spec_task = spec_task.with_candidates([c.strip() for c in candidates.split(",")])
        records = load_dataset(
            spec_task,
            data,
            text_col=parse_column(text_col),
            label_col=parse_column(label_col),
            label_map=pairs,
        )
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
        llm = make_backend(backend, model=model, url=url, dtype=_dtype_for(chosen, dtype))
        result = _with_progress(
            chosen.verb,
            chosen.unit,
            lambda progress: plan.run(records, llm, progress, inputs),
            _settings_header(spec_task, config),
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
        out.parent.mkdir(parents=True, exist_ok=True)  # a long run's result is not lost
        out.write_text(json.dumps(result.to_dict(), indent=2))
        typer.echo(f"wrote {out}")
        if result.soft_prompt is not None:
            tensor = soft_prompt_path(out)
            tensor.write_bytes(result.soft_prompt.to_bytes())
            typer.echo(f"wrote {tensor} (soft prompt, sha256 {result.soft_prompt.sha256[:12]})")


def _dtype_for(method: Method, dtype: Dtype) -> str:
    """The local model's precision: ``auto`` means float32 for a method that trains
    (measured on this project's 2-core CPU with native bfloat16: a DP-SGD step of 16 SST-2
    examples takes 3.2 s in float32 and 18-20 s in bfloat16, whose backward pass is slow)."""
    if method.needs_gradients and dtype is Dtype.AUTO:
        return Dtype.FLOAT32.value
    return dtype.value


def soft_prompt_path(out: Path) -> Path:
    """Where a soft prompt goes beside the JSON result ``out``: the same name, .safetensors."""
    return out.with_suffix(".safetensors")


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
            shots = spec.cli_shots_option or "no shots (it has no demonstrations)"
            raise fail(f"{option} is for {takers}; {name} takes {shots}")
    takes = spec.params.model_fields
    unused = [(p, o) for p, (o, _) in PARAM_OPTIONS.items() if o in given and p not in takes]
    if unused:
        param = unused[0][0]
        takers = "/".join(kinds_where(lambda m: param in m.params.model_fields))
        raise fail(f"{', '.join(o for _, o in unused)} are for {takers}, not {name}")


def _with_progress(
    verb: str,
    unit: str,
    job: Callable[[Callable[[int, int], None]], SynthesisResult],
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


def _settings_header(task: TaskSpec, config: object) -> str | None:
    """The settings line of a token-loop run (shots, M, N, tmax, K and which are defaults);
    None for PromptPATE and for the instruction-only baseline (it reads no M, N or K)."""
    if not isinstance(config, SynthesisConfig) or config.epsilon == 0:
        return None
    return settings_line(
        task.name,
        config.method.value,
        config.shots,
        M=config.M,
        N=config.N,
        tmax=config.tmax,
        K=config.K,
    )
