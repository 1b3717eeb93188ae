"""Readers of the private data: the shared benchmark files, user tables, and every error path.

Error messages must name the file and the problem and never contain record text: each error
test plants SECRET in the records and checks that it stays out of the message.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from app.synthesis.data import (
    DataError,
    Record,
    load_dataset,
    partition,
    read_agnews,
    read_mit,
    read_sst2,
    read_table,
    read_trec,
)
from app.synthesis.tasks import BUILTIN_TASKS, TaskSpec
from tests.conftest import require_shared_data, shared_data_dir

DATA = shared_data_dir()


@pytest.fixture
def shared_data() -> Path:
    """The shared benchmark folder; a test without it skips, or fails under
    REQUIRE_SERVICES=1 (tests/conftest.py)."""
    return require_shared_data()


needs_data = pytest.mark.usefixtures("shared_data")

SECRET = "zqxsecretword"
TICKETS = TaskSpec(
    name="tickets",
    kind="classification",
    instruction="Given a team, generate a support ticket for that team.",
    icl_instruction="Route each support ticket to billing or network.",
    text_field="Ticket",
    label_field="Team",
    labels=("Billing", "Network"),
)


def data_error(call, *args) -> str:
    """The message of the DataError that ``call(*args)`` raises, checked for privacy."""
    with pytest.raises(DataError) as info:
        call(*args)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "\n" not in message and SECRET not in message
    return message


# --- the shared benchmark files -------------------------------------------------------------


@needs_data
def test_trec_train():
    # The README's 5,451 is `wc -l`: the last of the 5,452 questions has no newline.
    records = load_dataset(BUILTIN_TASKS["trec"], DATA / "trec" / "train.txt")
    assert len(records) == 5452
    assert set(partition(records)) == set(BUILTIN_TASKS["trec"].labels)
    assert records[0] == Record("How did serfdom develop in and then leave Russia ?", "Description")
    assert Counter(r.label for r in records)["Location"] == 835


@needs_data
def test_trec14_keeps_its_fourteen_fine_classes_of_trec():
    """The many-label public task: the questions of 14 fine classes, named in words."""
    records = load_dataset(BUILTIN_TASKS["trec14"], DATA / "trec" / "train.txt")
    counts = Counter(r.label for r in records)
    assert set(counts) == set(BUILTIN_TASKS["trec14"].labels)
    assert counts["person"] == 962 and counts["food"] == 103 and len(records) == 4064


def test_trec14_reads_only_its_classes(tmp_path):
    path = tmp_path / "trec.txt"
    path.write_text("LOC:city Where is Paris ?\nNUM:other What ?\nHUM:ind Who ?\n")
    records = load_dataset(BUILTIN_TASKS["trec14"], path)
    assert records == [Record("Where is Paris ?", "city"), Record("Who ?", "person")]
    path.write_text("LOC:city Where ?\nnot a line\n")
    assert data_error(lambda p: load_dataset(BUILTIN_TASKS["trec14"], p), path) == (
        f"{path}: line 2 is not 'COARSE:fine question'"
    )


@needs_data
def test_sst2_train():
    records = load_dataset(BUILTIN_TASKS["sst2"], DATA / "sst2" / "stsa.binary.train")
    assert len(records) == 6920
    assert Counter(r.label for r in records) == {"positive": 3610, "negative": 3310}
    assert records[0].label == "positive"
    assert records[0].text.startswith("a stirring , funny and finally transporting")


@needs_data
def test_agnews_train():
    records = load_dataset(BUILTIN_TASKS["agnews"], DATA / "agnews" / "train_first10429.csv")
    assert len(records) == 10429
    assert set(partition(records)) == {"World", "Sports", "Business", "Technology"}
    first = records[0]
    assert first.label == "Business"
    assert first.text == (
        "Wall St. Bears Claw Back Into the Black (Reuters) Reuters - Short-sellers, "
        "Wall Street's dwindling band of ultra-cynics, are seeing green again."
    )
    assert not any("\\" in r.text or "#39;" in r.text or "\n" in r.text for r in records)


@needs_data
def test_mit_genre_and_director():
    path = DATA / "mit_movies" / "train"
    lines = path.read_text(encoding="utf-8").splitlines()
    with_genre = sum(1 for line in lines if "-Genre " in line)
    genres = load_dataset(BUILTIN_TASKS["mitg"], path)
    assert 0 < len(genres) == with_genre
    assert genres[0].label == "comedy"
    assert genres[0].text.startswith("i am thinking of a comedy movie")
    assert genres[1].label == "british horror"  # a two-word span
    assert not any(" <=> " in r.text or ":" in r.text.split()[0] for r in genres)
    directors = load_dataset(BUILTIN_TASKS["mitd"], path)
    assert 0 < len(directors) == sum(1 for line in lines if "-Director " in line)
    assert Counter(r.label for r in directors)["steven spielberg"] > 10


# --- readers on small files -----------------------------------------------------------------


def test_agnews_cleanup(tmp_path):
    path = tmp_path / "ag.csv"
    path.write_text(
        '"2","Title","It#39;s a \\band #36;5 quot;dealquot; &lt;b&gt;x&lt;/b&gt;"\n\n'
        '"4","Multi","line one\nline two"\n'
    )
    records = read_agnews(path)
    assert records == [
        Record('Title It\'s a band $5 "deal" x', "2"),
        Record("Multi line one line two", "4"),
    ]


def test_mit_spans(tmp_path):
    path = tmp_path / "mit"
    path.write_text(
        "a:O funny:B-Genre crime:I-Genre film:O by:O tim:B-Director burton:I-Director <=> <NULL>\n"
        "a:O scary:I-Genre one:O then:O comedy:B-Genre <=> <NULL>\n"
        "war:B-Genre drama:B-Genre <=> <NULL>\n"
        "no:O slot:O here:B-Year <=> <NULL>\n"
        "what:O is:O 12:30:B-Year <=> <NULL>\n"
    )
    assert [r.label for r in read_mit(path, "Genre")] == ["funny crime", "scary", "war"]
    assert read_mit(path, "director") == [Record("a funny crime film by tim burton", "tim burton")]
    assert read_mit(path, "Year")[-1] == Record("what is 12:30", "12:30")


def test_trec_and_sst2_small(tmp_path):
    trec = tmp_path / "trec.txt"
    trec.write_text("LOC:city Where  is\tParis ?\n\nNUM:count How many ?")
    assert read_trec(trec) == [Record("Where is Paris ?", "LOC"), Record("How many ?", "NUM")]
    sst2 = tmp_path / "sst2"
    sst2.write_text("0 dull .\r\n1 fine .\r\n")
    assert read_sst2(sst2) == [Record("dull .", "0"), Record("fine .", "1")]


def test_tables_csv_tsv_jsonl(tmp_path):
    csv_path = tmp_path / "t.csv"
    csv_path.write_text(
        'id,body,team\n1,"card was, charged twice",Billing\n2,router down,network\n'
    )
    tsv_path = tmp_path / "t.tsv"
    tsv_path.write_text("body\tteam\ncard charged twice\tBilling\n")
    jsonl_path = tmp_path / "t.jsonl"
    jsonl_path.write_text(
        json.dumps({"text": "router down", "label": "Network"}) + "\n\n"
        + json.dumps({"text": "refund", "label": "billing", "extra": 1}) + "\n"
    )  # fmt: skip
    assert read_table(csv_path, "body", "team")[0] == Record("card was, charged twice", "Billing")
    assert load_dataset(TICKETS, csv_path, "body", "team") == [
        Record("card was, charged twice", "Billing"),
        Record("router down", "Network"),  # case-insensitive match
    ]
    assert load_dataset(TICKETS, tsv_path, "body", "team") == [
        Record("card charged twice", "Billing")
    ]
    assert [r.label for r in load_dataset(TICKETS, jsonl_path)] == ["Network", "Billing"]


def test_builtin_task_reads_a_table_when_columns_are_given(tmp_path):
    path = tmp_path / "q.jsonl"
    # Raw code, label name and verbaliser all map to the public label.
    rows = [("Where is Rome ?", "LOC"), ("Who is he ?", "Person"), ("How far ?", "number")]
    path.write_text("".join(json.dumps({"q": q, "y": y}) + "\n" for q, y in rows))
    records = load_dataset(BUILTIN_TASKS["trec"], path, text_col="q", label_col="y")
    assert [r.label for r in records] == ["Location", "Person", "Number"]


def test_sst2_numeric_json_labels(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"text": "good", "label": 1}\n{"text": "bad", "label": 0.0}\n')
    records = load_dataset(BUILTIN_TASKS["sst2"], path, label_col="label")
    assert [r.label for r in records] == ["positive", "negative"]


def test_extraction_table_skips_records_without_a_value(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text(
        '{"text": "a comedy film", "label": "comedy"}\n'
        '{"text": "some film", "label": null}\n'
        '{"text": "another film", "label": ""}\n'
    )
    assert load_dataset(BUILTIN_TASKS["mitg"], path, label_col="label") == [
        Record("a comedy film", "comedy")
    ]


def test_partition_keeps_first_seen_order():
    records = [Record("a", "y"), Record("b", "x"), Record("c", "y")]
    assert partition(records) == {"y": [records[0], records[2]], "x": [records[1]]}


def test_record_repr_hides_content():
    assert SECRET not in repr(Record(SECRET, SECRET))
    assert repr(Record("abc", "de")) == "Record(text=<3 chars>, label=<2 chars>)"


# --- errors ---------------------------------------------------------------------------------


def test_missing_empty_and_unsupported_files(tmp_path):
    missing = tmp_path / "nope.txt"
    assert data_error(read_trec, missing) == f"{missing}: data file not found"
    empty = tmp_path / "empty.csv"
    empty.write_text("\n  \n")
    assert data_error(read_table, empty) == f"{empty}: file is empty"
    assert "is a directory" in data_error(read_sst2, tmp_path)
    parquet = tmp_path / "x.parquet"
    parquet.write_text("x")
    assert "unsupported data file type '.parquet'" in data_error(read_table, parquet)


def test_unparsable_lines_are_numbered(tmp_path):
    trec = tmp_path / "trec.txt"
    trec.write_text(f"LOC:city Where is {SECRET} ?\n{SECRET} without a tag\n")
    assert data_error(read_trec, trec) == f"{trec}: line 2 is not 'COARSE:fine question'"
    sst2 = tmp_path / "sst2"
    sst2.write_text(f"1 {SECRET}\n\nnolabel {SECRET}\n")
    assert "line 3 is not 'label sentence'" in data_error(read_sst2, sst2)
    ag = tmp_path / "ag.csv"
    ag.write_text(f'"1","t","{SECRET}"\n"2","{SECRET}"\n')
    assert "line 2 has 2 fields, expected 3" in data_error(read_agnews, ag)
    mit = tmp_path / "mit"
    mit.write_text(f"a:O b:B-Genre <=> <NULL>\n{SECRET} c:O <=> <NULL>\n")
    assert "line 2 has a token that is not 'word:TAG'" in data_error(read_mit, mit, "Genre")
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(f'{{"text": "{SECRET}", "label": "Billing"}}\n{{"text": "{SECRET}\n')
    assert data_error(read_table, jsonl) == f"{jsonl}: line 2 is not valid JSON"
    jsonl.write_text(f'["{SECRET}"]\n')
    assert "line 1 is not a JSON object" in data_error(read_table, jsonl)


def test_unknown_column_counts_the_columns_without_naming_them(tmp_path):
    # A file without a header row: its first line is a record, read as the header.
    path = tmp_path / "t.csv"
    path.write_text(f"{SECRET} said hi,Billing\nanother,Network\n")
    message = data_error(read_table, path, "text", "label")
    assert message == (
        f"{path}: no column 'text' in the header row (line 1, 2 columns): name the text and "
        "label columns with --text-col and --label-col (the API's text_column and "
        "label_column), or give the file a header row naming them"
    )
    assert "Billing" not in message
    # a ';'-separated file reads as one column: the message says why (issue 43), and still
    # names nothing of the first row
    path.write_text(f"text;label\n{SECRET};Billing\n")
    message = data_error(read_table, path, "text", "label")
    assert "(line 1, 1 columns)" in message and "separated by ';' or '|'" in message
    assert "text;label" not in message and SECRET not in message
    path.write_text(f"body,team\n{SECRET},Billing\n")
    message = data_error(load_dataset, TICKETS, path, "body", "label")
    assert "no column 'label' in the header row (line 1, 2 columns)" in message
    assert "body" not in message and "team" not in message
    # A JSON line's keys may be private too.
    jsonl = tmp_path / "t.jsonl"
    lines = [{"text": "a", "label": "x"}, {SECRET: "a", "label": "x", "Billing": 1}]
    jsonl.write_text("".join(json.dumps(line) + "\n" for line in lines))
    message = data_error(read_table, jsonl)
    assert message == f"{jsonl}: line 2 has no field 'text' (it has 3 fields)"
    assert "Billing" not in message


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("text", {"nested": SECRET}, "is an object, not a string"),
        ("text", [SECRET], "is an array, not a string"),
        ("text", 5, "is a number, not a string"),
        ("text", None, "is null, not a string"),
        ("text", True, "is a boolean, not a string"),
        ("label", {"name": SECRET}, "is an object, not a string or a number"),
        ("label", [SECRET], "is an array, not a string or a number"),
        ("label", False, "is a boolean, not a string or a number"),
    ],
)
def test_jsonl_text_and_label_must_be_strings(tmp_path, field, value, kind):
    """An object's str() must not be stored as a text or a label (the JSON route refuses
    a non-string text too); numbers and null stay labels (ids, or no slot value)."""
    path = tmp_path / "t.jsonl"
    rows = [{"text": "fine", "label": "x"}, {"text": f"{SECRET} ok", "label": "x", field: value}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert data_error(read_table, path) == f"{path}: line 2: field {field!r} {kind}"


def test_unknown_labels_are_counted_not_shown(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps({"text": "ok", "label": "Billing"}) + "\n"
        + json.dumps({"text": "x", "label": SECRET}) + "\n"
        + json.dumps({"text": "y", "label": SECRET}) + "\n"
        + json.dumps({"text": "z", "label": "Sales"}) + "\n"
    )  # fmt: skip
    message = data_error(load_dataset, TICKETS, path)
    assert message == (
        f"{path}: 3 of 4 records (first: record 2) have 2 distinct label value(s) "
        "that are not labels of task 'tickets' (Billing, Network)"
    )


def test_empty_and_misspelt_labels_are_shown_with_the_label_meant(tmp_path):
    """A team's CSV with a typo and an empty cell used to be refused with counts alone; the
    near misses of the task's (public) label names and the empty values are now shown, with
    the label meant, and a value far from every label is still only counted."""
    path = tmp_path / "t.csv"
    path.write_text(f"text,label\nok,Billing\nx,Biling\nxx,biling\ny,\nz,{SECRET}\nw,network \n")
    message = data_error(load_dataset, TICKETS, path)
    assert message.startswith(f"{path}: 4 of 6 records (first: record 2) have 4 distinct")
    assert "'Biling' (1 record; did you mean 'Billing'?)" in message
    assert "'biling' (1 record; did you mean 'Billing'?)" in message
    assert "(empty) (1 record)" in message
    assert "1 other value(s) not shown" in message and SECRET not in message


def test_builtin_file_with_unknown_codes(tmp_path):
    path = tmp_path / "sst2"
    path.write_text(f"1 {SECRET}\n2 {SECRET}\n")
    assert "1 of 2 records (first: record 2)" in data_error(
        load_dataset, BUILTIN_TASKS["sst2"], path
    )


def test_empty_texts_and_no_records(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(f"text,label\n{SECRET},Billing\n ,Network\n")
    assert "1 records have an empty text (first: record 2)" in data_error(
        load_dataset, TICKETS, path
    )
    path.write_text("text,label\n")
    assert "no records for task 'tickets'" in data_error(load_dataset, TICKETS, path)
    mit = tmp_path / "mit"
    mit.write_text(f"{SECRET}:O film:O <=> <NULL>\n")
    assert "no records with a genre" in data_error(load_dataset, BUILTIN_TASKS["mitg"], mit)


# --- CSV without a header: column numbers and a label map (issue 12) --------------------------

DBPEDIA_MAP = {"1": "Company", "2": "Artist", "3": "MeanOfTransportation"}


def _dbpedia_csv(tmp_path: Path, suffix: str = ".csv") -> Path:
    """DBPedia's own layout: label id, title, abstract; no header row."""
    sep = "\t" if suffix == ".tsv" else ","
    rows = [
        sep.join([str(i), f"Title{i}{j}", f'"{SECRET} abstract, {i}{j}"' if sep == "," else
                  f"{SECRET} abstract {i}{j}"])
        for i in (1, 2, 3) for j in range(2)
    ]  # fmt: skip
    path = tmp_path / f"dbpedia{suffix}"
    path.write_text("\n".join(rows) + "\n\n")
    return path


