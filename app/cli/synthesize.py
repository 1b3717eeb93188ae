"""``dpsyn synthesize``: private dataset in, DP demonstrations out.

``--method tang|adadpsyn`` synthesises texts (``app.synthesis``); ``--method promptpate``
labels public inputs with private teacher prompts (``app.pate``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

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
from app.llm.base import LLMBackend
from app.llm.factory import BackendKind, Dtype, make_backend
from app.pate.config import PateConfig
from app.pate.plan import plan_pate
from app.pate.public import read_public
from app.pate.run import run_pate
from app.privacy.accounting import Accounting
from app.privacy.params import AdaDPSynVariant, Method
from app.synthesis.config import SynthesisConfig
from app.synthesis.data import Record, load_dataset
from app.synthesis.generator import SynthesisResult, synthesize
from app.synthesis.tasks import TaskSpec, get_task


class CliMethod(StrEnum):
    """The token-loop methods of :class:`Method`, plus PromptPATE (labels public inputs)."""

    TANG = "tang"
    ADADPSYN = "adadpsyn"
    PROMPTPATE = "promptpate"


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
    method: Annotated[CliMethod, typer.Option("--method")] = CliMethod.ADADPSYN,
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
        Dtype, typer.Option("--dtype", help="Local model precision (auto: bfloat16 if native).")
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
) -> None:
    """Generate DP demonstrations from a private dataset.

    tang/adadpsyn synthesise texts token by token; promptpate labels public inputs (--public)
    with teacher prompts built from the private data and keeps the best labelled prompt.
    """
    with reported_errors():
        if method is CliMethod.PROMPTPATE:
            _check_promptpate_options(instruction_only, public, shots, M, N, tmax)
        elif public is not None:
            raise fail("--public is only used with --method promptpate")
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
        if method is CliMethod.PROMPTPATE:
            assert public is not None
            pate_config = PateConfig(
                epsilon=target,
                delta=delta,
                accounting=accounting,
                teachers=teachers,
                shots=teacher_shots,
                queries=queries,
                max_public=max_public,
                student_shots=student_shots,
                max_chars=max_chars,
                seed=seed,
            )
            inputs = read_public(public, public_field)
            plan = plan_pate(spec_task, len(records), len(inputs), pate_config)
            llm = make_backend(backend, model=model, url=url, dtype=dtype)
            result = _with_progress(
                "labelling",
                "public inputs",
                lambda progress: run_pate(spec_task, records, inputs, plan, llm, progress=progress),
            )
            used_accounting = pate_config.accounting
        else:
            config = SynthesisConfig.for_task(
                spec_task.name,
                method=Method(method.value),
                epsilon=target,
                delta=delta,
                accounting=accounting,
                shots=shots,
                M=M,
                N=N,
                tmax=tmax,
                K=K,
                variant=variant,
                seed=seed,
            )
            llm = make_backend(backend, model=model, url=url, dtype=dtype)
            result = _synthesise(spec_task, records, config, llm)
            used_accounting = config.accounting

    for number, demo in enumerate(result.demonstrations, 1):
        typer.echo(f"[{number}] {spec_task.label_field}: {demo.label}")
        typer.echo(f"    {spec_task.text_field}: {demo.text}")
    if result.method == CliMethod.PROMPTPATE.value:
        stats = result.stats
        typer.echo(
            f"labelled {stats['answered']:.0f} of {stats['processed']:.0f} public inputs "
            f"({stats['rejected']:.0f} rejected); student holdout accuracy "
            f"{stats['holdout_accuracy']:.3f}"
        )
    typer.echo(
        f"epsilon = {result.epsilon:.4g} at delta = {result.delta:.3g} "
        f"({result.method}, {used_accounting.value} accounting, model {result.model})"
    )
    if out is not None:
        out.write_text(json.dumps(result.to_dict(), indent=2))
        typer.echo(f"wrote {out}")


def _check_promptpate_options(
    instruction_only: bool,
    public: Path | None,
    shots: int | None,
    M: int | None,
    N: int | None,
    tmax: int | None,
) -> None:
    """Refuse options PromptPATE would silently ignore, naming the ones it takes instead."""
    if public is None:
        raise fail("--method promptpate needs --public FILE (public unlabelled inputs)")
    if instruction_only:
        raise fail("--instruction-only is a baseline of the token-loop methods, not promptpate")
    if shots is not None:
        raise fail("--shots is for tang/adadpsyn; promptpate takes --student-shots")
    unused = [name for name, value in (("--M", M), ("--N", N), ("--tmax", tmax)) if value]
    if unused:
        raise fail(f"{', '.join(unused)} are for tang/adadpsyn, not promptpate")


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


def _synthesise(
    task: TaskSpec, records: list[Record], config: SynthesisConfig, llm: LLMBackend
) -> SynthesisResult:
    settings = None
    if config.epsilon > 0:  # the instruction-only baseline reads no M, N or K
        settings = settings_line(
            task.name,
            config.method.value,
            config.shots,
            M=config.M,
            N=config.N,
            tmax=config.tmax,
            K=config.K,
        )
    return _with_progress(
        "synthesising",
        "tokens",
        lambda progress: synthesize(task, records, config, llm, progress=progress),
        settings,
    )
