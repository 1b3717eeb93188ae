"""Reading public unlabelled inputs, and cutting them to length."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.pate.public import cut, read_public
from app.synthesis.data import DataError
from tests.conftest import require_shared_data, shared_data_dir

IMDB = shared_data_dir() / "imdb" / "test_sample2000.jsonl"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonl_reads_the_text_field_and_ignores_the_label(tmp_path):
    rows = [{"id": 1, "text": "Great\n  film", "label": 1}, {"id": 2, "text": "Dull", "label": 0}]
    path = _write(tmp_path, "p.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert read_public(path) == ["Great film", "Dull"]


def test_jsonl_with_another_field(tmp_path):
    path = _write(tmp_path, "p.jsonl", json.dumps({"review": "fine", "text": 3}) + "\n")
    assert read_public(path, "review") == ["fine"]


def test_csv_and_tsv_read_the_named_column(tmp_path):
    csv_path = _write(tmp_path, "p.csv", 'id,body,label\n1,"one, two",1\n2,three,0\n')
    assert read_public(csv_path, "body") == ["one, two", "three"]
    tsv_path = _write(tmp_path, "p.tsv", "body\tlabel\nfour five\t1\n")
    assert read_public(tsv_path, "body") == ["four five"]


def test_plain_text_is_one_input_per_non_blank_line(tmp_path):
    path = _write(tmp_path, "p.txt", "first input\n\n  second   input \n")
    assert read_public(path) == ["first input", "second input"]


@pytest.mark.parametrize(
    ("name", "content", "field", "message"),
    [
        ("p.jsonl", '{"text": "ok"}\nnot json\n', "text", "line 2 is not valid JSON"),
        ("p.jsonl", '{"text": "ok"}\n[1, 2]\n', "text", "line 2 is not a JSON object"),
        ("p.jsonl", '{"text": "ok"}\n\n{"body": "x"}\n', "text", "line 3 has no field 'text'"),
        ("p.jsonl", '{"text": null}\n', "text", "line 1: field 'text' is null, not a string"),
        ("p.jsonl", '{"text": 5}\n', "text", "line 1: field 'text' is int, not a string"),
        ("p.jsonl", '{"text": "  "}\n', "text", "line 1: field 'text' is empty"),
        ("p.csv", "body,label\nx,1\n", "text", "no column 'text' in the header row (line 1, 2"),
        ("p.csv", "text,label\nx,1\n,0\n", "text", "line 3: column 'text' is empty"),
        ("p.parquet", "x", "text", "unsupported public data file type '.parquet'"),
        ("p.txt", "   \n\n", "text", "file is empty"),
    ],
)
def test_errors_name_file_line_and_problem(tmp_path, name, content, field, message):
    path = _write(tmp_path, name, content)
    with pytest.raises(DataError) as info:
        read_public(path, field)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(DataError, match=r"missing\.jsonl: data file not found"):
        read_public(tmp_path / "missing.jsonl")


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short text", 600, "short text"),
        ("one two three four", 12, "one two"),
        ("one two three four", 13, "one two three"),
        ("one two three four", 7, "one two"),
        ("unbreakableword rest", 5, "unbre"),
        ("a\n b   c", 100, "a b c"),
    ],
)
def test_cut_at_a_word_boundary(text, limit, expected):
    assert cut(text, limit) == expected
    assert len(cut(text, limit)) <= limit


def test_the_shared_imdb_sample_reads_as_2000_texts():
    require_shared_data(IMDB)
    texts = read_public(IMDB)
    assert len(texts) == 2000
    assert all(isinstance(t, str) and t and "\n" not in t for t in texts)