def test_headerless_csv_by_column_numbers_and_label_map(tmp_path):
    from app.synthesis.tasks import classification_task

    task = classification_task(list(DBPEDIA_MAP.values()))
    path = _dbpedia_csv(tmp_path)
    records = load_dataset(task, path, text_col=(2, 3), label_col=(1,), label_map=DBPEDIA_MAP)
    assert [r.label for r in records] == ["Company"] * 2 + ["Artist"] * 2 + [
        "MeanOfTransportation"
    ] * 2
    assert records[0].text == f"Title10 {SECRET} abstract, 10"  # title and body joined
    only_body = load_dataset(task, path, text_col=(3,), label_col=(1,), label_map=DBPEDIA_MAP)
    assert only_body[5].text == f"{SECRET} abstract, 31"
    raw = read_table(_dbpedia_csv(tmp_path, ".tsv"), (3,), (1,))
    assert [r.label for r in raw] == ["1", "1", "2", "2", "3", "3"]


def test_headerless_csv_errors_name_the_problem(tmp_path):
    from app.synthesis.tasks import classification_task

    task = classification_task(list(DBPEDIA_MAP.values()))
    path = _dbpedia_csv(tmp_path)
    assert "line 1 has 3 fields, column 5 was asked for" in data_error(read_table, path, (5,), (1,))
    assert "give both the text and the label column as numbers" in data_error(
        read_table, path, (2,), "label"
    )
    assert "column numbers start at 1" in data_error(read_table, path, (0,), (1,))
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(json.dumps({"text": SECRET, "label": "1"}) + "\n")
    assert "column numbers are for CSV/TSV" in data_error(read_table, jsonl, (1,), (2,))
    # Ids without a map: the message says how to map them (and shows no value).
    message = data_error(load_dataset, task, path, (3,), (1,))
    assert "6 of 6 records" in message and "--label-map 1=NAME,2=NAME" in message
    bad_map = {"1": "Company", "2": "Plant"}
    assert "label map: 'Plant' is not a label of task 'custom'" in data_error(
        load_dataset, task, path, (3,), (1,), bad_map
    )
    # Partly mapped ids are counted like any unknown label.
    assert "2 of 6 records (first: record 5)" in data_error(
        load_dataset, task, path, (3,), (1,), {"1": "Company", "2": "Artist"}
    )


