"""The method contract: the tests a synthesis method must pass, for a plug-in's author to run.

A method (docs/service.md, "Adding a method") promises the service a few things no type can
say: its plan prices exactly what the ledger reserves and is rebuilt the same in the worker;
it reads the private counts only as the dataset's release gives them; nothing but its DP
outputs depends on the private records; no record reaches an error; every parameter it
declares can be set from every entry point; a seeded run repeats. :class:`MethodContract`
checks each on the method's own code, with the fake backend (no model), as
dp_accounting's ``PrivacyAccountantTest`` does for accountants. In a test module::

    from app.contract import MethodContract
    from my_package.noisy_majority import NOISY_MAJORITY

    class TestNoisyMajority(MethodContract):
        method = NOISY_MAJORITY
        params = {"words": 6}          # cheap settings for the runs
        dp_stats = ("answered",)       # stats that follow from DP outputs

and ``pytest`` runs every ``test_*`` below for it (the built-in methods and the example
method run them in tests/methods/test_contract.py). What each test fails is in its
docstring. This module imports the CLI and the API to look at their options: it is a test
suite, not part of any request path, which is why it sits beside ``app.main`` and not in
``app.methods`` (the algorithms import no web code).
"""

from __future__ import annotations

import copy
import json
import random
import re
import secrets
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar
from unittest import SkipTest, mock

import numpy as np

from app.llm.base import BackendError, LLMBackend
from app.llm.fake import FakeBackend
from app.methods import registry
from app.methods.base import Counts, Method, MethodPlan, ParamsError
from app.privacy.accounting import Accounting, accountant_for
from app.privacy.empirical import AuditBound, epsilon_lower_bound
from app.privacy.events import from_dict, to_dict
from app.privacy.releases import recording, uncovered
from app.privacy.rng import make_rng
from app.privacy.unit import DEFAULT_DELTA, release_counts
from app.results import SynthesisResult
from app.synthesis.data import Record
from app.synthesis.record_text import RecordText
from app.synthesis.tasks import TaskKind, TaskSpec

#: In every record's text: it must never be found in an error or a non-DP output.
CANARY = "CANARYRECORD"

#: Counts of records from this size on are looked for in a run's text (smaller numbers, a
#: label with one record, are as likely a list's numbering).
DISTINCT_COUNT = 10

#: The contract's task: two labels the fake backend writes (it answers ``w{n}``).
CONTRACT_TASK = TaskSpec(
    name="contract",
    kind=TaskKind.CLASSIFICATION,
    instruction="Given a type, write a question of that type.",
    icl_instruction="Classify the questions by type.",
    text_field="Question",
    label_field="Type",
    labels=("w5", "w7"),
)

#: The commands (as ``dpsyn`` spells them) whose options are generated from the registry.
#: (``jobs submit`` forwards any ``--flag VALUE`` to the server, which checks it: the thin
#: client knows no method.)
CLI_COMMANDS = (("synthesize",), ("privacy", "quote"), ("eval",))


