"""Command-line options of a custom classification task, shared by ``dpsyn synthesize`` and
``dpsyn datasets upload`` so both read ``--labels``, ``--label-map``, ``--answer-words`` and
column numbers the same way (a task described once works with both commands)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

from app.synthesis.data import Column
from app.synthesis.tasks import TaskError, TaskSpec, classification_task

_NUMBERS = re.compile(r"^\s*\d+(\s*\+\s*\d+)*\s*$")


def parse_column(text: str | None) -> Column | None:
    """``--text-col``/``--label-col``: a header name, or 1-based column numbers of a file
    without a header (``3``, or ``2+3`` to join a title and a body with a space)."""
    if text is None:
        return None
    if _NUMBERS.match(text):
        return tuple(int(part) for part in text.split("+"))
    return text


def parse_pairs(text: str, option: str) -> dict[str, str]:
    """``KEY=VALUE,KEY=VALUE``; a malformed item is a one-line error naming ``option``."""
    pairs: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise TaskError(f"{option}: expected KEY=VALUE items separated by commas, got {item!r}")
        if key in pairs and pairs[key] != value:
            raise TaskError(f"{option}: {key!r} is given twice")
        pairs[key] = value
    if not pairs:
        raise TaskError(f"{option}: expected KEY=VALUE items separated by commas")
    return pairs


# The custom-task options as both commands collect them, by argument name: labels,
# answer_words, instruction, icl_instruction, text_field, label_field (None: not given).
CustomOptions = Mapping[str, str | None]


def given_flags(custom: CustomOptions) -> list[str]:
    """The custom-task options given, as their flags (``--answer-words``): what both commands
    name when they refuse them (with a built-in task, a spec file or a public upload)."""
    return [f"--{name.replace('_', '-')}" for name, value in custom.items() if value is not None]


def custom_task(custom: CustomOptions, label_map: dict[str, str] | None) -> TaskSpec:
    """The task of ``--labels a,b,...`` (or, without it, the names of ``--label-map``) with
    the rest of ``custom``: one reading for both commands, so a task described once works
    with both (a record's lines are "Text" and "Label" unless the options name them)."""
    labels = custom.get("labels")
    answer_words = custom.get("answer_words")
    if labels:
        names = [name.strip() for name in labels.split(",") if name.strip()]
    elif label_map:
        names = list(dict.fromkeys(label_map.values()))  # in map order, once each
    else:
        raise TaskError(
            "a custom task needs --labels a,b,... (or --label-map 1=a,2=b,...) or --spec FILE"
        )
    words = parse_pairs(answer_words, "--answer-words") if answer_words else None
    return classification_task(
        names,
        answer_words=words,
        instruction=custom.get("instruction"),
        icl_instruction=custom.get("icl_instruction"),
        text_field=custom.get("text_field") or "Text",
        label_field=custom.get("label_field") or "Label",
    )


def shots_coverage(shots: int, covered: int, labels: int) -> str:
    """How many of the task's labels the demonstrations cover, and the ``--shots`` that covers
    them all when they cover fewer (the default 4 shots cover 4 of a 14-label task's labels,
    which a new user would not guess: each shot's label is drawn without replacement)."""
    noun = "shot covers" if shots == 1 else "shots cover"
    if covered >= labels:
        return f"{shots} {noun} all {labels} labels"
    return (
        f"{shots} {noun} {covered} of {labels} labels (drawn at random): pass --shots {labels} "
        "for a demonstration of every label"
    )


def empty_labels(task: TaskSpec, labels: Iterable[str]) -> list[str]:
    """The task's labels that no record carries, in the task's order."""
    present = set(labels)
    return [label for label in task.labels if label not in present]


def label_counts_line(task: TaskSpec, labels: Iterable[str]) -> str | None:
    """Records per label name after ``--label-map``, every label of the task included (0 for
    one no raw value maps to), so that a map of another numbering shows before upload or any
    spend. Counts and label names are the dataset's metadata (the API shows them too); no
    record text is read here. None for a task without labels (extraction)."""
    if not task.labels:
        return None
    counts = Counter(labels)
    listed = ", ".join(f"{label} {counts.get(label, 0)}" for label in task.labels)
    line = f"records per label after --label-map: {listed} ({sum(counts.values())} records)"
    if empty := empty_labels(task, counts):
        line += f"; no records for {', '.join(empty)}: check --label-map against the file"
    return line
