"""PateConfig validation and planning from sizes alone."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from app.pate.config import PateConfig, PateError
from app.pate.plan import plan_pate
from app.privacy.accounting import Accounting
from app.privacy.calibration import CalibrationError
from app.privacy.unit import DEFAULT_DELTA
from app.results import SynthesisError
from app.synthesis.tasks import BUILTIN_TASKS
from tests.pate.helpers import SST2

PUBLIC_COUNTS = PateConfig(epsilon=1.0, public_counts=True)  # declared by the data owner


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
        ({"epsilon": math.nan}, "epsilon"),
        ({"epsilon": 1.0, "delta": 1.0}, "delta"),
        ({"epsilon": 1.0, "teachers": 0}, "teachers"),
        ({"epsilon": 1.0, "shots": 0}, "shots"),
        ({"epsilon": 1.0, "queries": 0}, "queries"),
        ({"epsilon": 1.0, "threshold_fraction": 1.5}, "threshold_fraction"),
        ({"epsilon": 1.0, "holdout_fraction": 1.0}, "holdout_fraction"),
        ({"epsilon": 1.0, "sigma_gnmax": -2.0, "sigma_threshold": 1.0}, "sigma_gnmax"),
        ({"epsilon": 1.0, "sigma_gnmax": 2.0}, "sigma_threshold"),
        ({"epsilon": 1.0, "group_size": 0}, "group_size"),
        ({"epsilon": 1.0, "M": 3}, "M"),
    ],
)
def test_invalid_config_names_the_field(fields, named):
    with pytest.raises(ValidationError) as info:
        PateConfig(**fields)
    assert named in str(info.value)


def test_config_is_frozen_with_documented_defaults():
    config = PateConfig(epsilon=1.0)
    assert (config.teachers, config.shots, config.queries, config.student_shots) == (100, 1, 100, 4)
    assert config.accounting is Accounting.TIGHT
    with pytest.raises(ValidationError):
        config.teachers = 3  # type: ignore[misc]
    assert all(field.description for field in PateConfig.model_fields.values())


def test_plan_is_deterministic_and_meets_the_target():
    config = PateConfig(epsilon=2.0, teachers=50, queries=40)
    a = plan_pate(SST2, 500, 300, config)
    b = plan_pate(SST2, 500, 300, config)
    assert a.event() == b.event() and a.to_dict() == b.to_dict()
    assert a.delta == DEFAULT_DELTA  # public, never 1/n_private (issue 32)
    assert a.n_public == 300 and a.threshold == pytest.approx(30.0)
    assert 1.98 <= a.epsilon() <= 2.0
    # planned answered queries (check + release each) exactly exhaust the filter budget
    agg = a.privacy.aggregator
    assert 40 * agg.mu_query**2 == pytest.approx(a.privacy.budget_mu**2, rel=1e-6)
    assert agg.sigma_threshold == pytest.approx(2.0 * agg.sigma_gnmax)


def test_plan_caps_public_inputs_and_takes_explicit_delta_and_sigmas():
    config = PateConfig(
        epsilon=5.0, delta=1e-6, max_public=20, sigma_threshold=30.0, sigma_gnmax=10.0
    )
    plan = plan_pate(SST2, 1000, 5000, config)
    assert plan.n_public == 20 and plan.delta == 1e-6
    agg = plan.privacy.aggregator
    assert (agg.sigma_threshold, agg.sigma_gnmax) == (30.0, 10.0)
    assert plan.epsilon() <= 5.0


def test_paper_accounting_prices_replace_one():
    tight = plan_pate(SST2, 500, 100, PateConfig(epsilon=2.0, queries=50))
    paper = plan_pate(SST2, 500, 100, PateConfig(epsilon=2.0, queries=50, accounting="paper"))
    assert tight.event().relation == "add_or_remove"
    assert paper.event().relation == "replace_one"
    # doubled sensitivities: more noise for the same budget
    assert paper.privacy.aggregator.sigma_gnmax > tight.privacy.aggregator.sigma_gnmax


@pytest.mark.parametrize(
    ("n_private", "n_public", "config", "message"),
    [
        (3, 100, PUBLIC_COUNTS.model_copy(update={"shots": 4}), "3 private record(s) cannot"),
        (0, 100, PUBLIC_COUNTS, "0 private record(s)"),
        (100, 0, PateConfig(epsilon=1.0), "no public inputs"),
        (100, 4, PateConfig(epsilon=1.0), "at most 4 public inputs can be labelled"),
        (100, 100, PateConfig(epsilon=1.0, queries=3), "at most 3 public inputs"),
    ],
)
def test_plan_errors_name_public_counts(n_private, n_public, config, message):
    with pytest.raises(PateError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_pate(SST2, n_private, n_public, config)


def test_fewer_records_than_teachers_times_shots_is_allowed():
    plan = plan_pate(SST2, 10, 100, PateConfig(epsilon=1.0, teachers=100, shots=2))
    assert plan.n_private == 10


@pytest.mark.parametrize("n_private", [0, 3])
def test_a_private_count_not_declared_public_is_never_read_by_the_plan(n_private):
    """Too few records for one teacher refuses a job only when the count is public; else
    the plan is the same whatever the count (the run's short teachers abstain)."""
    config = PateConfig(epsilon=1.0, shots=4)
    plan = plan_pate(SST2, n_private, 100, config)
    assert plan.to_dict() == plan_pate(SST2, 5000, 100, config).to_dict()
    assert plan.event() == plan_pate(SST2, 5000, 100, config).event()


def test_extraction_tasks_are_refused_at_planning():
    with pytest.raises(PateError, match="classification"):
        plan_pate(BUILTIN_TASKS["mitg"], 100, 100, PateConfig(epsilon=1.0))
    assert issubclass(PateError, SynthesisError) and issubclass(PateError, ValueError)


def test_an_impossible_target_is_a_calibration_error():
    with pytest.raises(CalibrationError):
        plan_pate(SST2, 100, 100, PateConfig(epsilon=1e-9, delta=1e-12))
