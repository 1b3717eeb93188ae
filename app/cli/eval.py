"""``dpsyn eval``: the ICL evaluation grid on one shared data set (table, JSON, plot)."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from app.cli.errors import err, fail, reported_errors
from app.cli.progress import progress_reporter
from app.eval.datasets import DATASETS, load_split, public_path
from app.eval.experiment import (
    PROFILES,
    ExperimentConfig,
    aggregate,
    plot,
    run_experiment,
    settings_grid,
    write_json,
    write_table,
)
from app.llm.factory import BackendKind, Dtype, make_backend
from app.privacy.budget import is_epsilon
from app.privacy.params import AdaDPSynVariant
from app.synthesis.config import DEFAULT_SHOTS
from app.synthesis.tasks import BUILTIN_TASKS


def _floats(text: str, option: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise fail(f"{option} takes comma-separated numbers, got {text!r}") from None
    if not values or not all(is_epsilon(v) for v in values):
        raise fail(f"{option} values must be finite and > 0, got {text!r}")
    return values


def eval_command(
    dataset: Annotated[str, typer.Option("--dataset", help="trec|sst2|agnews|mitg|mitd")],
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="100 test queries, 2 seeds, T_max 8, K 50; AG News M 6, MIT M 20 (CPU profile).",
        ),
    ] = False,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            help="quick (= --quick), compare (quick with 5 seeds, 300 test queries: about 90 "
            "min for SST-2 on 2 cores) or paper (every test query, the papers' T_max and K).",
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="gemma-3-270m, smollm2-135m, or a path.")
    ] = None,
    dtype: Annotated[
        Dtype,
        typer.Option(
            "--dtype",
            help="Local model precision (auto: bfloat16 if native; float32 with promptdpsgd).",
        ),
    ] = Dtype.AUTO,
    seeds: Annotated[
        int | None, typer.Option("--seeds", help="Number of seeds (0..n-1); default 5, quick 2.")
    ] = None,
    test_size: Annotated[
        int | None, typer.Option("--test-size", help="Test queries; default all, quick 100.")
    ] = None,
    epsilons: Annotated[str, typer.Option("--epsilons", help="Finite epsilons.")] = "1,2,4,8",
    methods: Annotated[
        str, typer.Option("--methods", help="adadpsyn,tang,promptpate,promptdpsgd")
    ] = "adadpsyn,tang",
    baselines: Annotated[
        bool,
        typer.Option(
            "--baselines/--no-baselines",
            help="The synthesis baselines: instruction-only (epsilon 0), noise-free and real "
            "demonstrations (epsilon inf). Zero-shot always runs.",
        ),
    ] = True,
    public: Annotated[
        Path | None,
        typer.Option(
            "--public",
            help="Unlabelled inputs for PromptPATE (JSONL/CSV/TSV/text); sst2: IMDB sample.",
        ),
    ] = None,
    public_field: Annotated[
        str, typer.Option("--public-field", help="Text field of a JSONL/CSV public file.")
    ] = "text",
    out_dir: Annotated[
        Path | None, typer.Option("--out-dir", help="Default out/eval/<dataset>.")
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Default $DATA_DIR or ../shared/data.")
    ] = None,
    shots: Annotated[int, typer.Option("--shots")] = DEFAULT_SHOTS,
    M: Annotated[int | None, typer.Option("--M")] = None,
    N: Annotated[int | None, typer.Option("--N")] = None,
    tmax: Annotated[int | None, typer.Option("--tmax")] = None,
    K: Annotated[int | None, typer.Option("--K")] = None,
    calibrate: Annotated[
        bool, typer.Option("--calibrate/--no-calibrate", help="Contextual calibration.")
    ] = True,
    variant: Annotated[
        AdaDPSynVariant | None,
        typer.Option("--variant", help="AdaDPSyn variant: pooled (default) or paper."),
    ] = None,
    dpsgd_steps: Annotated[
        int | None, typer.Option("--dpsgd-steps", min=1, help="PromptDPSGD steps (60).")
    ] = None,
    dpsgd_batch_size: Annotated[
        int | None,
        typer.Option("--dpsgd-batch-size", min=1, help="PromptDPSGD expected batch (16)."),
    ] = None,
) -> None:
    """Evaluate ICL accuracy of DP synthetic prompts against the papers' baselines."""
    if dataset not in DATASETS:
        raise fail(f"--dataset must be one of {', '.join(DATASETS)}, got {dataset!r}")
    method_list = tuple(m.strip() for m in methods.split(",") if m.strip())
    if quick and profile not in (None, "quick"):
        raise fail(f"--quick is --profile quick; it cannot be combined with --profile {profile}")
    if profile is not None and profile not in PROFILES:
        raise fail(f"--profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    base = ExperimentConfig.profile(profile or ("quick" if quick else "paper"), dataset)
    overrides = dict(base.overrides)
    overrides.update({k: v for k, v in {"M": M, "N": N, "tmax": tmax, "K": K}.items() if v})
    if variant is not None:
        overrides["variant"] = variant
    if seeds is not None and seeds < 1:
        raise fail("--seeds must be at least 1")
    if test_size is not None and test_size < 1:
        raise fail("--test-size must be at least 1")
    config = ExperimentConfig(
        seeds=tuple(range(seeds)) if seeds else base.seeds,
        test_size=test_size if test_size else base.test_size,
        epsilons=_floats(epsilons, "--epsilons"),
        methods=method_list,
        shots=shots,
        overrides=overrides,
        calibrated=calibrate,
        pate=dict(base.pate),
        dpsgd={
            **base.dpsgd,
            **{
                k: v
                for k, v in {"steps": dpsgd_steps, "batch_size": dpsgd_batch_size}.items()
                if v is not None
            },
        },
        baselines=baselines,
    )
    try:
        grid = settings_grid(config.epsilons, config.methods, config.baselines)
    except ValueError as error:
        raise fail(str(error)) from None
    out = out_dir if out_dir is not None else Path("out") / "eval" / dataset
    task = BUILTIN_TASKS[dataset]
    started = time.perf_counter()
    with reported_errors():
        train, test = load_split(dataset, data_dir)
        public_texts = None
        if "promptpate" in method_list:
            from app.pate.public import read_public

            source = public if public is not None else public_path(dataset, data_dir)
            if source is None:
                raise fail(f"--methods promptpate needs --public PATH for {dataset}")
            public_texts = read_public(source, public_field)
        err.print(
            f"{dataset}: {len(train)} training and {len(test)} test records; "
            f"{len(grid)} settings x {len(config.seeds)} seeds",
            highlight=False,
        )
        # auto: float32 when a method trains (bfloat16 backward passes are 5x slower on CPU)
        chosen = Dtype.FLOAT32 if dtype is Dtype.AUTO and "promptdpsgd" in method_list else dtype
        backend = make_backend(BackendKind.TRANSFORMERS, model=model, url=None, dtype=chosen)
        with progress_reporter(err, "evaluating", "runs") as report:
            runs = run_experiment(
                task,
                train,
                test,
                backend,
                config,
                log=lambda line: err.print(line, markup=False, highlight=False),
                public=public_texts,
                progress=lambda done, total: report(done, total),
            )

    rows = aggregate(runs, grid)
    title = f"{dataset} ({backend.name})"
    meta = {
        "dataset": dataset,
        "model": backend.name,
        "quick": quick,
        "profile": profile or ("quick" if quick else "paper"),
        "config": asdict(config),
        "seconds": time.perf_counter() - started,
    }
    paths = [
        write_table(rows, out / "results.md", title),
        write_json(runs, out / "runs.json", meta),
        plot(rows, out / "accuracy_vs_epsilon.png", title),
    ]
    typer.echo((out / "results.md").read_text(encoding="utf-8"))
    for path in paths:
        err.print(f"wrote {path}", markup=False, highlight=False)