class MethodContract:
    """Subclass with :attr:`method` set; every ``test_*`` method is one clause."""

    method: ClassVar[Method]
    task: ClassVar[TaskSpec] = CONTRACT_TASK
    params: ClassVar[Mapping[str, Any]] = {}  # the method's parameters for the runs
    epsilon: ClassVar[float] = 4.0
    shots: ClassVar[int | None] = 2
    per_label: ClassVar[int] = 16  # private records per label
    # The run's stats that are functions of its DP outputs (they may differ between
    # neighbouring datasets); every other stat must not.
    dp_stats: ClassVar[Sequence[str]] = ()
    # The seeded-run clause: runs compared, each under other global random states.
    repeats: ClassVar[int] = 8
    # The empirical audit: runs per dataset, the epsilon its jobs are planned at, and the
    # chance that an honest method fails it (docs/service.md, "The empirical audit").
    audit_runs: ClassVar[int] = 12000
    audit_epsilon: ClassVar[float] = 2.0
    audit_alpha: ClassVar[float] = 0.01
    audit_seed: ClassVar[int] = 10_000  # the first run's seed (bench/contract_audit.py varies it)

    # --- what the runs are made of (override where the method needs otherwise) ----------

    def backend(self) -> LLMBackend:
        """A fresh backend for one run (default: the fake, which needs no model)."""
        return FakeBackend(stop_after=3, marker=f"{self.task.text_field}:")

    def records(self) -> list[Record]:
        """The private dataset D: :attr:`per_label` records per label, each with the canary."""
        return [
            Record(f"{CANARY}{label}{i} what is it here", label)
            for label in self.task.labels
            for i in range(self.per_label)
        ]

    def public(self) -> list[str]:
        """Public texts, for a method that reads some (``reads_public``)."""
        return [f"public text number {i} here" for i in range(40)]

    def config(self, seed: int | None = 11) -> Any:
        return self.method.configure(
            self.task,
            epsilon=self.epsilon,
            delta=None,
            shots=self.shots,
            accounting=Accounting.TIGHT,
            params=dict(self.params),
            seed=seed,
        )

    def counts(self) -> Counts:
        """The dataset's one count release, drawn from D (seeded), as the service gives it."""
        public = len(self.public()) if self.method.reads_public else 0
        if not self.method.reads_counts:
            return Counts(None, public)
        sizes = {label: self.per_label for label in self.task.labels}
        release = release_counts(sizes, 0.5, DEFAULT_DELTA, make_rng(5), release_id="contract")
        return Counts.released(release, public)

    def plan(self) -> MethodPlan:
        return self.method.plan(self.task, self.config(), self.counts())

    def run(self, records: list[Record], seed: int = 11) -> SynthesisResult:
        plan = self.method.plan(self.task, self.config(seed), self.counts())
        public = self.public() if self.method.reads_public else []
        return plan.run(records, self.backend(), None, public)

    def hard_datasets(self) -> dict[str, list[Record]]:
        """D, and D with one record that a method may stumble on: a long one, an empty one,
        one of odd characters and one whose label is not the task's (each with the canary
        but the empty one), so that every error path's message is read too."""
        records = self.records()
        label = self.task.labels[0]
        odd = f"{CANARY} \u202e\t\u00e9\u0000 \U0001f600 <b>&amp;</b> \\n end"
        extra = {
            "long": Record(f"{CANARY} " + "a long private sentence " * 200, label),
            "empty": Record("", label),
            "odd": Record(odd, label),
            "unknown label": Record(f"{CANARY} with a label of its own here", "no-such-label"),
        }
        return {"D": records, **{name: [*records, r] for name, r in extra.items()}}

    def everything_said(self, records: list[Record]) -> tuple[str, str]:
        """All a run on ``records`` says (its result's JSON, its progress, or its error's
        words), and the part where a number would be a count (demonstrations, prompt and
        error: stats and plan hold numbers of their own)."""
        progress: list[tuple[int, int]] = []
        plan = self.method.plan(self.task, self.config(), self.counts())
        public = self.public() if self.method.reads_public else []
        try:
            result = plan.run(records, self.backend(), lambda d, t: progress.append((d, t)), public)
        except Exception as error:  # whatever it raises, its words are read
            words = _words(error)
            return words, words
        data = result.to_dict()
        text = json.dumps([data["demonstrations"], data["prompt"]], ensure_ascii=False)
        return json.dumps([data, progress], ensure_ascii=False) + "\n" + text, text

    def audit_counts(self, accounting: Accounting) -> Counts:
        """The counts the audit's plans read: :meth:`counts` (the dataset's one release),
        or under paper accounting the sizes declared public, as the service requires."""
        counts = self.counts()
        if accounting is Accounting.PAPER and counts.source is not None:
            sizes = Counter(r.label for r in self.records())
            counts = Counts.declared(dict(sizes), counts.public)
        return counts

    def audit_plan(
        self,
        accounting: Accounting,
        seed: int,
        shots: int | None = None,
        counts: Counts | None = None,
    ) -> MethodPlan:
        """The plan the audit and the release clause run: :attr:`audit_epsilon` under
        ``accounting`` on :meth:`audit_counts` (or ``counts``, the same computed once: the
        audit plans thousands of runs on one dataset, whose release is seeded, so it is one
        value) with ``shots`` (None: :attr:`shots`); :class:`_NotPlannedError` when the
        method cannot be planned so."""
        try:
            config = self.method.configure(
                self.task,
                epsilon=self.audit_epsilon,
                delta=None,
                shots=self.shots if shots is None else shots,
                accounting=accounting,
                params=dict(self.params),
                seed=seed,
            )
            if counts is None:
                counts = self.audit_counts(accounting)
            return self.method.plan(self.task, config, counts)
        except (ValueError, TypeError) as error:  # refused: the method claims no such plan
            if accounting is Accounting.TIGHT:
                raise
            raise _NotPlannedError(str(error)) from None

    def run_plan(self, plan: MethodPlan, records: list[Record]) -> SynthesisResult:
        public = self.public() if self.method.reads_public else []
        return plan.run(records, self.backend(), None, public)

    def audit_views(self, result: SynthesisResult) -> dict[str, Any]:
        """What the audit compares of a run: the labels released (as a multiset), the
        demonstrations in order, and the DP stats; coarse views make outputs repeat."""
        labels = Counter(d.label for d in result.demonstrations)
        stats = {k: v for k, v in result.stats.items() if k in self.dp_stats}
        return {
            "labels": tuple(sorted(labels.items())),
            "demonstrations": tuple((d.label, d.text) for d in result.demonstrations),
            "stats": json.dumps(stats, sort_keys=True),
        }

    def audit(
        self,
        accounting: Accounting,
        first: list[Record],
        second: list[Record],
        shots: int | None = None,
    ) -> tuple[float, AuditBound]:
        """The claimed epsilon and the audit's bound for ``first`` against ``second``."""
        planned = self.audit_plan(accounting, seed=0, shots=shots)
        claimed = planned.epsilon()
        counts = self.audit_counts(accounting)
        views: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
        for seed in range(self.audit_runs):
            plan = self.audit_plan(accounting, self.audit_seed + seed, shots, counts)
            for sample, records in zip(views, (first, second), strict=True):
                sample.append(self.audit_views(self.run_plan(plan, records)))
        bound = epsilon_lower_bound(
            *views, delta=planned.delta, alpha=self.audit_alpha, select_fraction=0.25
        )
        return claimed, bound

    def assert_audit(
        self,
        accounting: Accounting,
        first: list[Record],
        second: list[Record],
        shots: int | None = None,
    ) -> None:
        try:
            claimed, bound = self.audit(accounting, first, second, shots)
        except _NotPlannedError as refused:
            raise SkipTest(f"not planned under {accounting.value} accounting: {refused}") from None
        assert bound.epsilon <= claimed, (
            f"the outputs show epsilon >= {bound.epsilon:.3f} with confidence "
            f"{1 - self.audit_alpha:g}, the event charges {claimed:.3f} ({bound.view} "
            f"{bound.event}: {bound.p_first:.4f} on D, {bound.p_second:.4f} on D')"
        )

    # --- the clauses ------------------------------------------------------------------------

    def test_the_plan_prices_what_the_ledger_reserves(self) -> None:
        """Fails a plan whose event does not survive the ledger's JSON, or is priced other
        than its ``epsilon()``, over the target, or at another delta than the config's."""
        plan = self.plan()
        stored = to_dict(plan.event())
        again = from_dict(copy.deepcopy(stored))
        assert to_dict(again) == stored, "the event does not round-trip through its JSON"
        priced = accountant_for(self.config().accounting).dataset_epsilon(again, plan.delta)
        assert abs(priced - plan.epsilon()) <= 1e-9 * max(1.0, priced), (priced, plan.epsilon())
        assert plan.epsilon() <= self.epsilon * (1 + 1e-6), plan.epsilon()
        assert plan.delta == DEFAULT_DELTA, "a job without a delta is at the public default"

    def test_the_worker_rebuilds_the_plan_admission_made(self) -> None:
        """Fails a method whose ``rebuild`` from the stored job prices, schedules or
        counts otherwise than its plan, or does not rebuild itself (the stored config may
        spell a default out: a built-in config stores delta None, its rebuild 1e-6)."""
        plan = self.plan()
        rebuilt = self.method.rebuild(self.task, plan.stored())
        first, again = stored_row(plan), stored_row(rebuilt)
        assert {**first, "config": None} == {**again, "config": None}
        assert stored_row(self.method.rebuild(self.task, rebuilt.stored())) == again

    def test_a_seeded_run_repeats(self) -> None:
        """Fails a run that draws from an unseeded source (the CLI's ``--seed``, the tests):
        :attr:`repeats` runs of one seed, each with Python's and numpy's global generators
        seeded apart and every unseeded numpy generator or OS draw made apart and noted,
        must agree, and none may make such a draw."""
        records = self.records()
        results, draws = [], []
        for repeat in range(self.repeats):
            with _entropy_traps(repeat) as made:
                results.append(self.run(records).to_dict())
            draws += made
        assert not draws, f"the run drew from an unseeded source: {sorted(set(draws))}"
        for repeat, result in enumerate(results[1:], start=1):
            assert result == results[0], f"run {repeat} of one seed differs from run 0"

    def test_no_record_or_count_in_any_output(self) -> None:
        """Fails a method that writes a canary, a record's text (24 characters of it,
        :mod:`app.synthesis.record_text`) or an exact count of records in anything a run
        says: its demonstrations, prompt, stats, plan, event, progress or error, on D and on
        datasets made to reach its error paths (:meth:`hard_datasets`)."""
        for name, records in self.hard_datasets().items():
            said, numbers = self.everything_said(records)
            counts = {len(records), *Counter(r.label for r in records).values()}
            exact = sorted(n for n in counts if n >= DISTINCT_COUNT)
            assert CANARY not in said, f"{name}: the canary is in the run's output or error"
            assert not RecordText.of(records).quoted_in(said), f"{name}: record text in it"
            counted = [n for n in exact if re.search(rf"(?<![\w.]){n}(?![\w.])", numbers)]
            assert not counted, f"{name}: an exact count of records ({counted}) in its text"

    def test_the_event_charges_what_ran(self) -> None:
        """Fails a run that releases more than its plan's event charges: every release is
        drawn through :mod:`app.privacy.releases` (which records the mechanism, its noise
        and its sensitivity), and what they cost together, unamplified, must not exceed
        what the event's primitives cost the same way (:func:`~app.privacy.releases.uncovered`),
        under each relation the method is planned for; a run that draws no noise through
        them while its event charges fails too."""
        for accounting in (Accounting.TIGHT, Accounting.PAPER):
            try:
                plan = self.audit_plan(accounting, seed=11)
            except _NotPlannedError:
                continue
            with recording() as log:
                self.run_plan(plan, self.records())
            relation = accountant_for(accounting).relation.value
            problem = uncovered(plan.event(), log, relation)
            assert problem is None, f"{accounting.value} accounting: {problem}"

    def test_the_outputs_show_no_more_than_add_or_remove_charges(self) -> None:
        """Fails a method whose outputs on D and on D minus one record, over
        :attr:`audit_runs` seeded runs each, show a larger epsilon than its event charges,
        with confidence ``1 - audit_alpha`` (:func:`app.privacy.empirical.epsilon_lower_bound`).
        Catches an event that undercounts the releases, a wrong sensitivity, noise from a
        generator the seed does not set, and a leak the other clauses cannot name."""
        records = self.records()
        self.assert_audit(Accounting.TIGHT, records, records[:-1])

    def test_the_outputs_show_no_more_than_replace_one_charges(self) -> None:
        """As the add/remove audit, for a method planned under paper accounting
        (replace-one): D against D with its last record relabelled, or, for a method whose
        run refuses records other than the declared counts it was planned on, with its last
        record's text replaced (skipped when the method cannot be planned so). One shot
        (for a method with shots): a wrong sensitivity shows most where the whole budget
        is on one release, as an undercounted release shows most with several."""
        records = self.records()
        last = records[-1]
        relabelled = [*records[:-1], Record(last.text, self.task.labels[0])]
        shots = 1 if self.method.shots_param is not None else None
        try:
            self.run_plan(self.audit_plan(Accounting.PAPER, seed=0, shots=shots), relabelled)
        except _NotPlannedError:
            pass  # assert_audit skips
        except ValueError:  # a plan bound to the declared counts: keep them, swap the text
            relabelled = [
                *records[:-1],
                Record(f"{CANARY} another record {last.label}", last.label),
            ]
        self.assert_audit(Accounting.PAPER, records, relabelled, shots)

    def test_only_dp_outputs_differ_between_neighbours(self) -> None:
        """Fails a method that writes anything but its DP outputs differently for D, D with
        one record removed and D with one record relabelled (same release, same seed): an
        exact count, a record's trace, a sampling rate from the data in its plan, its event,
        its cost or a stat not in :attr:`dp_stats`."""
        records = self.records()
        other = self.task.labels[1] if records[0].label == self.task.labels[0] else records[0].label
        neighbours = {
            "D": records,
            "removed": records[1:],
            "relabelled": [Record(records[0].text, other), *records[1:]],
        }
        public = {
            name: _public_part(self.run(rows), self.dp_stats) for name, rows in neighbours.items()
        }
        assert public["removed"] == public["D"], "a non-DP field differs for D minus one record"
        assert public["relabelled"] == public["D"], "a non-DP field differs for D relabelled"

    def test_no_record_reaches_an_error(self) -> None:
        """Fails a method whose error, when the model fails mid-run, carries record text."""
        backend = FailingBackend(self.backend())
        plan = self.method.plan(self.task, self.config(), self.counts())
        public = self.public() if self.method.reads_public else []
        try:
            plan.run(self.records(), backend, None, public)
        except Exception as error:  # whatever it raises, its words are checked
            assert CANARY not in _words(error), "record text in the error"
            return
        if backend.calls >= 2:
            raise AssertionError("the run went on past a failing model")
        raise SkipTest("the method asks the model less than twice: nothing to fail")

    def test_a_wrong_parameter_is_refused_by_name(self) -> None:
        """Fails a method that accepts a parameter it does not declare, or refuses it
        without naming it."""
        try:
            self.method.configure(
                self.task,
                epsilon=self.epsilon,
                delta=None,
                shots=self.shots,
                accounting=Accounting.TIGHT,
                params={**self.params, "no_such_parameter": 1},
            )
        except ParamsError as error:
            assert "no_such_parameter" in str(error)
        else:
            raise AssertionError("an unknown parameter was accepted")

    def test_every_parameter_reaches_every_entry_point(self) -> None:
        """Fails a parameter that the API's schema, the dashboard's form or a command's
        options (``synthesize``, ``privacy quote``, ``eval``) cannot set."""
        with _registered(self.method):
            schema = _job_params_schema()
            fields = _form_fields()
            options = _cli_options()
        for param in self.method.parameters:
            assert param.name in schema, f"{param.name}: not in the API's JobParams"
            assert param.name in fields, f"{param.name}: not in the dashboard's job form"
            for command, flags in options.items():  # jobs submit: any flag (forwarded)
                assert param.flag in flags, f"{param.flag}: not an option of dpsyn {command}"


