"""The interface every synthesis method implements, and what it is given.

A method turns a client's request into a validated config (:meth:`Method.configure`), plans a
job from public counts alone (:meth:`Method.plan`, the event the ledger reserves), rebuilds
that plan from what a job row stored (:meth:`Method.rebuild`, in the worker) and says which of
a result's stats are public. The plan runs itself (:meth:`MethodPlan.run`). None of this reads
a database or a request: the services and the workers adapt rows to :class:`Counts` and
:class:`Stored`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import UnionType
from typing import Any, ClassVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from app.llm.base import LLMBackend
from app.privacy.accounting import Accounting
from app.privacy.events import DatasetEvent
from app.results import SynthesisResult
from app.synthesis.data import Record
from app.synthesis.tasks import TaskSpec, describe_validation_error

from .kinds import MethodKind

Progress = Callable[[int, int], None]  # (units done, units planned)


class ParamsError(ValueError):
    """The parameters cannot make a config; the message names the parameter (no data)."""


@dataclass(frozen=True)
class Counts:
    """The public sizes planning needs: private records per partition (label), all private
    records, and the records of the public dataset a method reads (0: none)."""

    labels: Mapping[str, int]
    private: int
    public: int = 0


@dataclass(frozen=True)
class Stored:
    """What a job row keeps of its plan (JSON data), from which the worker rebuilds it."""

    config: Mapping[str, Any]
    schedule: Sequence[str]
    delta: float


class MethodPlan(ABC):
    """A job fixed before it reads a private record: what it costs and how it runs."""

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
    @abstractmethod
    def expected_records(self) -> int:
        """Private records the job was planned for (the worker checks the dataset still
        has exactly these before it reads one)."""

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


class Method(ABC):
    """One synthesis method: its parameters, config, plan, rebuild and public stats."""

    kind: MethodKind
    params: ClassVar[type[BaseModel]]  # what a client may set, every field optional
    reads_public: ClassVar[bool] = False  # also reads a public dataset of unlabelled texts
    zero_epsilon_baseline: ClassVar[bool] = False  # epsilon = 0 runs without private data
    # needs gradients and input embeddings: only the local transformers backend runs it
    # (the service should refuse such a job at submission when its backend is vLLM)
    needs_gradients: ClassVar[bool] = False
    unit: ClassVar[str]  # what progress counts
    verb: ClassVar[str]  # what the run does, for progress bars
    cli_shots_option: ClassVar[str]  # the CLI's spelling of the job's shots
    params_hint: ClassVar[str] = ""  # added to the list of parameters in a refusal

    @abstractmethod
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
        only (it voids the guarantee): the service never passes one."""

    @abstractmethod
    def plan(self, task: TaskSpec, config: Any, counts: Counts) -> MethodPlan:
        """Plan a job from public counts (noise calibrated to the config's epsilon); a
        ValueError whose message names counts and settings only if it cannot run."""

    @abstractmethod
    def rebuild(self, task: TaskSpec, stored: Stored) -> MethodPlan:
        """The plan admission made, rebuilt from what the job row stored."""

    @abstractmethod
    def summary(self, stored: Stored) -> tuple[str | None, int]:
        """The accounting and the shots of a stored job, as the API shows them."""

    def public_stats(self, result: SynthesisResult) -> dict[str, Any] | None:
        """The run's stats the API may show (functions of DP outputs only); None: none."""
        return None

    def progress_done(self, result: SynthesisResult, total: int) -> int:
        """Progress of a finished run, out of ``total``."""
        return total

    def report(self, result: SynthesisResult) -> str | None:
        """A line about the run for the CLI, from its public stats; None: nothing to add."""
        return None


def client_overrides(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parameters a client set (None means unset)."""
    return {k: v for k, v in (params or {}).items() if v is not None}


def config_error(err: ValidationError | TypeError) -> ParamsError:
    """A config that refused the parameters, as one line naming the field."""
    if isinstance(err, ValidationError):
        return ParamsError(f"invalid job parameters: {describe_validation_error(err)}")
    return ParamsError(f"invalid job parameters: {err}")


def optional_params(
    name: str,
    source: type[BaseModel],
    fields: Iterable[str],
    descriptions: Mapping[str, str] | None = None,
) -> type[BaseModel]:
    """A model of ``source``'s ``fields``, each optional (None: the config's default) with
    its type and description; the bounds stay with ``source``, which validates them."""
    descriptions = descriptions or {}
    declared: dict[str, Any] = {}
    for field in fields:
        info = source.model_fields[field]
        annotation = _without_none(info.annotation)
        text = descriptions.get(field, info.description or "")
        if info.default is not None and not info.is_required():
            default = info.default.value if isinstance(info.default, Enum) else info.default
            text = f"{text} Default {default}.".strip()
        declared[field] = (annotation | None, Field(None, description=text))
    model: type[BaseModel] = create_model(
        name, __config__=ConfigDict(extra="forbid", frozen=True), **declared
    )
    return model


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation
