"""``dpsyn privacy``: price a configuration of the token loop, or calibrate its noise to a
budget. ``dpsyn privacy quote`` (any registered method's job, as the service plans it) is
:mod:`app.cli.privacy_quote`: it loads the registry, which these commands do not need."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

import typer
from pydantic import ValidationError

from app.cli.errors import fail
from app.cli.options import PrintJsonOpt, with_groups
from app.privacy.accounting import Accounting
from app.privacy.calibration import CalibrationError, calibrate_noise
from app.privacy.display import delta_text, epsilon_text
from app.privacy.params import AdaDPSynParams, AdaDPSynVariant, Aggregator, TangParams
from app.privacy.planner import PlannerShape, plan_adadpsyn
from app.privacy.synthesis import SynthesisPrivacy
from app.privacy.unit import DEFAULT_DELTA

privacy_app = typer.Typer(
    help="Privacy accounting: epsilon of a configuration, calibration, a job's quote."
)

AggregatorOpt = Annotated[Aggregator, typer.Option("--method", help="The token loop's aggregator.")]
AccountingOpt = Annotated[
    Accounting,
    typer.Option(
        "--accounting",
        help="tight: Poisson sampling, add/remove, PLD (default). "
        "paper: fixed-size sampling, replace-one, RDP as in the AdaDPSyn paper.",
    ),
]
SigmaOpt = Annotated[float | None, typer.Option("--sigma", help="Tang et al. multiplier.")]
Sigma0Opt = Annotated[float, typer.Option("--sigma0", help="AdaDPSyn GoodRadius multiplier.")]
Sigma1Opt = Annotated[float | None, typer.Option("--sigma1", help="AdaDPSyn mean multiplier.")]
Sigma2Opt = Annotated[float, typer.Option("--sigma2", help="AdaDPSyn coverage multiplier.")]
TOpt = Annotated[int, typer.Option("--T", help="AdaDPSyn rounds of radius reduction.")]
GoodRadiusOpt = Annotated[
    bool,
    typer.Option(
        "--good-radius/--no-good-radius",
        help="AdaDPSyn: charge GoodRadius (as published). The service's default variant, "
        "pooled, does not run it (docs/privacy.md).",
    ),
]
MOpt = Annotated[int, typer.Option("--M", help="Teacher subsets per token.")]
NOpt = Annotated[int, typer.Option("--N", help="Records per subset.")]
TmaxOpt = Annotated[int, typer.Option("--tmax", help="Maximum tokens per demonstration.")]
NLabelOpt = Annotated[int, typer.Option("--n-label", help="Records in the label partition.")]
NTotalOpt = Annotated[int, typer.Option("--n-total", help="Records in the dataset |D|.")]
DeltaOpt = Annotated[
    float | None,
    typer.Option("--delta", help=f"Delta (default {DEFAULT_DELTA:g}, as a job's; never 1/|D|)."),
]
ShotsOpt = Annotated[
    int, typer.Option("--shots-per-label", help="Demonstrations generated per label.")
]
LabelsOpt = Annotated[
    int,
    typer.Option(
        "--n-labels",
        help="Labels that get demonstrations, each with --n-label records. Under replace-one "
        "(paper) a record can move between two of them, which costs both.",
    ),
]


@dataclass(frozen=True)
class LoopOptions:
    """The token-loop options ``epsilon`` and ``calibrate`` share (an option group)."""

    aggregator: AggregatorOpt = Aggregator.ADADPSYN
    accounting: AccountingOpt = Accounting.TIGHT
    sigma0: Sigma0Opt = 15.0
    sigma2: Sigma2Opt = 5.0
    T: TOpt = 2
    good_radius: GoodRadiusOpt = True
    M: MOpt = 20
    N: NOpt = 2
    tmax: TmaxOpt = 15

    def privacy(
        self, *, sigma: float | None, sigma1: float | None, free: float | None = None
    ) -> SynthesisPrivacy:
        """Build and validate the token loop's privacy; ``free`` stands in for a missing
        free multiplier."""
        if self.aggregator is Aggregator.TANG:
            value = sigma if sigma is not None else free
            if value is None:
                raise fail("--sigma is required for --method tang")
            params: TangParams | AdaDPSynParams = TangParams(sigma=value)
        else:
            value = sigma1 if sigma1 is not None else free
            if value is None:
                raise fail("--sigma1 is required for --method adadpsyn")
            variant = AdaDPSynVariant.PAPER if self.good_radius else AdaDPSynVariant.POOLED
            params = AdaDPSynParams(
                variant=variant,
                good_radius=self.good_radius,
                sigma0=self.sigma0,
                sigma1=value,
                sigma2=self.sigma2,
                T=self.T,
            )
        return SynthesisPrivacy(
            params=params, accounting=self.accounting, M=self.M, N=self.N, tmax=self.tmax
        )


@dataclass(frozen=True)
class DatasetOptions:
    """The dataset's shape ``epsilon`` and ``calibrate`` price (an option group)."""

    n_label: NLabelOpt = 835
    n_total: NTotalOpt = 5452
    delta: DeltaOpt = None
    shots_per_label: ShotsOpt = 1
    n_labels: LabelsOpt = 1

    def shape(self) -> tuple[dict[str, int], dict[str, int], float]:
        """(records per label, shots per label, delta), checked."""
        return _dataset(self.n_label, self.n_total, self.n_labels, self.shots_per_label, self.delta)