# --- issue 55: a table's own mistakes, named --------------------------------------------------


def test_overlapping_column_numbers_are_one_column_named_twice(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text(f"{SECRET} a,b,Sports\n{SECRET} c,d,World\n")
    with pytest.raises(DataError, match=r"are both column 2: every record's text would be"):
        read_table(path, (1, 2), (2,))
    assert len(read_table(path, (1, 2), (3,))) == 2  # apart, they are read


def test_wide_rows_are_counted_and_the_first_five_named(tmp_path: Path) -> None:
    path = tmp_path / "d.tsv"
    rows = [f"{SECRET} {i}\tSports\textra" if i % 2 else f"{SECRET} {i}\tWorld" for i in range(16)]
    path.write_text("text\tlabel\n" + "\n".join(rows) + "\n")
    with pytest.raises(DataError) as caught:
        read_table(path)
    message = str(caught.value)
    assert "8 rows have more fields than the header row's 2 columns" in message
    assert "line 3 (3 fields), line 5 (3 fields)" in message and "and 3 more" in message
    assert "a text with a tab in it" in message and SECRET not in message


def test_blank_fields_past_the_header_change_nothing_and_are_read(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text(f"text,label\n{SECRET} a,Sports,\n{SECRET} b,World, \n")
    assert [r.label for r in read_table(path)] == ["Sports", "World"]
