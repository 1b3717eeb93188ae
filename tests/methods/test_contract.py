"""The method contract (app/contract.py) on the built-in methods and on the example plug-in
(tests/methods/echo.py, written as docs/service.md's walkthrough says), and on broken
methods: each clause fails the method that breaks it."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import ClassVar
from unittest import SkipTest

import numpy as np
import pytest

from app.contract import FailingBackend, MethodContract
from app.methods import Demonstration, declare, gaussian_release, make_rng
from app.methods.registry import get_method
from tests.methods.echo import ECHO, Echo, EchoConfig, EchoPlan

TOKEN_LOOP = {"M": 2, "N": 2, "tmax": 4, "K": 8, "min_words": 1}
DP_TOKEN_STATS = ("backend_calls", "empty_demonstrations", "short_demonstrations",
                  "echo_demonstrations")  # fmt: skip


#: The audit's runs for a method of the model loop: each run asks the fake model for every
#: token, so the suite audits these at a run count that shows a deterministic leak only
#: (docs/service.md, "The empirical audit").
MODEL_AUDIT_RUNS = 300


class TestTang(MethodContract):
    method = get_method("tang")
    audit_runs = MODEL_AUDIT_RUNS
    params = TOKEN_LOOP
    dp_stats = DP_TOKEN_STATS


class TestAdaDPSyn(MethodContract):
    method = get_method("adadpsyn")
    audit_runs = MODEL_AUDIT_RUNS
    params = TOKEN_LOOP
    dp_stats = DP_TOKEN_STATS


class TestPromptPATE(MethodContract):
    method = get_method("promptpate")
    audit_runs = MODEL_AUDIT_RUNS
    params: ClassVar = {"teachers": 4, "queries": 20, "candidates": 2, "group_size": 8}


class TestEcho(MethodContract):
    method = ECHO

    def test_no_record_reaches_an_error(self) -> None:
        """Echo asks no model: a failing one changes nothing (the contract's clause skips)."""
        plan = self.plan()
        failing = FailingBackend(self.backend())
        assert plan.run(self.records(), failing, None) == plan.run(
            self.records(), self.backend(), None
        )


class TestPromptDPSGD(MethodContract):
    """On the tiny model of tests/promptdpsgd (DP-SGD needs a local model's gradients)."""

    method = get_method("promptdpsgd")
    audit_runs = 100  # a soft prompt never repeats: its audit reads the DP stats only
    params: ClassVar = {"steps": 2, "batch_size": 4, "prompt_length": 2}

    def backend(self):
        from tests.promptdpsgd.tiny import tiny_backend

        return tiny_backend()


# --- negative controls: a method that breaks one clause fails that clause ----------------------


class _Broken(Echo):
    """Echo with one clause broken by a subclass (registered under its own name)."""

    flaw = ""

    def plan(self, task, config, counts):
        return _BrokenPlan(**vars(super().plan(task, config, counts)), flaw=self.flaw)

    def rebuild(self, task, stored):
        plan = _BrokenPlan(**vars(super().rebuild(task, stored)), flaw=self.flaw)
        if self.flaw == "rebuild":  # the worker runs other settings than admission priced
            return dataclasses.replace(plan, config=plan.config.model_copy(update={"shots": 9}))
        return plan

    def configure(self, task, *, params, **fields):
        if self.flaw == "lenient":  # drops what it does not know instead of refusing it
            params = {k: v for k, v in (params or {}).items() if k == "repeat"}
        return super().configure(task, params=params, **fields)


@dataclass(frozen=True)
class _BrokenPlan(EchoPlan):
    flaw: str = ""

    def epsilon(self) -> float:
        honest = super().epsilon()
        return honest / 2 if self.flaw == "underpriced" else honest

    def run(self, records, backend, progress, public=()):
        result = super().run(records, backend, progress, public)
        if self.flaw == "counts":  # an exact count written where no DP output is
            result.stats["records"] = len(records)
        if self.flaw == "unseeded":
            result.stats["draw"] = float(np.random.default_rng().random())
        if self.flaw == "leak":  # a record said as a demonstration
            result.demonstrations[0] = Demonstration(records[0].label, records[0].text)
        if self.flaw == "releases":  # draws its histogram once more than its event charges
            gaussian_release(np.zeros(2), self.event(), make_rng(0))
        if self.flaw == "tells":  # a demonstration that says whether the dataset is whole
            whole = len(records) == 2 * 16
            result.demonstrations[0] = Demonstration(self.task.labels[whole], "echo")
        if self.flaw == "tells_label":  # a demonstration that says the last record's label
            result.demonstrations[0] = Demonstration(records[-1].label, "echo")
        if self.flaw == "error":
            try:
                for record in records:  # asks the model about each record
                    backend.top_k([backend.tokenize(record.text)], 1)
            except Exception as error:
                raise ValueError(f"failed on {records[0].text!r}") from error
        return result


def _broken(flaw: str, flags: dict[str, str] | None = None) -> Echo:
    class Flawed(_Broken):
        name = f"echo-{flaw}"
        stored_key = "echo"
        parameters = declare(EchoConfig, ("repeat",), flags=flags or {"repeat": f"--{flaw}-rep"})

    Flawed.flaw = flaw
    return Flawed()


@pytest.mark.parametrize(
    ("flaw", "clause"),
    [
        ("underpriced", "test_the_plan_prices_what_the_ledger_reserves"),
        ("counts", "test_only_dp_outputs_differ_between_neighbours"),
        ("unseeded", "test_a_seeded_run_repeats"),
        ("error", "test_no_record_reaches_an_error"),
        ("leak", "test_no_record_or_count_in_any_output"),
        ("releases", "test_the_event_charges_what_ran"),
        ("tells", "test_the_outputs_show_no_more_than_add_or_remove_charges"),
        ("tells_label", "test_the_outputs_show_no_more_than_replace_one_charges"),
        ("rebuild", "test_the_worker_rebuilds_the_plan_admission_made"),
        ("lenient", "test_a_wrong_parameter_is_refused_by_name"),
    ],
)
def test_each_clause_fails_the_method_that_breaks_it(flaw: str, clause: str) -> None:
    contract = type("Contract", (MethodContract,), {"method": _broken(flaw)})()
    with pytest.raises(AssertionError):
        getattr(contract, clause)()
    with contextlib.suppress(SkipTest):  # echo asks no model: that clause skips
        getattr(TestEcho(), clause)()  # the honest method passes the same clause


def test_a_parameter_no_command_can_take_fails_the_entry_point_clause() -> None:
    """A flag that is one of ``dpsyn eval``'s own options (``--seeds``): eval cannot offer it."""
    contract = type("Contract", (MethodContract,), {"method": _broken("", {"repeat": "--seeds"})})()
    with pytest.raises((AssertionError, ValueError)):
        contract.test_every_parameter_reaches_every_entry_point()
    TestEcho().test_every_parameter_reaches_every_entry_point()  # the honest one passes