def _dataset(
    n_label: int, n_total: int, n_labels: int, shots: int, delta: float | None
) -> tuple[dict[str, int], dict[str, int], float]:
    if n_label < 1 or n_total < 1:
        raise fail("--n-label and --n-total must be >= 1")
    if n_labels < 1 or n_labels * n_label > n_total:
        raise fail(
            f"--n-labels {n_labels} x --n-label {n_label} records exceed --n-total {n_total}"
        )
    if shots < 0:
        raise fail("--shots-per-label must be >= 0")
    delta = DEFAULT_DELTA if delta is None else delta
    if not 0 < delta < 1:
        raise fail(f"--delta must be in (0, 1), got {delta}")
    labels = [f"label{i}" for i in range(n_labels)]
    return dict.fromkeys(labels, n_label), dict.fromkeys(labels, shots), delta


def _validation_message(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']} (got {first.get('input')!r})"


@contextmanager
def _usage_errors() -> Iterator[None]:
    """What the three commands' inputs can get wrong, reported as a usage error each
    (a bad parameter, a budget no noise meets) rather than a traceback."""
    try:
        yield
    except ValidationError as error:
        raise fail(_validation_message(error)) from None
    except (CalibrationError, ValueError) as error:
        raise fail(str(error)) from None


@privacy_app.command("epsilon")
@with_groups
def epsilon_command(
    sigma: SigmaOpt = None,
    sigma1: Sigma1Opt = None,
    as_json: PrintJsonOpt = False,
    *,
    loop: LoopOptions,  # option groups (with_groups)
    dataset: DatasetOptions,
) -> None:
    """Epsilon that one record pays for the given configuration."""
    with _usage_errors():
        privacy = loop.privacy(sigma=sigma, sigma1=sigma1)
        sizes, shots, delta = dataset.shape()
        eps = privacy.epsilon(sizes, shots, delta)
    if as_json:
        typer.echo(json.dumps({"epsilon": eps, "delta": delta}))
    else:
        typer.echo(
            f"epsilon = {epsilon_text(eps)} at delta = {delta_text(delta)} "
            f"({privacy.accounting.value} accounting, "
            f"{privacy.accountant.relation.value} neighbours)"
        )


@privacy_app.command("calibrate")
@with_groups
def calibrate_command(
    epsilon: Annotated[float, typer.Option("--epsilon", help="Target epsilon.")],
    as_json: PrintJsonOpt = False,
    *,
    loop: LoopOptions,  # option groups (with_groups)
    dataset: DatasetOptions,
) -> None:
    """Solve for sigma (tang) or sigma1 (adadpsyn) so that the cost meets --epsilon."""
    with _usage_errors():
        privacy = loop.privacy(sigma=None, sigma1=None, free=1.0)
        sizes, shots, delta = dataset.shape()
        result = calibrate_noise(
            privacy, label_sizes=sizes, shots=shots, target_epsilon=epsilon, delta=delta
        )
    tang = loop.aggregator is Aggregator.TANG
    solved = result.privacy.params.model_dump(
        include={"sigma"} if tang else {"sigma0", "sigma1", "sigma2", "T"}
    )
    if as_json:
        typer.echo(json.dumps({**solved, "epsilon": result.epsilon, "delta": delta}))
    else:
        shown = ", ".join(f"{k} = {v:.4g}" for k, v in solved.items())
        typer.echo(
            f"{shown}: epsilon = {epsilon_text(result.epsilon)} at delta = {delta_text(delta)}"
        )


@privacy_app.command("plan")
def plan_command(
    epsilon: Annotated[float, typer.Option("--epsilon", help="Target epsilon of the job.")],
    accounting: AccountingOpt = Accounting.TIGHT,
    M: MOpt = 10,
    N: NOpt = 2,
    tmax: TmaxOpt = 30,
    K: Annotated[int, typer.Option("--K", help="Public vocabulary per token step.")] = 100,
    n_label: NLabelOpt = 357,
    n_total: NTotalOpt = 5000,
    delta: DeltaOpt = None,
    shots_per_label: ShotsOpt = 1,
    n_labels: LabelsOpt = 4,
    as_json: PrintJsonOpt = False,
) -> None:
    """AdaDPSyn's constants for a job's public shape, as the service's planner picks them."""
    with _usage_errors():
        sizes, shots, delta = _dataset(n_label, n_total, n_labels, shots_per_label, delta)
        shape = PlannerShape(
            M=M,
            K=K,
            N=N,
            tmax=tmax,
            label_sizes=sizes,
            shots=shots,
            epsilon=epsilon,
            delta=delta,
            accounting=accounting,
        )
        choice = plan_adadpsyn(shape)
        params = choice.params()
        privacy = SynthesisPrivacy(params=params, accounting=accounting, M=M, N=N, tmax=tmax)
        result = calibrate_noise(
            privacy, label_sizes=sizes, shots=shots, target_epsilon=epsilon, delta=delta
        )
    chosen = result.privacy.params
    assert isinstance(chosen, AdaDPSynParams)
    out = {
        **choice.public_stats(),
        "T": chosen.T,
        "sigma1": chosen.sigma1,
        "sigma2": chosen.sigma2 if chosen.T else None,
        "clip": chosen.clip,
        "epsilon": result.epsilon,
        "delta": delta,
    }
    if as_json:
        typer.echo(json.dumps(out))
        return
    if chosen.T == 0 and chosen.clip is not None:
        typer.echo(
            f"no coverage checks: T = 0, one Gaussian mean of the teachers clipped to "
            f"{chosen.clip} around the uniform distribution, at sigma1 = {chosen.sigma1:.4g} "
            "(Tang's multiplier and price, a smaller sensitivity)"
        )
    elif chosen.T == 0:
        typer.echo(
            f"no coverage checks: T = 0, the plain Gaussian mean at sigma1 = {chosen.sigma1:.4g}"
        )
    else:
        typer.echo(
            f"T = {chosen.T}, sigma1 = {chosen.sigma1:.4g}, sigma2 = {chosen.sigma2:.4g} "
            f"(checks {choice.candidate.check_share:.0%} of each step's budget), "
            f"mu = {chosen.mu}, margin = {chosen.coverage_margin}, shrink = {chosen.shrink}"
        )
    typer.echo(
        f"simulated argmax agreement {choice.agreement:.3f} (Tang's mean at the same epsilon: "
        f"{choice.tang_agreement:.3f}); epsilon = {epsilon_text(result.epsilon)} at delta = "
        f"{delta_text(delta)}"
    )
