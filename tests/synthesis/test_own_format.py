"""Which files an upload reads in a built-in task's own format (``own_format``), the rule the
service uses so that the dashboard and the API read the benchmark files the command line
converts (issue 24, item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.synthesis.data import has_own_format, own_format, own_format_tasks
from app.synthesis.tasks import BUILTIN_TASKS, classification_task

TREC = BUILTIN_TASKS["trec"]
AGNEWS = BUILTIN_TASKS["agnews"]
CUSTOM = classification_task(["yes", "no"])


def _file(tmp_path: Path, name: str, content: str = "x\n") -> Path:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return path


def test_every_builtin_task_has_its_own_format_and_a_custom_task_has_none() -> None:
    assert own_format_tasks() == ("agnews", "mitd", "mitg", "sst2", "trec", "trec14")
    assert all(has_own_format(BUILTIN_TASKS[name]) for name in own_format_tasks())
    assert not has_own_format(CUSTOM)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("train.txt", True),  # TREC
        ("stsa.binary.train", True),  # SST-2
        ("train", True),  # MIT Movies
        ("train.csv", False),
        ("train.tsv", False),
        ("train.jsonl", False),
        ("train.NDJSON", False),
    ],
)
def test_a_file_that_is_no_table_by_its_name_is_in_the_tasks_format(
    tmp_path: Path, name: str, expected: bool
) -> None:
    path = _file(tmp_path, name)
    assert own_format(TREC, path) is expected
    assert own_format(CUSTOM, path) is False  # a custom task reads tables only


def test_agnews_csv_is_its_own_format_unless_its_first_row_names_the_columns(
    tmp_path: Path,
) -> None:
    headerless = _file(tmp_path, "train.csv", '"3","A title","A description"\n')
    assert own_format(AGNEWS, headerless)
    table = _file(tmp_path, "table.csv", "text,label\nsome text,World\n")
    assert not own_format(AGNEWS, table)
    named = _file(tmp_path, "named.csv", "article,topic\nsome text,World\n")
    assert own_format(AGNEWS, named)  # other columns than the ones asked for: not a header
    assert not own_format(AGNEWS, named, "article", "topic")
    assert not own_format(AGNEWS, _file(tmp_path, "t.tsv", "3\tt\td\n"))  # AG News is CSV
    assert not own_format(TREC, headerless)  # only AG News's own format is a CSV
