"""Task specs: the built-ins, validation messages, and custom spec files."""

from __future__ import annotations

import json

import pytest
import yaml
from pydantic import ValidationError

from app.synthesis.tasks import (
    BUILTIN_TASKS,
    TaskError,
    TaskKind,
    TaskSpec,
    classification_task,
    get_task,
    load_task,
)

CUSTOM = {
    "name": "tickets",
    "kind": "classification",
    "instruction": "Given a team, generate a support ticket for that team.",
    "icl_instruction": "Route each support ticket to billing or network.",
    "text_field": "Ticket",
    "label_field": "Team",
    "labels": ["Billing", "Network"],
    "verbalisers": {"Network": "net"},
}


def test_builtin_tasks_and_their_labels():
    assert set(BUILTIN_TASKS) == {"agnews", "trec", "trec14", "sst2", "mitg", "mitd"}
    assert len(BUILTIN_TASKS["trec14"].labels) == 14  # the many-label public task
    assert BUILTIN_TASKS["agnews"].labels == ("World", "Sports", "Business", "Technology")
    assert BUILTIN_TASKS["trec"].labels == (
        "Abbreviation",
        "Entity",
        "Description",
        "Person",
        "Location",
        "Number",
    )
    assert BUILTIN_TASKS["sst2"].labels == ("negative", "positive")
    for name in ("mitg", "mitd"):
        spec = BUILTIN_TASKS[name]
        assert spec.kind == TaskKind.EXTRACTION and spec.labels == ()
        assert 25 <= len(spec.candidates) <= 40
        assert spec.target_labels() == spec.candidates
    assert BUILTIN_TASKS["mitg"].slot == "genre" and BUILTIN_TASKS["mitd"].slot == "director"


def test_builtin_specs_are_frozen_and_hashable():
    spec = BUILTIN_TASKS["trec"]
    with pytest.raises(ValidationError):
        spec.name = "other"  # type: ignore[misc]
    assert hash(spec) == hash(TaskSpec.model_validate(spec.model_dump()))


def test_default_verbalisers_are_lowercased_labels():
    spec = BUILTIN_TASKS["trec"]
    assert spec.verbalisers["Location"] == "location"
    assert spec.verbalise("Location") == "location"
    assert spec.verbalise("location") == "location"  # idempotent
    assert BUILTIN_TASKS["mitg"].verbalise("comedy") == "comedy"


def test_custom_verbalisers_fill_in_defaults():
    spec = TaskSpec.model_validate(CUSTOM)
    assert spec.verbalisers == {"Billing": "billing", "Network": "net"}
    assert spec.target_labels() == ("Billing", "Network")


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"labels": ["Billing"]}, "labels", "at least 2 labels"),
        ({"labels": ["Billing", "billing"]}, "labels", "duplicate label"),
        ({"labels": ["Billing", "Net\nwork"]}, "labels.1", "single line"),
        ({"verbalisers": {"Sales": "s"}}, "verbalisers", "unknown label 'Sales'"),
        ({"verbalisers": {"Billing": "net", "Network": "Net"}}, "verbalisers", "share the"),
        ({"verbalisers": {"Billing": "Network", "Network": "n"}}, "verbalisers", "another label"),
        ({"text_field": "Ticket:"}, "text_field", "must not contain ':'"),
        ({"label_field": ""}, "label_field", "at least 1 character"),
        ({"name": "my task"}, "name", "pattern"),
        ({"kind": "ranking"}, "kind", "'classification' or 'extraction'"),
        ({"slot": "team"}, "slot", "take no slot"),
        ({"candidates": ["x"]}, "candidates", "use 'labels'"),
        ({"colour": "red"}, "colour", "Extra inputs"),
    ],
)
def test_invalid_specs_name_the_field(change, field, reason, tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({**CUSTOM, **change}))
    with pytest.raises(TaskError) as info:
        load_task(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    assert f"field {field!r}" in message
    assert reason in message


def test_missing_required_field_is_named(tmp_path):
    data = dict(CUSTOM)
    del data["icl_instruction"]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(TaskError, match=r"field 'icl_instruction': Field required"):
        load_task(path)


def test_extraction_rules(tmp_path):
    base = {**CUSTOM, "kind": "extraction", "slot": "team"}
    del base["labels"], base["verbalisers"]
    spec = TaskSpec.model_validate(base)  # candidates may come later
    with pytest.raises(TaskError, match="no candidates"):
        spec.target_labels()
    assert spec.with_candidates(["billing", "network"]).target_labels() == ("billing", "network")
    with pytest.raises(TaskError, match="field 'candidates': duplicate candidate"):
        spec.with_candidates(["billing", "Billing"])
    for change, field in [
        ({"slot": None}, "slot"),
        ({"labels": ["a", "b"]}, "labels"),
    ]:
        path = tmp_path / "x.yml"
        path.write_text(yaml.safe_dump({**base, **change}))
        with pytest.raises(TaskError, match=f"field '{field}'"):
            load_task(path)


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_spec_files_round_trip(suffix, tmp_path):
    for spec in (TaskSpec.model_validate(CUSTOM), BUILTIN_TASKS["mitd"]):
        data = spec.model_dump(mode="json")
        path = tmp_path / f"{spec.name}{suffix}"
        path.write_text(json.dumps(data) if suffix == ".json" else yaml.safe_dump(data))
        assert load_task(path) == spec
        assert get_task(str(path)) == spec


def test_hand_written_yaml_spec(tmp_path):
    path = tmp_path / "tickets.yaml"
    path.write_text(
        "name: tickets\n"
        "kind: classification\n"
        "instruction: Given a team, generate a support ticket for that team.\n"
        "icl_instruction: Route each support ticket to billing or network.\n"
        "text_field: Ticket\n"
        "label_field: Team\n"
        "labels: [Billing, Network]\n"
    )
    spec = load_task(path)
    assert spec.labels == ("Billing", "Network")
    assert spec.verbalisers == {"Billing": "billing", "Network": "network"}


def test_file_errors_are_one_line_task_errors(tmp_path):
    cases = {
        tmp_path / "missing.json": "not found",
        tmp_path / "bad.json": "invalid JSON at line 1",
        tmp_path / "bad.yaml": "invalid YAML at line 2",
        tmp_path / "list.yaml": "must be a mapping of fields, not list",
        tmp_path / "spec.toml": "unsupported spec file type '.toml'",
    }
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "bad.yaml").write_text("name: x\n  kind: [unclosed\n")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "spec.toml").write_text("name = 'x'")
    for path, reason in cases.items():
        with pytest.raises(TaskError) as info:
            load_task(path)
        assert isinstance(info.value, ValueError)
        assert str(path) in str(info.value) and reason in str(info.value)
        assert "\n" not in str(info.value)


