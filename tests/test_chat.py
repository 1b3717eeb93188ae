"""dpsyn_client.chat: a prompt's chat messages say what its text prompt says, turn for turn.

The prompts here are built as the service stores them: a task spec dumped from
:class:`TaskSpec` (verbalisers filled in) and the text prompt from
:func:`demonstration_prompt`, so a rendering that drifted from the text prompt (another
answer word, another field name, a lost demonstration) fails.
"""

from __future__ import annotations

from typing import Any

import pytest
from dpsyn_client.chat import NoChatFormError, chat_messages

from app.synthesis.prompts import demonstration_prompt, query_suffix
from app.synthesis.tasks import BUILTIN_TASKS, TaskKind, TaskSpec

# Verbalisers that differ from the labels: the assistant must answer the word, not the label.
REVIEWS = TaskSpec(
    name="reviews",
    kind=TaskKind.CLASSIFICATION,
    instruction="Given a sentiment, write a review.",
    icl_instruction="Classify each review as bad or good.",
    text_field="Review",
    label_field="Verdict",
    labels=("NEG", "POS"),
    verbalisers={"NEG": "bad", "POS": "good"},
)


def stored_prompt(task: TaskSpec, demos: list[tuple[str, str]], **extra: Any) -> dict[str, Any]:
    """The API's JSON of a prompt of ``demos`` ((label, text) pairs), as the service stores it."""
    return {
        "id": "p1",
        "task_spec": task.model_dump(mode="json"),
        "demonstrations": [{"label": label, "text": text} for label, text in demos],
        "prompt": demonstration_prompt(task, demos),
        "soft_prompt": None,
        **extra,
    }


def as_text(task: TaskSpec, messages: list[dict[str, str]]) -> str:
    """The text prompt the messages stand for: the system message, then each user turn with
    its answer on the label line."""
    system, *turns = messages
    shots = "".join(
        f"{user['content']}\n{task.label_field}: {assistant['content']}\n\n"
        for user, assistant in zip(turns[::2], turns[1::2], strict=True)
    )
    return f"{system['content']}\n\n{shots}"


DEMOS = [("POS", "a  fine\tfilm"), ("NEG", "dull"), ("POS", "loved it")]


def test_classification_turns_alternate_and_answer_the_verbaliser_word() -> None:
    messages = chat_messages(stored_prompt(REVIEWS, DEMOS))
    assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 3
    assert messages[0]["content"] == REVIEWS.icl_instruction
    assert [m["content"] for m in messages[1::2]] == [
        "Review: a fine film",  # on one line, as the text prompt writes it
        "Review: dull",
        "Review: loved it",
    ]
    assert [m["content"] for m in messages[2::2]] == ["good", "bad", "good"]
    assert as_text(REVIEWS, messages) == demonstration_prompt(REVIEWS, DEMOS)


def test_extraction_answers_the_slot_value_as_is() -> None:
    task = BUILTIN_TASKS["mitg"]
    demos = [("science fiction", "a space film"), ("comedy", "a funny one")]
    messages = chat_messages(stored_prompt(task, demos))
    assert [m["content"] for m in messages[2::2]] == ["science fiction", "comedy"]
    assert messages[1]["content"] == "Sentence: a space film"
    assert as_text(task, messages) == demonstration_prompt(task, demos)


def test_a_query_is_the_last_user_turn_in_the_demonstrations_form() -> None:
    messages = chat_messages(stored_prompt(REVIEWS, DEMOS), "so\nboring")
    assert messages[-1] == {"role": "user", "content": "Review: so boring"}
    # The same line the text prompt asks the query on, without its open label line.
    assert query_suffix(REVIEWS, "so\nboring") == f"{messages[-1]['content']}\nVerdict:"
    with pytest.raises(ValueError, match="query is empty"):
        chat_messages(stored_prompt(REVIEWS, DEMOS), "  ")


def test_no_demonstrations_is_the_instruction_alone() -> None:
    assert chat_messages(stored_prompt(REVIEWS, [])) == [
        {"role": "system", "content": REVIEWS.icl_instruction}
    ]


def test_a_soft_prompt_has_no_chat_form() -> None:
    soft = {"model": "fake", "length": 4, "hidden": 16, "sha256": "0" * 64, "download_url": "x"}
    prompt = stored_prompt(REVIEWS, [], soft_prompt=soft, prompt="")
    with pytest.raises(NoChatFormError, match=r"prompt 'p1' is a soft prompt \(promptdpsgd\)"):
        chat_messages(prompt)


def test_a_prompt_without_a_task_spec_is_refused_naming_the_field() -> None:
    prompt = stored_prompt(REVIEWS, DEMOS, task_spec={})
    with pytest.raises(NoChatFormError, match="no text_field"):
        chat_messages(prompt)