class _NotPlannedError(Exception):
    """The method cannot be planned under this accounting (it claims no such relation)."""


@contextmanager
def _entropy_traps(repeat: int) -> Iterator[list[str]]:
    """Python's and numpy's global generators seeded by ``repeat``; an unseeded numpy
    generator (``np.random.default_rng()``) or an OS draw (``secrets``) made from a seed of
    ``repeat``'s and noted in the list yielded. A run that repeats across these is seeded."""
    made: list[str] = []
    default_rng = np.random.default_rng

    def unseeded_rng(seed: Any = None) -> np.random.Generator:
        if seed is None:
            made.append("numpy.random.default_rng()")
            seed = [repeat, 7]
        return default_rng(seed)

    def noted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def draw(*args: Any, **kwargs: Any) -> Any:
            made.append(name)
            return real(*args, **kwargs)

        return draw

    state = random.getstate(), np.random.get_state()
    random.seed(repeat)
    np.random.seed(repeat)
    try:
        with (
            mock.patch("numpy.random.default_rng", unseeded_rng),
            mock.patch("secrets.randbits", noted("secrets.randbits", secrets.randbits)),
            mock.patch("secrets.token_bytes", noted("secrets.token_bytes", secrets.token_bytes)),
        ):
            yield made
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])


def stored_row(plan: MethodPlan) -> dict[str, Any]:
    """The job row a plan writes, whole (it keeps no exact record count: the worker checks
    the dataset against its own row), with the price and progress it was planned at."""
    stored = plan.stored()
    return {
        "config": copy.deepcopy(dict(stored.config)),
        "schedule": list(stored.schedule),
        "delta": stored.delta,
        "event": to_dict(plan.event()),
        "epsilon": plan.epsilon(),
        "progress_total": plan.progress_total,
    }


