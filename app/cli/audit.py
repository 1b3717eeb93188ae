"""``dpsyn audit``: membership inference (Duan et al.) on real 1-shot prompts and on what any
registered method releases (by default AdaDPSyn's 1-shot prompts; PromptDPSGD's soft prompts
with ``--methods adadpsyn,promptdpsgd:10``).

See :mod:`app.eval.audit` for the design. No method is named here: ``--methods`` takes the
registered ones, and a method's parameters are its own options, generated from its
declaration as ``dpsyn synthesize``'s are (:mod:`app.cli.method_options`). Progress goes to
stderr; no record text is printed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.errors import err, fail, reported_errors
from app.cli.method_options import RegistryCommand, given_options, method_options
from app.cli.model_options import ModelOpt, quiet_progress_bars
from app.eval.audit import (
    AttackSummary,
    AuditConfig,
    MethodAttack,
    check_attacks,
    run_audit,
    write_outputs,
)
from app.llm.factory import BackendKind, Dtype, make_backend
from app.llm.models import DEFAULT_MODEL
from app.methods.registry import DEFAULT_METHOD, get_method
from app.privacy.accounting import Accounting
from app.synthesis.data import load_dataset
from app.synthesis.tasks import BUILTIN_TASKS

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN_FILES = {
    "sst2": "sst2/stsa.binary.train",
    "trec": "trec/train.txt",
    "agnews": "agnews/train_first10429.csv",
}


class AuditDataset(StrEnum):
    SST2 = "sst2"
    TREC = "trec"
    AGNEWS = "agnews"


# --quick: a few minutes on the CPU model (and each method's audit_quick_params). Full: the
# papers' trial counts, and each method's audit_params.
QUICK = {"trials": 20, "method_trials": 5, "candidates": 16}
FULL = {"trials": 100, "method_trials": 20, "candidates": 16}


def default_data_dir() -> Path:
    """``$DATA_DIR`` if set, else ``../shared/data`` next to the repository."""
    env = os.environ.get("DATA_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


DatasetOption = Annotated[
    AuditDataset, typer.Option("--dataset", help="The task audited: its training records.")
]
Quick = Annotated[
    bool,
    typer.Option(
        "--quick/--no-quick", help="20 real / 5 trials per method, each method's quick settings."
    ),
]
Trials = Annotated[
    int | None, typer.Option("--trials", min=0, help="Real-prompt trials (default 100).")
]
MethodsOption = Annotated[
    str,
    typer.Option(
        "--methods",
        help="Comma-separated registered methods to attack ({methods}), each NAME or "
        "NAME:TRIALS (trials default to --method-trials).",
    ),
]
MethodTrials = Annotated[
    int | None,
    typer.Option(
        "--method-trials",
        "--synthetic-trials",
        min=0,
        help="Trials per method (default 20, quick 5): each runs the method on a member subset.",
    ),
]
Candidates = Annotated[
    int | None,
    typer.Option("--candidates", min=2, help="Per real trial: 1 member + the rest held out."),
]
Members = Annotated[
    int,
    typer.Option(
        "--members",
        "--dpsgd-members",
        min=2,
        help="Members per trial of a method without a per-label subset (e.g. promptdpsgd).",
    ),
]
Epsilon = Annotated[float, typer.Option("--epsilon", help="The methods' target (> 0).")]
AccountingOption = Annotated[
    Accounting,
    typer.Option(
        "--accounting",
        help="How the methods are priced to --epsilon: tight (default) or paper.",
    ),
]
DtypeOption = Annotated[
    Dtype, typer.Option("--dtype", help="Local model precision (auto: bfloat16 if native).")
]
Seed = Annotated[int, typer.Option("--seed", help="Seeds the split, the trials and the bootstrap.")]
DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data folder (default $DATA_DIR or ../shared/data)."),
]
OutDir = Annotated[Path | None, typer.Option("--out-dir", help="Default out/audit/<dataset>.")]


def trial_settings(quick: bool, given: dict[str, int | None]) -> dict[str, int]:
    """Trial counts: --quick's or the papers', with the options that are set."""
    base = dict(QUICK if quick else FULL)
    base.update({key: value for key, value in given.items() if value is not None})
    return base


def attacks(
    methods: str, trials: int, quick: bool, given: Mapping[str, Any]
) -> tuple[MethodAttack, ...]:
    """One attack per ``--methods`` entry (NAME or NAME:TRIALS), each with the method
    options ``given`` (by flag) that it takes over its quick settings under ``--quick``; a
    ValueError for an unregistered name, a method the audit cannot attack (saying why), a
    bad count, or an option none of them takes."""
    chosen: list[MethodAttack] = []
    for entry in (e.strip() for e in methods.split(",") if e.strip()):
        name, _, count = entry.partition(":")
        if count and not (count.isdigit()):
            raise ValueError(f"--methods {entry}: TRIALS must be a whole number >= 0")
        method = get_method(name)
        if (refusal := method.audit_refusal()) is not None:  # first: no option can help it
            raise ValueError(f"dpsyn audit cannot attack method {name}: {refusal}")
        takes = {o.flag: o.params[name].name for o in method_options() if name in o.params}
        own = {takes[flag]: value for flag, value in given.items() if flag in takes}
        defaults = method.audit_quick_params if quick else {}
        params = {**defaults, **own}
        chosen.append(MethodAttack(name, int(count) if count else trials, params))
    if not chosen:
        raise ValueError("--methods names no method")
    _check_taken(given, [a.method for a in chosen])
    return tuple(chosen)


def _check_taken(given: Mapping[str, Any], names: list[str]) -> None:
    """A ValueError for a given option that none of the methods ``names`` takes, or that
    sets the job's shots (the audit's prompts are 1-shot)."""
    for option in method_options():
        if option.flag not in given:
            continue
        if option.shots:
            raise ValueError(f"{option.flag}: the audit's prompts are 1-shot")
        if not any(name in option.params for name in names):
            raise ValueError(f"{option.flag} is for {option.takers()}, not {','.join(names)}")


def _report(summaries: dict[str, AttackSummary], paths: dict[str, Path]) -> None:
    """One line per attack (its mean AUC and interval) and the files written, on stdout."""
    for summary in summaries.values():
        low, high = summary.ci()
        typer.echo(
            f"{summary.name}: AUC {summary.mean_auc():.3f} (95% CI {low:.3f}-{high:.3f}) "
            f"over {len(summary.trials)} trials"
        )
    typer.echo(f"wrote {paths['json']}, {paths['markdown']}, {paths['plot']}")


def _progress(which: str, done: int, total: int) -> None:
    err.print(f"{which}: trial {done}/{total}", highlight=False)


def _audit(
    dataset: DatasetOption = AuditDataset.SST2,
    quick: Quick = False,
    trials: Trials = None,
    methods: MethodsOption = DEFAULT_METHOD,
    method_trials: MethodTrials = None,
    candidates: Candidates = None,
    members: Members = 32,
    epsilon: Epsilon = 8.0,
    accounting: AccountingOption = Accounting.TIGHT,
    model: ModelOpt = None,
    dtype: DtypeOption = Dtype.AUTO,
    seed: Seed = 0,
    data_dir: DataDir = None,
    out_dir: OutDir = None,
    **method_options: Any,
) -> None:
    """Membership inference AUC of real 1-shot prompts vs what registered methods release
    (default: AdaDPSyn's 1-shot prompts), with ROC curves. A method's own options are listed
    under "Method parameters"; each applies to the methods that take it."""
    if not epsilon > 0:
        raise fail(f"--epsilon must be > 0, got {epsilon}")
    name = dataset.value
    base = trial_settings(
        quick, {"trials": trials, "method_trials": method_trials, "candidates": candidates}
    )
    started = time.perf_counter()
    with reported_errors() as private:
        chosen = attacks(methods, base["method_trials"], quick, given_options(method_options))
        config = AuditConfig(
            trials=base["trials"],
            candidates=base["candidates"],
            attacks=chosen,
            members=members,
            epsilon=epsilon,
            accounting=accounting,
            seed=seed,
        )
        check_attacks(config)  # before the data and the model load
        records = load_dataset(
            BUILTIN_TASKS[name], (data_dir or default_data_dir()) / TRAIN_FILES[name]
        )
        private.read(records)  # the members the audit attacks: a method's error is checked
        quiet_progress_bars()
        llm = make_backend(BackendKind.TRANSFORMERS, model=model, url=None, dtype=dtype)
        summaries = run_audit(BUILTIN_TASKS[name], records, llm, config, _progress)
        meta = {
            "dataset": name,
            "model": llm.name or model or DEFAULT_MODEL,
            "seed": seed,
            "config": {
                **base,
                "members": members,
                "methods": {a.method: {"trials": a.trials, **a.params} for a in chosen},
                "epsilon": epsilon,
                "accounting": accounting.value,
            },
            "train_records": len(records),
            "seconds": time.perf_counter() - started,
        }
        paths = write_outputs(summaries, meta, out_dir or Path("out") / "audit" / name)
    _report(summaries, paths)


audit_command = RegistryCommand(_audit)
