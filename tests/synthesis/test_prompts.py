"""Prompt formats: exact strings for a small spec, and the spacing conventions."""

from __future__ import annotations

import pytest

from app.synthesis.data import Record
from app.synthesis.prompts import (
    answer_text,
    demonstration_prompt,
    generation_prefix,
    public_prompt,
    query_suffix,
    render_demonstration,
    render_example,
    teacher_prompt,
)
from app.synthesis.tasks import BUILTIN_TASKS, TaskSpec, classification_task

SPEC = TaskSpec(
    name="toy",
    kind="classification",
    instruction="Given a type, generate a question.",
    icl_instruction="Classify the questions.",
    text_field="Question",
    label_field="Answer Type",
    labels=("Location", "Number"),
    verbalisers={"Number": "num"},
)
EXAMPLES = [Record("Where is Paris ?", "Location"), Record("How many\nlegs ?", "Number")]


def test_render_example_puts_the_label_first():
    assert render_example(SPEC, "Location", "Where is Paris ?") == (
        "Answer Type: location\nQuestion: Where is Paris ?\n\n"
    )
    # Texts go on one line; labels are verbalised, idempotently.
    assert render_example(SPEC, "Number", " How  many\nlegs ? ") == (
        "Answer Type: num\nQuestion: How many legs ?\n\n"
    )
    assert render_example(SPEC, "num", "x") == render_example(SPEC, "Number", "x")


def test_generation_prefix():
    assert generation_prefix(SPEC) == "Given a type, generate a question.\n\n"


def test_teacher_prompt_exact():
    assert teacher_prompt(SPEC, EXAMPLES, "Number", "") == (
        "Given a type, generate a question.\n\n"
        "Answer Type: location\nQuestion: Where is Paris ?\n\n"
        "Answer Type: num\nQuestion: How many legs ?\n\n"
        "Answer Type: num\nQuestion:"
    )


@pytest.mark.parametrize("generated", ["How many", " How many", "   How many"])
def test_generated_text_follows_one_space(generated):
    prompt = teacher_prompt(SPEC, EXAMPLES[:1], "Number", generated)
    assert prompt.endswith("Answer Type: num\nQuestion: How many")
    assert public_prompt(SPEC, "Number", generated) == (
        "Given a type, generate a question.\n\nAnswer Type: num\nQuestion: How many"
    )


def test_empty_or_blank_generation_ends_at_the_colon():
    assert public_prompt(SPEC, "Location", "") == public_prompt(SPEC, "Location", " ")
    assert public_prompt(SPEC, "Location", "").endswith("Question:")


def test_teacher_prompt_extends_public_prompt():
    """Teachers and the public prompt differ only by the private examples."""
    public = public_prompt(SPEC, "Number", "How")
    teacher = teacher_prompt(SPEC, EXAMPLES, "Number", "How")
    shots = "".join(render_example(SPEC, r.label, r.text) for r in EXAMPLES)
    assert teacher == generation_prefix(SPEC) + shots + public.removeprefix(generation_prefix(SPEC))
    assert teacher_prompt(SPEC, [], "Number", "How") == public


def test_demonstration_prompt_and_query_exact():
    demos = [("Location", "Where is Rome ?"), Record("How old is she ?", "Number")]
    prompt = demonstration_prompt(SPEC, demos) + query_suffix(SPEC, "How far is\nMars ?")
    assert prompt == (
        "Classify the questions.\n\n"
        "Question: Where is Rome ?\nAnswer Type: location\n\n"
        "Question: How old is she ?\nAnswer Type: num\n\n"
        "Question: How far is Mars ?\nAnswer Type:"
    )
    assert answer_text(SPEC, "Number") == " num"
    assert render_demonstration(SPEC, "Number", "x") == "Question: x\nAnswer Type: num\n\n"
    assert demonstration_prompt(SPEC, []) == "Classify the questions.\n\n"


def test_extraction_prompts():
    mitg = BUILTIN_TASKS["mitg"]
    assert public_prompt(mitg, "science fiction", "") == (
        "Given a genre for the film, generate a description accordingly and make sure to "
        "include the given genre in the description.\n\nGenre: science fiction\nSentence:"
    )
    demos = demonstration_prompt(mitg, [("comedy", "a funny film")])
    assert demos.endswith("\n\nSentence: a funny film\nGenre: comedy\n\n")
    assert query_suffix(mitg, "who directed jaws") == "Sentence: who directed jaws\nGenre:"
    assert answer_text(mitg, "film noir") == " film noir"


def test_builtin_trec_teacher_prompt():
    trec = BUILTIN_TASKS["trec"]
    prompt = teacher_prompt(trec, [Record("Where is Paris ?", "Location")], "Number", "How")
    assert prompt == (
        "Given an answer type, generate a question whose answer is of that type.\n\n"
        "Answer Type: location\nQuestion: Where is Paris ?\n\n"
        "Answer Type: number\nQuestion: How"
    )


def test_a_command_line_task_writes_compound_labels_as_given():
    """'MeanOfTransportation' was lowercased into 'meanoftransportation' in demonstrations."""
    spec = classification_task(("Company", "MeanOfTransportation", "NaturalPlace"))
    prompt = demonstration_prompt(spec, [Record("A ship.", "MeanOfTransportation")])
    assert prompt == (
        "Classify each text by its label: Company, MeanOfTransportation or NaturalPlace.\n\n"
        "Text: A ship.\nLabel: MeanOfTransportation\n\n"
    )
    assert answer_text(spec, "NaturalPlace") == " NaturalPlace"
    assert render_example(spec, "MeanOfTransportation", "A bus.").startswith(
        "Label: MeanOfTransportation\n"
    )