def _public_part(result: SynthesisResult, dp_stats: Sequence[str]) -> dict[str, Any]:
    """What of a result is not a DP output: everything but the demonstrations, the prompt,
    the soft prompt and :attr:`MethodContract.dp_stats`."""
    data = result.to_dict()
    for name in ("demonstrations", "prompt", "soft_prompt"):
        data.pop(name, None)
    data["stats"] = {k: v for k, v in result.stats.items() if k not in dp_stats}
    return data


def _words(error: BaseException) -> str:
    """Everything an error says: its message, notes, and those of its causes."""
    said, seen = [], set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        said += [str(current), *map(str, getattr(current, "__notes__", []))]
        current = current.__cause__ or current.__context__
    return "\n".join(said)


class FailingBackend:
    """A backend whose model fails on its second call (after tokenizing works)."""

    def __init__(self, inner: LLMBackend) -> None:
        self._inner, self.calls = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _maybe_fail(self) -> None:
        self.calls += 1
        if self.calls >= 2:
            raise BackendError("the model failed (the contract's test)")

    def next_token_probs(self, prompts: Any, token_sets: Any) -> Any:
        self._maybe_fail()
        return self._inner.next_token_probs(prompts, token_sets)

    def top_k(self, prompts: Any, k: int) -> Any:
        self._maybe_fail()
        return self._inner.top_k(prompts, k)


@contextmanager
def _registered(method: Method) -> Iterator[None]:
    if registry.find_method(method.name) is method:
        yield
        return
    with registry.registered(method):
        yield


def _job_params_schema() -> set[str]:
    """The parameters the API's document offers (``JobParams``), built as the app builds it."""
    from app.api.schemas import JobParams

    return set(JobParams.model_json_schema().get("properties", {}))


def _form_fields() -> set[str]:
    from app.api.routes.ui.forms import job_form_options

    return {field["name"] for field in job_form_options()["fields"]}


def _cli_options() -> dict[str, set[str]]:
    """Each command's option flags, from the ``dpsyn`` command as typer builds it now."""
    import typer

    from app.cli import app

    root = typer.main.get_command(app)
    out = {}
    for path in CLI_COMMANDS:
        command: Any = root
        for name in path:
            command = command.commands[name]
        out[" ".join(path)] = {opt for param in command.params for opt in param.opts}
    return out