def test_get_task_by_name_or_path(tmp_path):
    assert get_task("trec") is BUILTIN_TASKS["trec"]
    assert get_task("AGNews") is BUILTIN_TASKS["agnews"]
    with pytest.raises(TaskError, match=r"unknown task 'dbpedia'.*agnews, mitd, mitg, sst2, trec"):
        get_task("dbpedia")
    with pytest.raises(TaskError, match="not found"):
        get_task(tmp_path / "nope.yaml")


# --- tasks from the command line (issue 12: a 14-class DBPedia-like task) --------------------

DBPEDIA = (
    "Company", "EducationalInstitution", "Artist", "Athlete", "OfficeHolder",
    "MeanOfTransportation", "Building", "NaturalPlace", "Village", "Animal", "Plant", "Album",
    "Film", "WrittenWork",
)  # fmt: skip


def test_command_line_task_answers_with_the_labels_as_given():
    spec = classification_task(DBPEDIA)
    assert spec.labels == DBPEDIA
    # Lowercasing made "meanoftransportation", a word the model never saw.
    assert spec.verbalise("MeanOfTransportation") == "MeanOfTransportation"
    assert all(spec.verbalise(label) == label for label in DBPEDIA)
    # The classification instruction lists every answer word; the spec survives a round trip.
    assert spec.icl_instruction == (
        "Classify each text by its label: " + ", ".join(DBPEDIA[:-1]) + " or WrittenWork."
    )
    assert TaskSpec.model_validate(spec.model_dump()) == spec


def test_command_line_task_answer_words_and_instructions_can_be_set():
    spec = classification_task(
        DBPEDIA,
        answer_words={"MeanOfTransportation": "vehicle", "OfficeHolder": "politician"},
        instruction="Given a category, write a Wikipedia abstract.",
        label_field="Category",
        text_field="Abstract",
    )
    assert spec.verbalise("MeanOfTransportation") == "vehicle"
    assert spec.verbalise("Company") == "Company"
    assert spec.instruction == "Given a category, write a Wikipedia abstract."
    assert "by its category: Company, EducationalInstitution, Artist, Athlete, politician" in (
        spec.icl_instruction
    )
    own = classification_task(("a", "b"), icl_instruction="Pick a or b.")
    assert own.icl_instruction == "Pick a or b."


@pytest.mark.parametrize(
    ("labels", "words", "message"),
    [
        (("Film", "Album"), {"Plant": "p"}, "answer word for 'Plant', which is not one"),
        (("Film", "Album"), {"Film": "Album"}, "share the answer word 'Album'"),
        (("Film", "Album"), {"Film": "album"}, "share the answer word 'Album'"),
        (("Film", "Album", "Plant"), {"Film": "Plant", "Plant": "p"}, "is another label"),
        (("Film", "film"), None, "duplicate label 'film'"),
        (("Film",), None, "at least 2 labels"),
    ],
)
def test_command_line_task_errors_are_one_line_task_errors(labels, words, message):
    with pytest.raises(TaskError, match=message) as info:
        classification_task(labels, answer_words=words)
    assert "\n" not in str(info.value)


def test_builtin_answer_words_and_instructions_are_unchanged():
    """The evaluation tables were measured with exactly these; a new default must not move
    them."""
    words = {name: dict(spec.verbalisers) for name, spec in BUILTIN_TASKS.items()}
    assert words == {
        "agnews": {
            "World": "world", "Sports": "sports", "Business": "business",
            "Technology": "technology",
        },
        "trec": {
            "Abbreviation": "abbreviation", "Entity": "entity", "Description": "description",
            "Person": "person", "Location": "location", "Number": "number",
        },
        "trec14": {label: label for label in BUILTIN_TASKS["trec14"].labels},
        "sst2": {"negative": "negative", "positive": "positive"},
        "mitg": {},
        "mitd": {},
    }  # fmt: skip
    assert BUILTIN_TASKS["trec"].icl_instruction == (
        "Classify the questions based on whether their answer type is an "
        "abbreviation, entity, description, person, location or number."
    )
    assert BUILTIN_TASKS["agnews"].icl_instruction == (
        "Classify the news articles into the topics world, sports, business and technology."
    )
    assert BUILTIN_TASKS["sst2"].icl_instruction == (
        "Classify the sentiment of each movie review as negative or positive."
    )
