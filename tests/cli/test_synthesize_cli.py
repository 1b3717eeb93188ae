"""``dpsyn synthesize`` end to end with a fake backend, and its one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from app.cli import app
from tests.synthesis.fake_backend import FakeBackend

runner = CliRunner()


@pytest.fixture(autouse=True)
def fake_backend(monkeypatch):
    monkeypatch.setattr(
        "app.cli.synthesize.make_backend",
        lambda kind, model, url, dtype: FakeBackend(stop_after=2, marker="Text:"),
    )


@pytest.fixture
def tickets(tmp_path):
    rows = ["text,category"] + [
        f"secretticket{i},{'billing' if i % 2 else 'network'}" for i in range(60)
    ]
    path = tmp_path / "tickets.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


CUSTOM = ["--task", "custom", "--labels", "billing,network", "--text-col", "text"]


def test_custom_csv_task_runs_and_writes_json(tickets, tmp_path):
    out = tmp_path / "result.json"
    result = runner.invoke(
        app,
        [
            "synthesize",
            "--data",
            str(tickets),
            *CUSTOM,
            "--label-col",
            "category",
            "--epsilon",
            "4",
            "--M",
            "4",
            "--N",
            "2",
            "--tmax",
            "4",
            "--shots",
            "2",
            "--K",
            "10",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "epsilon = " in result.stdout
    data = json.loads(out.read_text())
    assert [d["label"] for d in data["demonstrations"]] != []
    assert 3.96 <= data["epsilon"] <= 4.0
    assert "secretticket" not in result.stdout + json.dumps(data["prompt"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "missing.csv", *CUSTOM, "--label-col", "category"], "missing.csv"),
        (["--label-col", "nosuchcolumn"], "nosuchcolumn"),
        (["--label-col", "category", "--epsilon", "0"], "--epsilon must be > 0"),
        (["--label-col", "category", "--epsilon", "-2"], "--epsilon must be > 0"),
        # The published variant's fixed GoodRadius and coverage checks cost more than this.
        (["--label-col", "category", "--epsilon", "0.0001", "--variant", "paper"], "cannot be met"),
        (
            ["--label-col", "category", "--accounting", "paper", "--public-counts", "--M", "40"],
            "cannot draw",
        ),
        # Paper accounting needs the counts declared public (issue 32): named before any read.
        (["--label-col", "category", "--accounting", "paper"], "pass --public-counts"),
    ],
)
def test_bad_input_is_a_one_line_error(tickets, args, message):
    base = ["synthesize", "--data", str(tickets), *CUSTOM]
    if args[0] == "--data":
        base = ["synthesize"]
    result = runner.invoke(app, [*base, *args, "--tmax", "3"])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "secretticket" not in result.stderr


def test_a_label_with_no_records_is_named(tmp_path):
    """With the counts declared public, an empty label is known before the run (released
    counts are never 0: without the declaration the run goes on with empty teachers)."""
    path = tmp_path / "one_label.csv"
    path.write_text("text,category\n" + "".join(f"t{i},billing\n" for i in range(30)))
    args = [*CUSTOM, "--label-col", "category", "--tmax", "3", "--public-counts"]
    result = runner.invoke(app, ["synthesize", "--data", str(path), *args])
    assert result.exit_code == 2
    assert "network" in result.stderr


# --- --method promptpate ----------------------------------------------------------------------


@pytest.fixture
def pate_files(tmp_path, monkeypatch):
    from tests.pate.fake_backend import PateFakeBackend

    backend = PateFakeBackend()
    monkeypatch.setattr(
        "app.cli.synthesize.make_backend", lambda kind, *, model, url, dtype: backend
    )
    private = tmp_path / "private.txt"
    private.write_text("".join(f"{i % 2} secretreview{i} plot\n" for i in range(100)))
    public = tmp_path / "public.jsonl"
    rows = [{"text": f"a {'good' if i % 2 else 'bad'} film {i}", "label": 9} for i in range(30)]
    public.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return private, public, backend


PATE = ["--task", "sst2", "--method", "promptpate", "--teachers", "10", "--queries", "20"]


def test_promptpate_runs_and_writes_json(pate_files, tmp_path):
    private, public, backend = pate_files
    out = tmp_path / "pate.json"
    args = ["synthesize", "--data", str(private), *PATE, "--public", str(public)]
    args += ["--max-public", "24", "--student-shots", "2", "--epsilon", "50", "--seed", "1"]
    result = runner.invoke(app, [*args, "--max-chars", "500", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "(promptpate, tight accounting, model fake-pate)" in result.stdout
    assert "labelled 20 of 20 public inputs (0 rejected)" in result.stdout
    data = json.loads(out.read_text())
    assert data["method"] == "promptpate" and len(data["demonstrations"]) == 2
    assert data["epsilon"] <= 50.0 and data["event"]["type"] == "pate"
    assert data["plan"]["config"]["teachers"] == 10 and data["plan"]["n_public"] == 24
    assert data["plan"]["config"]["max_chars"] == 500
    for demo in data["demonstrations"]:
        assert demo["label"] == ("positive" if "good" in demo["text"] else "negative")
    assert "secretreview" not in result.stdout + json.dumps(data)
    assert any("secretreview" in prompt for call in backend.calls for prompt in call)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "--method promptpate needs --public FILE"),
        (["--public", "PUBLIC", "--shots", "3"], "--shots is for tang/adadpsyn"),
        (["--public", "PUBLIC", "--M", "3"], "--M are for tang/adadpsyn"),
        (["--public", "PUBLIC", "--instruction-only"], "--instruction-only"),
        (["--public", "PUBLIC", "--epsilon", "inf"], "epsilon"),
        (["--public", "PUBLIC", "--teachers", "0"], "teachers"),
        (["--public", "PUBLIC", "--public-field", "review"], "no field 'review'"),
        (["--public", "PUBLIC", "--max-public", "3"], "at most 3 public inputs"),
        (["--public", "nothere.jsonl"], "nothere.jsonl: data file not found"),
    ],
)
def test_promptpate_bad_input_is_a_one_line_error(pate_files, extra, message):
    private, public, _ = pate_files
    extra = [str(public) if arg == "PUBLIC" else arg for arg in extra]
    result = runner.invoke(app, ["synthesize", "--data", str(private), *PATE, *extra])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "secretreview" not in result.stderr


def test_public_is_refused_with_the_token_loop_methods(pate_files):
    private, public, _ = pate_files
    args = ["synthesize", "--data", str(private), "--task", "sst2", "--public", str(public)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "--public is only used with --method promptpate" in result.stderr


# --- a 14-class task as a new user types it (issue 12) -----------------------------------------

DBPEDIA = (
    "Company",
    "EducationalInstitution",
    "Artist",
    "Athlete",
    "OfficeHolder",
    "MeanOfTransportation",
    "Building",
    "NaturalPlace",
    "Village",
    "Animal",
    "Plant",
    "Album",
    "Film",
    "WrittenWork",
)
LABEL_MAP = ",".join(f"{number}={name}" for number, name in enumerate(DBPEDIA, 1))


@pytest.fixture
def dbpedia(tmp_path):
    """DBPedia's layout: label id 1..14, title, abstract; no header row."""
    rows = [
        f'{number},Title {number}-{i},"secretabstract {i}, about {number}"'
        for number in range(1, 15)
        for i in range(12)
    ]
    path = tmp_path / "dbpedia_train.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_fourteen_classes_from_a_headerless_csv_with_a_label_map(dbpedia, tmp_path):
    out = tmp_path / "result.json"
    result = runner.invoke(
        app,
        [
            "synthesize",
            "--data",
            str(dbpedia),
            "--label-map",
            LABEL_MAP,
            "--text-col",
            "2+3",
            "--label-col",
            "1",
            "--epsilon",
            "8",
            "--shots",
            "14",
            "--M",
            "4",
            "--N",
            "2",
            "--tmax",
            "3",
            "--min-words",  # the fake's one-word demonstrations served: every label shown
            "1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert {d["label"] for d in data["demonstrations"]} == set(DBPEDIA)
    prompt = data["prompt"]
    assert prompt.startswith("Classify each text by its label: Company, EducationalInstitution,")
    assert "\nLabel: MeanOfTransportation\n" in prompt  # as given, not lowercased
    assert "meanoftransportation" not in prompt
    # The settings are printed, naming what was left at its default.
    assert "adadpsyn: 14 shots, M 4, N 2, tmax 3, K 100 (N, K: defaults for custom tasks" in (
        result.stderr
    )
    # Off a terminal, progress is plain lines, not silence.
    assert "\nsynthesising: " in result.stderr and " tokens (100%), 0:00:" in result.stderr
    assert "secretabstract" not in result.stdout + result.stderr + prompt


def test_labels_answer_words_and_instruction_options(dbpedia, tmp_path):
    out = tmp_path / "result.json"
    result = runner.invoke(
        app,
        [
            "synthesize",
            "--data",
            str(dbpedia),
            "--task",
            "custom",
            "--labels",
            ",".join(DBPEDIA),
            "--label-map",
            LABEL_MAP,
            "--answer-words",
            "MeanOfTransportation=vehicle,OfficeHolder=politician",
            "--instruction",
            "Given a category, write a Wikipedia abstract.",
            "--label-field",
            "Category",
            "--text-col",
            "3",
            "--label-col",
            "1",
            "--shots",
            "14",
            "--M",
            "4",
            "--N",
            "1",
            "--tmax",
            "3",
            "--K",
            "10",
            "--min-words",  # the fake's one-word demonstrations served: every label shown
            "1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    prompt = json.loads(out.read_text())["prompt"]
    assert "by its category: Company, EducationalInstitution, Artist, Athlete, politician," in (
        prompt
    )
    assert "\nCategory: vehicle\n" in prompt and "\nCategory: Company\n" in prompt
    assert "adadpsyn: 14 shots, M 4, N 1, tmax 3, K 10\n" in result.stderr  # nothing defaulted


def test_the_default_settings_of_a_custom_task_are_printed(tickets):
    result = runner.invoke(
        app, ["synthesize", "--data", str(tickets), *CUSTOM, "--label-col", "category"]
    )
    assert result.exit_code == 0, result.output
    assert (
        "adadpsyn: 4 shots, M 10, N 2, tmax 30, K 100 "
        "(M, N, tmax, K: defaults for custom tasks; see docs/synthesis.md)"
    ) in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epsilon", "abc"], "--epsilon must be a number > 0 (or inf), got 'abc'"),
        (["--task", "trec", "--labels", "a,b"], "--labels: only for a custom task"),
        (["--task", "sst2", "--answer-words", "a=b"], "--answer-words: only for a custom task"),
        (["--answer-words", "Plant=p"], "answer word for 'Plant', which is not one of the labels"),
        (["--label-map", "1=Company,2"], "--label-map: expected KEY=VALUE items"),
        (["--label-map", "1=Company,2=Plant"], "label map: 'Plant' is not a label"),
        (["--text-col", "3", "--label-col", "label"], "give both the text and the label column"),
        (["--label-col", "1", "--text-col", "9"], "column 9 was asked for"),
        (["--label-col", "1", "--text-col", "3"], "--label-map 1=NAME,2=NAME"),
    ],
)
def test_custom_task_mistakes_are_one_line_errors(dbpedia, args, message):
    base = ["synthesize", "--data", str(dbpedia), "--labels", "Company,Artist"]
    if "--text-col" not in args:
        base += ["--text-col", "3", "--label-col", "1"]
    result = runner.invoke(app, [*base, *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "secretabstract" not in result.stderr


def test_without_task_or_labels_the_error_says_what_to_give(dbpedia):
    result = runner.invoke(app, ["synthesize", "--data", str(dbpedia)])
    assert result.exit_code == 2
    assert "--task is required" in result.stderr and "--labels a,b,..." in result.stderr


# Every field `dpsyn synthesize --out` writes, as (path, kind). "public": a function of the
# job's public inputs (the shape, the budget, the seed); "dp": a DP output or a function of
# DP outputs only (the generated tokens decide the prompt and when the loop stops).
WRITTEN = {
    "task": "public",
    "method": "public",
    "model": "public",
    "demonstrations": "dp",
    "prompt": "dp",
    "epsilon": "public",
    "delta": "public",
    "plan": "public",
    "event": "public",
    "stats.backend_calls": "dp",
    "stats.empty_demonstrations": "dp",
    "stats.short_demonstrations": "dp",
    "stats.echo_demonstrations": "dp",
    # the run's own count release: its noise multiplier and cost (public functions of the
    # target), never its noisy counts
    "stats.count_release_sigma": "public",
    "stats.count_release_epsilon": "public",
    "stats.count_release_delta": "public",
    **{
        f"stats.planner_{name}": "public"
        for name in (
            "T",
            "checks",
            "check_share",
            "mu",
            "shrink",
            "margin",
            "clip",
            "tang_sigma",
            "agreement",
            "tang_agreement",
        )
    },
}


def _fields(data: dict) -> dict[str, object]:
    """Top-level fields, and the stats one level down."""
    out = {k: v for k, v in data.items() if k != "stats"}
    out.update({f"stats.{k}": v for k, v in data["stats"].items()})
    return out


def _write_tickets(path, words: int) -> None:
    """60 tickets, the same labels as ``tickets``, each ``words`` words long."""
    rows = ["text,category"] + [
        f"{' '.join(['secretword'] * words)},{'billing' if i % 2 else 'network'}" for i in range(60)
    ]
    path.write_text("\n".join(rows) + "\n")


def test_every_written_field_is_public_or_dp(tmp_path):
    """Two datasets with the same public shape but private records of very different
    lengths: every public field written is the same, and nothing else is written. (The
    prompt-token count of the teacher prompts, once written here, differed.)"""
    written = []
    for words in (1, 30):
        data_path, out = tmp_path / f"t{words}.csv", tmp_path / f"r{words}.json"
        _write_tickets(data_path, words)
        args = ["synthesize", "--data", str(data_path), *CUSTOM, "--label-col", "category"]
        args += ["--epsilon", "4", "--M", "4", "--N", "2", "--tmax", "4", "--shots", "2"]
        result = runner.invoke(app, [*args, "--K", "10", "--seed", "3", "--out", str(out)])
        assert result.exit_code == 0, result.output
        written.append(_fields(json.loads(out.read_text())))
    short, long = written
    assert set(short) == set(long) <= set(WRITTEN), set(short) - set(WRITTEN)
    assert {"stats.planner_T", "stats.backend_calls", "plan", "event"} <= set(short)
    for name, kind in WRITTEN.items():
        if kind == "public" and name in short:
            assert short[name] == long[name], name
