"""The interface every synthesis method implements, and what it is given.

A method turns a client's request into a validated config (:meth:`Method.configure`), plans a
job from public counts alone (:meth:`Method.plan`, the event the ledger reserves), rebuilds
that plan from what a job row stored (:meth:`Method.rebuild`, in the worker) and says which of
a result's stats are public. The plan runs itself (:meth:`MethodPlan.run`). None of this reads
a database or a request: the services and the workers adapt rows to :class:`Counts` and
:class:`Stored`.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.documented import Documented
from app.llm.base import LLMBackend
from app.privacy.accounting import Accounting
from app.privacy.events import DatasetEvent
from app.privacy.rng import make_rng
from app.privacy.unit import DEFAULT_DELTA, CountRelease, local_release
from app.results import Progress, SynthesisResult
from app.synthesis.data import Record
from app.synthesis.tasks import TaskSpec, describe_validation_error

from .params import Param, params_model


class ParamsError(ValueError):
    """The parameters cannot make a config; the message names the parameter (no data)."""


@dataclass(frozen=True)
class DeclaredCounts:
    """Per-label record counts that the data owner declared public (an explicit opt-in per
    dataset): exact, and usable as they are."""

    labels: Mapping[str, int]
    total: int | None = None  # all records, if more than the labels listed hold


@dataclass(frozen=True)
class AssumedCounts:
    """Per-label sizes typed by the data owner to price a job on a public shape (``dpsyn
    privacy quote``): planned as if the dataset's count release had estimated them. Never
    built from records."""

    labels: Mapping[str, int]
    total: int | None = None  # all records, if more than the labels listed hold


class CountsUnavailableError(ValueError):
    """A plan asked for private counts it was not given (its method reads none)."""


@dataclass(frozen=True)
class Counts:
    """The sizes a plan may read: private records per label, all private records, and the
    records of the public dataset a method reads (0: none).

    The private counts come from ``source`` only: the dataset's one count release
    (:class:`~app.privacy.unit.CountRelease`, charged to its budget; the plan reads each
    label's posterior-mean estimate) or the owner's declaration (:class:`DeclaredCounts`).
    There is no way to hand a plan an exact count that is not declared public: the service
    builds :class:`Counts` from the stored release, a local run from a release it draws
    (:func:`plan_local`). ``source`` None: the method reads no private count
    (``Method.reads_counts`` False), and asking for one raises."""

    source: CountRelease | DeclaredCounts | AssumedCounts | None
    public: int = 0

    def __post_init__(self) -> None:
        kinds = (CountRelease, DeclaredCounts, AssumedCounts)
        if self.source is not None and not isinstance(self.source, kinds):
            raise TypeError(
                "a plan's counts come from the dataset's count release, the owner's "
                f"declaration or a typed shape, not a {type(self.source).__name__}"
            )

    @classmethod
    def declared(
        cls, labels: Mapping[str, int], public: int = 0, total: int | None = None
    ) -> Counts:
        """Counts the data owner declared public (``total``: all records, if more)."""
        return cls(DeclaredCounts({str(k): int(v) for k, v in labels.items()}, total), public)

    @classmethod
    def assumed(
        cls, labels: Mapping[str, int], public: int = 0, total: int | None = None
    ) -> Counts:
        """A public shape to price, planned as released counts would be (a quote)."""
        return cls(AssumedCounts({str(k): int(v) for k, v in labels.items()}, total), public)

    @classmethod
    def released(cls, release: CountRelease, public: int = 0) -> Counts:
        """Counts read from a count release."""
        return cls(release, public)

    @property
    def declared_public(self) -> bool:
        return isinstance(self.source, DeclaredCounts)

    @property
    def release(self) -> CountRelease | None:
        """The release the counts come from (None: declared public, or none read)."""
        return self.source if isinstance(self.source, CountRelease) else None

    @property
    def labels(self) -> dict[str, int]:
        """Each label's planned size: declared, or the release's estimate (>= 1)."""
        if self.source is None:
            raise CountsUnavailableError(
                "this method was given no private counts (it declares reads_counts = False)"
            )
        if isinstance(self.source, DeclaredCounts | AssumedCounts):
            return dict(self.source.labels)
        return self.source.estimates()

    @property
    def private(self) -> int:
        """All private records, as planned: the sum of :attr:`labels` (or a typed total)."""
        total = getattr(self.source, "total", None)
        return int(total) if total is not None else sum(self.labels.values())


def plan_local(
    method: Method,
    task: TaskSpec,
    config: Any,
    sizes: Mapping[str, int],
    *,
    declared_public: bool,
    public: int = 0,
) -> LocalPlan:
    """Plan ``config`` on records of these exact ``sizes`` outside the service (``dpsyn
    synthesize``, ``dpsyn eval``, a study): the counts are declared public, not read (a
    method that plans without them), or released here with
    :data:`~app.privacy.unit.COUNT_RELEASE_SHARE` of the config's target, the job being
    planned for the rest (:func:`~app.privacy.unit.local_release`). The run's reported cost,
    :meth:`LocalPlan.report`, adds the two (adaptive composition, ``app.privacy.unit``).
    The release draws from the secure generator (from the config's seed in a seeded run)."""
    release = None
    if declared_public:
        counts = Counts.declared(sizes, public)
    elif not method.reads_counts:
        counts = Counts(None, public)
    else:
        seed = getattr(config, "seed", None)
        rng = make_rng(None if seed is None else seed + 7919)
        release = local_release(sizes, False, config.epsilon, config.delta, rng)
        counts = Counts.released(release, public) if release else Counts.declared(sizes, public)
    if release is not None:
        delta = config.delta if config.delta is not None else DEFAULT_DELTA
        config = config.model_copy(
            update={"epsilon": config.epsilon - release.epsilon, "delta": delta - release.delta}
        )
    return LocalPlan(method.plan(task, config, counts), release)


@dataclass(frozen=True)
class LocalPlan:
    """A local run's plan and the count release it drew for itself (None: none)."""

    plan: MethodPlan
    release: CountRelease | None

    def epsilon(self) -> float:
        """The run's whole cost: the job's and its own count release's."""
        return self.plan.epsilon() + (self.release.epsilon if self.release else 0.0)

    def delta(self) -> float:
        return self.plan.delta + (self.release.delta if self.release else 0.0)

    def report(self, result: SynthesisResult) -> SynthesisResult:
        """``result`` with its cost: the job's plus the release's (unchanged without one),
        and the release itself in its public stats (its noise multiplier and what it cost),
        so that a saved run (``dpsyn synthesize --out``) says how its counts were released."""
        if self.release is None:
            return result
        release = {
            "count_release_sigma": self.release.sigma,
            "count_release_epsilon": self.release.epsilon,
            "count_release_delta": self.release.delta,
        }
        return dataclasses.replace(
            result,
            epsilon=result.epsilon + self.release.epsilon,
            delta=result.delta + self.release.delta,
            stats={**result.stats, **release},
        )


class CountsMode(StrEnum):
    """How a job knew the private dataset's per-label record counts (its record says which,
    :meth:`Method.counts_mode`)."""

    # released under DP: the dataset's one count release, charged once on its ledger (jobs
    # planned before that released their own, charged in their event)
    RELEASED = "released"
    DECLARED_PUBLIC = "declared_public"  # the data owner declared them public (an opt-in)


def counts_refusal(accounting: Accounting, declared_public: bool) -> str | None:
    """Why a job under ``accounting`` cannot run on counts that are (not) declared public, in
    words naming neither the API nor the CLI (each adds how to declare them); None: it can.

    Paper accounting prices replace-one neighbours, which keep the dataset's size: under the
    add/remove unit (``app.privacy.unit``) that holds only if the counts are public, and its
    fixed-size samples draw from an exact count. This holds for every method."""
    if accounting is Accounting.PAPER and not declared_public:
        return (
            "paper accounting (replace-one neighbours, fixed-size samples of an exact number "
            "of records) needs the dataset's label counts declared public by its owner"
        )
    return None


@dataclass(frozen=True)
class Stored:
    """What a job row keeps of its plan (JSON data), from which the worker rebuilds it."""

    config: Mapping[str, Any]
    schedule: Sequence[str]
    delta: float


@dataclass(frozen=True)
class DemonstrationCount:
    """How many demonstrations a finished job was asked for and its prompt serves, and why it
    serves fewer: a job of a method that plans its demonstrations (the token loop) may leave
    some out after generating them (a text check failed). Public: the count asked is the
    job's setting, which were left out and why are functions of DP outputs.

    ``dropped`` counts them by reason: ``empty`` (only whitespace), ``label_echo`` (only a
    label's name) or ``too_short`` (fewer than the job's ``min_words`` words). ``note`` says
    it in words (None when none was left out)."""

    requested: int
    served: int
    dropped: dict[str, int]
    note: str | None = None


class MethodPlan(ABC):
    """A job fixed before it reads a private record: what it costs and how it runs.

    The interface's view of a plan; each method's own plan (``SynthesisPlan``, ``PatePlan``,
    ``PromptDpsgdPlan``) sits behind it (docs/service.md, "Names: a glossary")."""

    @property
    @abstractmethod
    def delta(self) -> float:
        """The job's delta (the ledger charges the event at it)."""

    @abstractmethod
    def event(self) -> DatasetEvent:
        """The privacy event the ledger reserves for the job."""

    @abstractmethod
    def epsilon(self) -> float:
        """The job's own epsilon at :attr:`delta`."""

    @property
    @abstractmethod
    def progress_total(self) -> int:
        """Units of progress the run reports (tokens, public inputs)."""

    @property
    def public_records(self) -> int | None:
        """Records of the public dataset the job was planned for; None: it reads none."""
        return None

    @abstractmethod
    def stored(self) -> Stored:
        """What the job row keeps, for :meth:`Method.rebuild`."""

    def check_backend(self, backend: LLMBackend) -> None:
        """Raise (a :class:`~app.results.SynthesisError`) if the job cannot run
        on ``backend``; the worker asks before the job touches data, so such a job fails
        without being charged. Every backend will do unless a method says otherwise."""
        del backend

    @abstractmethod
    def run(
        self,
        records: list[Record],
        backend: LLMBackend,
        progress: Progress | None,
        public: Sequence[str] = (),
    ) -> SynthesisResult:
        """Run the job on the private ``records`` (and ``public`` texts, if it reads some).
        An exception ``progress`` raises (a cancellation) stops it there."""


class InnerPlan(Protocol):
    """What a method's own plan (``SynthesisPlan``, ``PatePlan``, ``PromptDpsgdPlan``)
    offers the interface: its delta, its event and its epsilon."""

    @property
    def delta(self) -> float: ...

    def event(self) -> DatasetEvent: ...

    def epsilon(self) -> float: ...


class WrappedPlan(MethodPlan):
    """A :class:`MethodPlan` over a method's own plan (the dataclass field ``plan``): its
    delta, event and epsilon are the inner plan's, so each method writes only what differs
    (progress, records, what is stored and how it runs)."""

    plan: InnerPlan  # declared again, as a dataclass field, by each subclass

    @property
    def delta(self) -> float:
        return self.plan.delta

    def event(self) -> DatasetEvent:
        return self.plan.event()

    def epsilon(self) -> float:
        return self.plan.epsilon()

    def run(
        self,
        records: list[Record],
        backend: LLMBackend,
        progress: Progress | None,
        public: Sequence[str] = (),
    ) -> SynthesisResult:
        """:meth:`execute` once the backend is checked, before any record is read: the one
        signature of :meth:`MethodPlan.run` every wrapped plan shares."""
        self.check_backend(backend)
        return self.execute(RunInputs(records, backend, progress, public))

    @abstractmethod
    def execute(self, job: RunInputs) -> SynthesisResult:
        """Run the inner plan on ``job``'s records (and public texts, if it reads some)."""


class RunInputs(NamedTuple):
    """What :meth:`MethodPlan.run` is given, as one value for :meth:`WrappedPlan.execute`."""

    records: list[Record]
    backend: LLMBackend
    progress: Progress | None
    public: Sequence[str]


class JobConfig(Documented):
    """The fields every job's config holds: the job's own (epsilon, delta, accounting) and
    the seed (CLI and tests only). A new method's config subclasses it and adds its own
    parameters, so that :meth:`Method.configure` can build it with no code of the method's.
    (The built-in configs predate it and declare the same fields themselves.)"""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epsilon: float = Field(gt=0.0, allow_inf_nan=False)
    # Public and the same for every dataset, never 1/|D| (app.privacy.unit).
    delta: float = Field(DEFAULT_DELTA, gt=0.0, lt=1.0)
    accounting: Accounting = Accounting.TIGHT
    seed: int | None = None


class Method(ABC):
    """One synthesis method: its name, parameters, config, plan, rebuild and public stats.

    Everything the rest of the service shows or asks about a method is declared here once:
    :attr:`parameters` (from which the request's :attr:`params` model, the API schema, the
    CLI options, the dashboard form and the docs table are generated), :attr:`shots_param`,
    the progress :attr:`unit` and :attr:`verb`, the :meth:`settings` line and which of a
    run's stats are public. A subclass that declares :attr:`parameters` gets :attr:`params`
    built from them. :meth:`configure` builds :attr:`config_class` from the job's fields and
    the client's parameters, so a method writes no glue for it; it overrides the hooks
    :meth:`job_shots` and :meth:`build_config` only where it differs. The registry
    (:mod:`app.methods.registry`) names the instances.
    """

    name: str  # the registry's key, the API's ``method`` and the jobs.method column
    # The method's name for people, in `dpsyn eval`'s tables and plots ("": its name).
    title: str = ""
    # What a client may set (the job's own fields, epsilon, delta, accounting and shots, and
    # the seed, which voids the guarantee, are not among them).
    parameters: ClassVar[tuple[Param, ...]] = ()
    # The config field that holds the job's shots (its flag is the CLI's spelling of them);
    # None: the method has no demonstrations, and the job's shots do not apply.
    shots_param: ClassVar[Param | None] = None
    params: ClassVar[type[BaseModel]] = params_model("NoParams", ())  # from parameters
    reads_public: ClassVar[bool] = False  # also reads a public dataset of unlabelled texts
    # plans with the private dataset's label counts (released once per dataset, or declared
    # public); False: its plan is given none (:class:`Counts` with no source), and a job of
    # it never causes a count release
    reads_counts: ClassVar[bool] = True
    zero_epsilon_baseline: ClassVar[bool] = False  # epsilon = 0 runs without private data
    # needs gradients and input embeddings: only the local transformers backend runs it
    # (the service should refuse such a job at submission when its backend is vLLM)
    needs_gradients: ClassVar[bool] = False
    unit: ClassVar[str]  # what progress counts
    verb: ClassVar[str]  # what the run does, for progress bars
    params_hint: ClassVar[str] = ""  # added to the list of parameters in a refusal
    public_stats_help: ClassVar[str] = ""  # what :meth:`public_stats` holds, for the API docs
    # The run's stats the API may show (functions of DP outputs only): :meth:`public_stats`.
    public_stat_names: ClassVar[tuple[str, ...]] = ()
    # The config :meth:`configure` builds, and the key its JSON has in a job's stored config
    # ("": the method's name), which :meth:`stored_config` and :meth:`summary` read.
    config_class: ClassVar[type[BaseModel]]
    stored_key: ClassVar[str] = ""
    # What ``dpsyn audit`` (app.eval.audit) runs this method's trials with, under its full
    # and its --quick profile (a job's params; the user's options override them).
    audit_params: ClassVar[Mapping[str, Any]] = {}
    audit_quick_params: ClassVar[Mapping[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "parameters" in cls.__dict__:
            cls.params = params_model(f"{cls.__name__}Params", cls.parameters)

    def configure(
        self,
        task: TaskSpec,
        *,
        epsilon: float,
        delta: float | None,
        shots: int | None,
        accounting: Accounting,
        params: Mapping[str, Any] | None,
        seed: int | None = None,
    ) -> BaseModel:
        """The job's validated config from the job's fields and the client's ``params``;
        :class:`ParamsError` naming the first problem. ``seed`` is for the CLI and tests
        only (it voids the guarantee): the service never passes one. The job's shots set
        :attr:`shots_param` (a method without one ignores them)."""
        fields: dict[str, Any] = {"epsilon": epsilon, "accounting": accounting, "seed": seed}
        if delta is not None:  # else the config's default: DEFAULT_DELTA, public
            fields["delta"] = delta
        shots = self.job_shots(task, shots)
        if shots is not None and self.shots_param is not None:
            fields[self.shots_param.name] = shots
        try:
            return self.build_config(task, {**fields, **client_overrides(params)})
        except (ValidationError, TypeError) as err:
            raise config_error(err) from None

    def job_shots(self, task: TaskSpec, shots: int | None) -> int | None:
        """The shots a job without any gets from ``task`` (None: the config's default)."""
        del task
        return shots

    def build_config(self, task: TaskSpec, fields: dict[str, Any]) -> BaseModel:
        """:attr:`config_class` from ``fields`` (a method whose defaults depend on the task
        builds it otherwise); pydantic's ValidationError or a TypeError if they do not fit."""
        del task
        return self.config_class(**fields)

    def stored_config(self, stored: Stored) -> Any:
        """The config a stored job was planned with (:attr:`stored_key` of its JSON)."""
        return self.config_class.model_validate(stored.config[self.stored_key or self.name])

    @abstractmethod
    def plan(self, task: TaskSpec, config: Any, counts: Counts) -> MethodPlan:
        """Plan a job (noise calibrated to the config's epsilon) from ``counts``, read only
        through a charged DP release unless declared public; a ValueError whose message names
        settings (and public counts only) if it cannot run."""

    @abstractmethod
    def rebuild(self, task: TaskSpec, stored: Stored) -> MethodPlan:
        """The plan admission made, rebuilt from what the job row stored."""

    def summary(self, stored: Stored) -> tuple[str | None, int]:
        """The accounting and the shots of a stored job, as the API shows them (read from
        the stored config's JSON; 0 shots for a method without :attr:`shots_param`)."""
        config = stored.config.get(self.stored_key or self.name) or {}
        shots = config.get(self.shots_param.name, 0) if self.shots_param is not None else 0
        return config.get("accounting"), int(shots)

    def counts_mode(self, stored: Stored) -> CountsMode | None:
        """How the stored job knew the dataset's per-label record counts: released under DP
        or declared public by the owner (from what its plan stored); None: the method reads
        no private count, or the job was planned before counts were private."""
        del stored
        return None

    def audit_subset(self, config: Any) -> int | None:
        """Records of each label that an audit trial runs this method on, for a method whose
        release for a label reads only that label's records (the token loop: ``M * N``, so
        every teacher sees every one); None: the trial draws its records from all labels."""
        del config
        return None

    def audit_refusal(self) -> str | None:
        """Why ``dpsyn audit`` cannot attack this method's release, in words; None: it can
        (the attack scores candidates after the prompt or soft prompt a run released)."""
        if self.reads_public:
            return "it also reads a public dataset of unlabelled texts, which the audit lacks"
        return None

    def public_stats(self, result: SynthesisResult) -> dict[str, Any] | None:
        """The run's stats the API may show: those of :attr:`public_stat_names` it reports
        (functions of DP outputs only); None when the method declares none."""
        if not self.public_stat_names:
            return None
        return {k: result.stats[k] for k in self.public_stat_names if k in result.stats}

    def progress_done(self, result: SynthesisResult, total: int) -> int:
        """Progress of a finished run, out of ``total``."""
        return total

    def progress_note(self, stats: Mapping[str, Any], done: int, total: int) -> str | None:
        """Why a succeeded job's progress stopped at ``done`` of ``total`` planned units, in
        plain words from its public stats; None when it did not (or there is nothing to
        say). A job that may end early by design (PromptPATE) explains it here, so that a
        finished job never reads as stuck part-way."""
        del stats, done, total
        return None

    def report(self, result: SynthesisResult) -> str | None:
        """A line about the run for the CLI, from its public stats; None: nothing to add."""
        return None

    def prompt_notes(
        self, stored: Stored, stats: Mapping[str, Any], labels: Sequence[str]
    ) -> list[str]:
        """Plain sentences a reader of the job's stored prompt should see beside it (its API
        record, ``dpsyn prompts get``, the prompt page): how the prompt differs from what the
        job planned, e.g. demonstrations left out. ``stored`` is the job's plan, ``stats`` its
        public stats, ``labels`` those of the prompt's demonstrations in order. Derived when
        the prompt is read, from what is stored already, so that prompts stored before a note
        existed get it too. Functions of public settings and DP outputs only, never of a
        record. None ([]) by default: a method says what it has to add."""
        del stored, stats, labels
        return []

    def demonstration_count(
        self, stored: Stored, stats: Mapping[str, Any]
    ) -> DemonstrationCount | None:
        """A finished job's demonstrations asked for, served and left out (by reason), from
        its stored plan and public stats; None (the default) for a method that plans no
        count of demonstrations (PromptPATE's are the public texts it chose, PromptDPSGD's
        prompt is trained vectors)."""
        del stored, stats
        return None

    def settings(self, stored: Stored) -> str | None:
        """The settings a planned job runs with, one line naming those left at their
        default (printed when a run starts and shown with a job); None: nothing to show."""
        del stored
        return None

    def stats_summary(self, stats: Mapping[str, Any]) -> str | None:
        """A phrase about a finished job from its public stats, for the client's one-line
        description of it; None: nothing to add."""
        del stats
        return None


def client_overrides(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parameters a client set (None means unset)."""
    return {k: v for k, v in (params or {}).items() if v is not None}


def config_error(err: ValidationError | TypeError) -> ParamsError:
    """A config that refused the parameters, as one line naming the field."""
    if isinstance(err, ValidationError):
        return ParamsError(f"invalid job parameters: {describe_validation_error(err)}")
    return ParamsError(f"invalid job parameters: {err}")
