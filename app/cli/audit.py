"""``dpsyn audit``: membership inference (Duan et al.) on real and AdaDPSyn 1-shot prompts,
and on PromptDPSGD soft prompts (``--dpsgd-trials``).

See :mod:`app.eval.audit` for the design. Progress goes to stderr; no record text is printed.
"""

from __future__ import annotations

import os
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.errors import err, fail, reported_errors
from app.cli.model_options import ModelOpt, quiet_progress_bars
from app.llm.factory import BackendKind, Dtype, make_backend
from app.llm.models import DEFAULT_MODEL
from app.privacy.accounting import Accounting
from app.synthesis.config import TASK_DEFAULTS
from app.synthesis.data import load_dataset
from app.synthesis.tasks import BUILTIN_TASKS

if TYPE_CHECKING:
    from app.eval.audit import AttackSummary

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


# --quick: a few minutes on the CPU model. Full: the papers' trial counts and T_max.
QUICK = {"trials": 20, "synthetic_trials": 5, "candidates": 16, "M": 10, "N": 1, "tmax": 8, "K": 50}


def default_data_dir() -> Path:
    """``$DATA_DIR`` if set, else ``../shared/data`` next to the repository."""
    env = os.environ.get("DATA_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


DatasetOption = Annotated[AuditDataset, typer.Option("--dataset")]
Quick = Annotated[bool, typer.Option("--quick", help="20 real / 5 AdaDPSyn trials, T_max 8, K 50.")]
Trials = Annotated[
    int | None, typer.Option("--trials", min=0, help="Real-prompt trials (default 100).")
]
SyntheticTrials = Annotated[
    int | None, typer.Option("--synthetic-trials", min=0, help="AdaDPSyn trials (default 20).")
]
Candidates = Annotated[
    int | None,
    typer.Option("--candidates", min=2, help="Per real trial: 1 member + the rest held out."),
]
DpsgdTrials = Annotated[
    int,
    typer.Option(
        "--dpsgd-trials",
        min=0,
        help="PromptDPSGD trials (default 0): each trains a soft prompt on a member subset.",
    ),
]
DpsgdMembers = Annotated[
    int, typer.Option("--dpsgd-members", min=2, help="PromptDPSGD: members per trial.")
]
DpsgdSteps = Annotated[
    int, typer.Option("--dpsgd-steps", min=1, help="PromptDPSGD: DP-SGD steps per trial.")
]
DpsgdBatch = Annotated[
    int, typer.Option("--dpsgd-batch-size", min=1, help="PromptDPSGD: expected batch.")
]
Epsilon = Annotated[float, typer.Option("--epsilon", help="AdaDPSyn and PromptDPSGD target (> 0).")]
MOption = Annotated[int | None, typer.Option("--M", min=1)]
NOption = Annotated[int | None, typer.Option("--N", min=1)]
TmaxOption = Annotated[int | None, typer.Option("--tmax", min=1)]
KOption = Annotated[int | None, typer.Option("--K", min=2)]
AccountingOption = Annotated[Accounting, typer.Option("--accounting")]
DtypeOption = Annotated[
    Dtype, typer.Option("--dtype", help="Local model precision (auto: bfloat16 if native).")
]
Seed = Annotated[int, typer.Option("--seed")]
DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data folder (default $DATA_DIR or ../shared/data)."),
]
OutDir = Annotated[Path | None, typer.Option("--out-dir", help="Default out/audit/<dataset>.")]


def trial_settings(name: str, quick: bool, given: dict[str, int | None]) -> dict[str, int]:
    """Trial counts and AdaDPSyn's shape: --quick's or the papers' (the task's M, N and
    T_max), with the options that are set."""
    paper = TASK_DEFAULTS[name]
    base = dict(QUICK) if quick else {
        "trials": 100, "synthetic_trials": 20, "candidates": 16,
        "M": paper["M"], "N": paper["N"], "tmax": paper["tmax"], "K": 100,
    }  # fmt: skip
    base.update({key: value for key, value in given.items() if value is not None})
    return base


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


def audit_command(
    dataset: DatasetOption = AuditDataset.SST2,
    quick: Quick = False,
    trials: Trials = None,
    synthetic_trials: SyntheticTrials = None,
    candidates: Candidates = None,
    dpsgd_trials: DpsgdTrials = 0,
    dpsgd_members: DpsgdMembers = 32,
    dpsgd_steps: DpsgdSteps = 10,
    dpsgd_batch_size: DpsgdBatch = 8,
    epsilon: Epsilon = 8.0,
    M: MOption = None,
    N: NOption = None,
    tmax: TmaxOption = None,
    K: KOption = None,
    accounting: AccountingOption = Accounting.TIGHT,
    model: ModelOpt = None,
    dtype: DtypeOption = Dtype.AUTO,
    seed: Seed = 0,
    data_dir: DataDir = None,
    out_dir: OutDir = None,
) -> None:
    """Membership inference AUC of real vs AdaDPSyn 1-shot prompts, with ROC curves."""
    from app.eval.audit import AuditConfig, run_audit, write_outputs

    if not epsilon > 0:
        raise fail(f"--epsilon must be > 0, got {epsilon}")
    name = dataset.value
    given = {"trials": trials, "synthetic_trials": synthetic_trials, "candidates": candidates}
    base = trial_settings(name, quick, {**given, "M": M, "N": N, "tmax": tmax, "K": K})
    dpsgd = {
        "dpsgd_trials": dpsgd_trials,
        "dpsgd_members": dpsgd_members,
        "dpsgd_steps": dpsgd_steps,
        "dpsgd_batch_size": dpsgd_batch_size,
    }
    config = AuditConfig(**base, **dpsgd, epsilon=epsilon, accounting=accounting, seed=seed)
    train = (data_dir or default_data_dir()) / TRAIN_FILES[name]
    started = time.perf_counter()
    with reported_errors():
        records = load_dataset(BUILTIN_TASKS[name], train)
        quiet_progress_bars()
        llm = make_backend(BackendKind.TRANSFORMERS, model=model, url=None, dtype=dtype)
        summaries = run_audit(BUILTIN_TASKS[name], records, llm, config, _progress)
        meta = {
            "dataset": name,
            "model": llm.name or model or DEFAULT_MODEL,
            "seed": seed,
            "config": {**base, **dpsgd, "epsilon": epsilon, "accounting": accounting.value},
            "train_records": len(records),
            "seconds": time.perf_counter() - started,
        }
        paths = write_outputs(summaries, meta, out_dir or Path("out") / "audit" / name)
    _report(summaries, paths)
