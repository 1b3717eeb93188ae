"""What a synthesis task is: its public labels, field names and instructions.

Everything in a :class:`TaskSpec` is public: it goes into every prompt, and for extraction
tasks the ``candidates`` are the slot values generation is conditioned on, so they must come
from public knowledge (the built-in lists below were written by hand), never from the private
data. Built-in specs cover the papers' benchmarks (AG News, TREC, SST-2, MIT-G, MIT-D); a
user describes any other task in a small JSON or YAML file (:func:`load_task`).
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from app.documented import Documented


class TaskError(ValueError):
    """A task spec could not be found, read or validated; the message is one line."""


class TaskKind(StrEnum):
    """Classification answers with one of a fixed set of labels; extraction with free text."""

    CLASSIFICATION = "classification"
    EXTRACTION = "extraction"


def _one_line(value: str) -> str:
    # Prompts are line-based ("Field: value"), so a newline inside a value would break them.
    if "\n" in value or "\r" in value:
        raise ValueError("must be a single line")
    return value


def _field_name(value: str) -> str:
    _one_line(value)
    if ":" in value:
        raise ValueError("must not contain ':' (prompts render it as 'Name: value')")
    return value


Text = Annotated[str, Field(min_length=1)]
Line = Annotated[str, Field(min_length=1), AfterValidator(_one_line)]
FieldName = Annotated[str, Field(min_length=1, max_length=40), AfterValidator(_field_name)]


def _duplicates(values: tuple[str, ...] | list[str]) -> list[str]:
    seen: set[str] = set()
    dups = []
    for value in values:
        key = value.casefold()
        if key in seen:
            dups.append(value)
        seen.add(key)
    return dups


class TaskSpec(Documented):
    """A task's public description; the same object drives generation and downstream ICL.

    ``labels`` are the public class names (classification); ``verbalisers`` map each label
    to the word written after ``label_field:`` in every prompt and scored as the answer
    (default: the label lowercased, which is usually one token after a space). Extraction
    tasks have a ``slot`` (e.g. ``genre``) and ``candidates``: public slot values that
    generation is conditioned on, required before synthesis (:meth:`target_labels`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    """Short identifier: letters, digits, '-', '_' or '.'."""
    kind: TaskKind
    instruction: Text
    """Generation instruction, first line of a prompt."""
    icl_instruction: Text
    """Instruction of the downstream ICL prompt."""
    text_field: FieldName
    """Name of the text line, e.g. 'Question'."""
    label_field: FieldName
    """Name of the label line, e.g. 'Answer Type'."""
    labels: tuple[Line, ...] = Field(default=(), validate_default=True)
    verbalisers: dict[Line, Line] = Field(default_factory=dict, validate_default=True)
    slot: Line | None = Field(default=None, validate_default=True)
    candidates: tuple[Line, ...] = Field(default=(), validate_default=True)

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, labels: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        kind = info.data.get("kind")
        if kind == TaskKind.EXTRACTION and labels:
            raise ValueError("extraction tasks take no labels; list slot values in 'candidates'")
        if kind == TaskKind.CLASSIFICATION and len(labels) < 2:
            raise ValueError(f"classification tasks need at least 2 labels, got {len(labels)}")
        if dups := _duplicates(labels):
            raise ValueError(f"duplicate label {dups[0]!r} (labels are compared ignoring case)")
        return labels

    @field_validator("verbalisers")
    @classmethod
    def _fill_verbalisers(cls, given: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if "labels" not in info.data:  # labels invalid: already reported
            return given
        labels: tuple[str, ...] = info.data["labels"]
        if unknown := [key for key in given if key not in labels]:
            raise ValueError(f"verbaliser for unknown label {unknown[0]!r}")
        words = {label: given.get(label, label.lower()) for label in labels}
        if dups := _duplicates(list(words.values())):
            raise ValueError(f"two labels share the verbaliser {dups[0]!r}")
        for label, word in words.items():
            # A word naming another label would make prompts ambiguous (and verbalising
            # would no longer be idempotent).
            if word in labels and word != label:
                raise ValueError(f"verbaliser of {label!r} is another label, {word!r}")
        return words

    @field_validator("slot")
    @classmethod
    def _check_slot(cls, slot: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if kind == TaskKind.EXTRACTION and slot is None:
            raise ValueError("extraction tasks need a slot (e.g. 'genre')")
        if kind == TaskKind.CLASSIFICATION and slot is not None:
            raise ValueError("classification tasks take no slot")
        return slot

    @field_validator("candidates")
    @classmethod
    def _check_candidates(cls, values: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        if info.data.get("kind") == TaskKind.CLASSIFICATION and values:
            raise ValueError("classification tasks take no candidates; use 'labels'")
        if dups := _duplicates(values):
            raise ValueError(f"duplicate candidate {dups[0]!r}")
        return values

    def __hash__(self) -> int:
        # The dict field makes pydantic's generated hash fail; hash a frozen view instead.
        return hash(
            (
                self.name,
                self.kind,
                self.instruction,
                self.icl_instruction,
                self.text_field,
                self.label_field,
                self.labels,
                tuple(self.verbalisers.items()),
                self.slot,
                self.candidates,
            )
        )

    def verbalise(self, label: str) -> str:
        """The word written for ``label``; anything not a label (e.g. a slot value) as is."""
        return self.verbalisers.get(label, label)

    def target_labels(self) -> tuple[str, ...]:
        """The public labels synthetic demonstrations are generated for.

        Classification: the labels. Extraction: the candidates, which must be given: they
        cannot be taken from the private data without spending privacy budget.
        """
        if self.kind == TaskKind.CLASSIFICATION:
            return self.labels
        if not self.candidates:
            raise TaskError(
                f"task {self.name!r} has no candidates: list public {self.slot} values to "
                "generate demonstrations for in the spec's 'candidates'"
            )
        return self.candidates

    def with_candidates(self, candidates: list[str] | tuple[str, ...]) -> TaskSpec:
        """A copy with other public candidates (validated), e.g. from a command-line flag."""
        try:
            return TaskSpec.model_validate({**self.model_dump(), "candidates": tuple(candidates)})
        except ValidationError as err:
            raise TaskError(f"task {self.name!r}: {describe_validation_error(err)}") from None


def describe_validation_error(err: ValidationError) -> str:
    """One line naming each failing field and why (pydantic's own text spans lines)."""
    parts = []
    for item in err.errors():
        loc = ".".join(str(part) for part in item["loc"]) or "spec"
        msg = item["msg"].removeprefix("Value error, ")
        parts.append(f"field {loc!r}: {msg}")
    return "; ".join(parts).replace("\n", " ")


# --- built-in tasks -------------------------------------------------------------------------

# Common film genres, written from general knowledge (lowercase, as users type queries).
FILM_GENRES: tuple[str, ...] = (
    "action", "adventure", "animated", "biography", "comedy", "crime", "documentary",
    "drama", "family", "fantasy", "film noir", "historical", "horror", "musical", "mystery",
    "romance", "romantic comedy", "science fiction", "sports", "superhero", "thriller",
    "war", "western", "teen", "disaster", "martial arts", "spy", "independent", "silent",
    "holiday",
)  # fmt: skip

# Well-known film directors and studios, written from general knowledge.
FILM_DIRECTORS: tuple[str, ...] = (
    "steven spielberg", "martin scorsese", "alfred hitchcock", "stanley kubrick",
    "quentin tarantino", "christopher nolan", "james cameron", "ridley scott",
    "francis ford coppola", "george lucas", "tim burton", "woody allen", "clint eastwood",
    "david fincher", "peter jackson", "spike lee", "joel coen", "akira kurosawa",
    "sofia coppola", "kathryn bigelow", "wes anderson", "ron howard", "robert zemeckis",
    "oliver stone", "john carpenter", "guillermo del toro", "hayao miyazaki", "pixar",
    "disney", "dreamworks",
)  # fmt: skip

TREC14_LABELS = (
    "person", "organization", "country", "city", "place", "definition", "description",
    "manner", "reason", "count", "date", "creative work", "animal", "food",
)  # fmt: skip

BUILTIN_TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            name="agnews",
            kind=TaskKind.CLASSIFICATION,
            instruction="Given a news topic, generate a short news article about that topic.",
            icl_instruction=(
                "Classify the news articles into the topics world, sports, business and technology."
            ),
            text_field="Article",
            label_field="Topic",
            labels=("World", "Sports", "Business", "Technology"),
        ),
        TaskSpec(
            name="trec",
            kind=TaskKind.CLASSIFICATION,
            instruction=("Given an answer type, generate a question whose answer is of that type."),
            icl_instruction=(
                "Classify the questions based on whether their answer type is an "
                "abbreviation, entity, description, person, location or number."
            ),
            text_field="Question",
            label_field="Answer Type",
            labels=("Abbreviation", "Entity", "Description", "Person", "Location", "Number"),
        ),
        TaskSpec(
            name="trec14",
            kind=TaskKind.CLASSIFICATION,
            instruction="Given an answer type, generate a question whose answer is of that type.",
            icl_instruction=(
                "Classify the questions by the type of their answer: person, organization, "
                "country, city, place, definition, description, manner, reason, count, date, "
                "creative work, animal or food."
            ),
            text_field="Question",
            label_field="Answer Type",
            labels=TREC14_LABELS,
        ),
        TaskSpec(
            name="sst2",
            kind=TaskKind.CLASSIFICATION,
            instruction=(
                "Given a sentiment, generate a sentence from a movie review that expresses "
                "that sentiment."
            ),
            icl_instruction="Classify the sentiment of each movie review as negative or positive.",
            text_field="Review",
            label_field="Sentiment",
            labels=("negative", "positive"),
        ),
        TaskSpec(
            name="mitg",
            kind=TaskKind.EXTRACTION,
            instruction=(
                "Given a genre for the film, generate a description accordingly and make "
                "sure to include the given genre in the description."
            ),
            icl_instruction="Extract the genre of the film from each sentence.",
            text_field="Sentence",
            label_field="Genre",
            slot="genre",
            candidates=FILM_GENRES,
        ),
        TaskSpec(
            name="mitd",
            kind=TaskKind.EXTRACTION,
            instruction=(
                "Given a director for the film, generate a description accordingly and make "
                "sure to include the given director in the description."
            ),
            icl_instruction="Extract the director of the film from each sentence.",
            text_field="Sentence",
            label_field="Director",
            slot="director",
            candidates=FILM_DIRECTORS,
        ),
    )
}


# --- custom specs ---------------------------------------------------------------------------


def _parse(path: Path, text: str) -> Any:
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise TaskError(f"{path}: invalid JSON at line {err.lineno}: {err.msg}") from None
    if suffix in (".yaml", ".yml"):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            problem = getattr(err, "problem", None) or type(err).__name__
            raise TaskError(f"{path}: invalid YAML{where}: {problem}") from None
    raise TaskError(f"{path}: unsupported spec file type {suffix!r} (use .json, .yaml or .yml)")


def load_task(path: str | Path) -> TaskSpec:
    """Read and validate a custom task spec from a ``.json``, ``.yaml`` or ``.yml`` file.

    Every failure is a :class:`TaskError` whose one-line message names the file and the
    problem (for a validation error: each failing field and why).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TaskError(f"{path}: task spec file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise TaskError(f"{path}: cannot read task spec ({type(err).__name__})") from None
    data = _parse(path, text)
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise TaskError(f"{path}: a task spec must be a mapping of fields, not {kind}")
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as err:
        raise TaskError(f"{path}: invalid task spec: {describe_validation_error(err)}") from None


def get_task(name_or_path: str | Path) -> TaskSpec:
    """A built-in task by name (case-insensitive), else a spec file (:func:`load_task`)."""
    key = str(name_or_path)
    if not isinstance(name_or_path, Path) and key.lower() in BUILTIN_TASKS:
        return BUILTIN_TASKS[key.lower()]
    path = Path(name_or_path)
    if path.suffix.lower() in (".json", ".yaml", ".yml") or path.exists():
        return load_task(path)
    raise TaskError(
        f"unknown task {key!r}: not a built-in task ({', '.join(sorted(BUILTIN_TASKS))}) "
        "nor a .json/.yaml spec file"
    )


def _listed(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def classification_task(
    labels: list[str] | tuple[str, ...],
    *,
    answer_words: dict[str, str] | None = None,
    instruction: str | None = None,
    icl_instruction: str | None = None,
    text_field: str = "Text",
    label_field: str = "Label",
    name: str = "custom",
) -> TaskSpec:
    """A classification task from the command line (``--labels``), no spec file needed.

    Unlike a spec file (whose verbalisers default to the lowercased label), the answer words
    are the labels exactly as typed: lowercasing a compound name ("MeanOfTransportation")
    makes a word the model has never seen, which garbles demonstrations and scoring.
    ``answer_words`` overrides some of them. The default classification instruction lists
    the answer words, since the downstream model cannot guess fourteen class names.
    Raises :class:`TaskError` with a one-line message.
    """
    names = [label.strip() for label in labels if label.strip()]
    given = dict(answer_words or {})
    if unknown := [label for label in given if label not in names]:
        raise TaskError(f"answer word for {unknown[0]!r}, which is not one of the labels")
    words = {label: given.get(label, label) for label in names}
    field = label_field.strip().lower() or "label"
    data = {
        "name": name,
        "kind": TaskKind.CLASSIFICATION,
        "instruction": instruction or f"Given a {field}, write a text of that kind.",
        "icl_instruction": icl_instruction
        or f"Classify each text by its {field}: {_listed(list(words.values()))}.",
        "text_field": text_field,
        "label_field": label_field,
        "labels": tuple(names),
        "verbalisers": words,
    }
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as err:
        # Name things as the command line does ("answer words"), not as the spec file does.
        message = describe_validation_error(err).replace("field 'verbalisers': ", "")
        raise TaskError(f"custom task: {message.replace('verbaliser', 'answer word')}") from None
