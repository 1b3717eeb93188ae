"""Prompt formats of generation (Tang et al. 2023) and of downstream ICL, as plain strings.

Generation prompts put each example label first, then text, so the model writes a text for
a given label::

    {instruction}

    {label_field}: {label}
    {text_field}: {text}

    {label_field}: {target label}
    {text_field}: {generated so far}

ICL prompts use the natural order, text then label, so a query ends where the answer goes::

    {icl_instruction}

    {text_field}: {text}
    {label_field}: {label}

    {text_field}: {query}
    {label_field}:

Conventions, the same everywhere:

* Labels are written through :meth:`TaskSpec.verbalise` (classification labels become their
  verbaliser word, slot values stay as they are), so demonstrations, teacher prompts and the
  scored answer (:func:`answer_text`) show the same word. Verbalising is idempotent: passing
  the word instead of the label name gives the same prompt.
* Texts are put on one line (whitespace runs become one space): a line ends a field.
* A prompt that the model continues ends right after the colon, with no trailing space.
  The model's first token then carries its own leading space (" How"), as in the rendered
  examples, and ``generated`` is appended as ``" " + generated`` with the leading spaces of
  ``generated`` dropped first: raw detokenised output (" How many") and stripped text
  ("How many") give the same prompt, and it tokenises as the model produced it.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.synthesis.data import Record
from app.synthesis.tasks import TaskSpec


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _continuation(generated: str) -> str:
    generated = generated.lstrip(" ")
    return " " + generated if generated else ""


def render_example(task: TaskSpec, label: str, text: str) -> str:
    """One generation example, label line first (the papers' reverse order, (y, x))."""
    return f"{task.label_field}: {task.verbalise(label)}\n{task.text_field}: {_one_line(text)}\n\n"


def render_demonstration(task: TaskSpec, label: str, text: str) -> str:
    """One downstream ICL demonstration, text line first, as queries are asked."""
    return f"{task.text_field}: {_one_line(text)}\n{task.label_field}: {task.verbalise(label)}\n\n"


def generation_prefix(task: TaskSpec) -> str:
    """The instruction and a blank line: the start of every generation prompt."""
    return f"{task.instruction}\n\n"


def _target(task: TaskSpec, target_label: str, generated: str) -> str:
    return (
        f"{task.label_field}: {task.verbalise(target_label)}\n"
        f"{task.text_field}:{_continuation(generated)}"
    )


def teacher_prompt(
    task: TaskSpec, examples: Sequence[Record], target_label: str, generated: str
) -> str:
    """A teacher's prompt: its private examples, then the target label and the text so far."""
    shots = "".join(render_example(task, record.label, record.text) for record in examples)
    return generation_prefix(task) + shots + _target(task, target_label, generated)


def public_prompt(task: TaskSpec, target_label: str, generated: str) -> str:
    """The teacher prompt without private examples; it picks the public top-K vocabulary."""
    return generation_prefix(task) + _target(task, target_label, generated)


def demonstration_prompt(task: TaskSpec, demos: Sequence[tuple[str, str] | Record]) -> str:
    """The downstream prompt a query is appended to (:func:`query_suffix`).

    ``demos`` are ``(label, text)`` pairs (the order of :func:`render_example`'s arguments
    and of a synthesised demonstration: text generated for a label) or :class:`Record`\\ s.
    """
    pairs = [(d.label, d.text) if isinstance(d, Record) else d for d in demos]
    shots = "".join(render_demonstration(task, label, text) for label, text in pairs)
    return f"{task.icl_instruction}\n\n{shots}"


def query_suffix(task: TaskSpec, query: str) -> str:
    """The query in demonstration form, ending where the answer goes.

    Classification and extraction share the form of the papers' ICL prompts: the text line,
    then the label line left open (``Sentence: ...\\nGenre:``). A classifier scores
    :func:`answer_text` of each label there; an extractor generates the slot value up to the
    end of the line.
    """
    return f"{task.text_field}: {_one_line(query)}\n{task.label_field}:"


def answer_text(task: TaskSpec, label: str) -> str:
    """What follows :func:`query_suffix` for ``label``: a space and its verbaliser."""
    return " " + task.verbalise(label)
