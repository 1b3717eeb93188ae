"""``dpsyn datasets upload`` says what is wrong with a file (issue 55, item 2): the server's
refusals and warnings reach the terminal naming the column, label, rows or name; a file the
client reads itself (``--label-map``) is refused before anything is sent; and the validation
upload (``--public --labelled``) takes a custom task from ``--labels`` as the private upload
does, without ``--task custom``. Against a live server; no record text in any output."""

from __future__ import annotations

import json

from tests.cli.live_server import SECRET


def _tickets(tmp_path, name: str, labels: tuple[str, ...], n: int = 6) -> str:
    """A CSV of ``n`` tickets per label, texts of their own (carrying the secret word)."""
    path = tmp_path / name
    rows = [f"{SECRET} {name} ticket {label} {i},{label}" for label in labels for i in range(n)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    return str(path)


def test_a_validation_upload_infers_the_custom_task_from_labels(dpsyn, tmp_path):
    path = _tickets(tmp_path, "valid.csv", ("billing", "outage"))
    result = dpsyn(
        "datasets", "upload", path, "--public", "--labelled", "--labels", "billing,outage",
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    dataset = json.loads(result.output)
    assert dataset["kind"] == "public" and dataset["labelled"] is True
    assert dataset["task"]["labels"] == ["billing", "outage"]
    assert dataset["label_counts"] == {"billing": 6, "outage": 6}
    assert dataset["name"] == "valid"  # named after its file, as before
    assert SECRET not in result.output


def test_a_declared_label_without_records_is_printed_as_a_warning(dpsyn, tmp_path):
    path = _tickets(tmp_path, "train.csv", ("billing", "outage"))
    result = dpsyn("datasets", "upload", path, "--labels", "billing,outage,refund", "--json")
    assert result.exit_code == 0, result.output
    assert "warning: no records for label(s) 'refund'" in result.output
    assert SECRET not in result.output
    shown = dpsyn("datasets", "show", json.loads(result.stdout)["id"])
    assert "warning: no records for label(s) 'refund'" in shown.output


def test_a_name_in_use_is_refused_and_the_name_still_works(dpsyn, tmp_path):
    first = dpsyn(
        "datasets", "upload", _tickets(tmp_path, "a.csv", ("billing", "outage")),
        "--labels", "billing,outage", "--name", "tickets", "-q",
    )  # fmt: skip
    assert first.exit_code == 0, first.output
    second = dpsyn(
        "datasets", "upload", _tickets(tmp_path, "b.csv", ("billing", "outage")),
        "--labels", "billing,outage", "--name", "tickets",
    )  # fmt: skip
    assert second.exit_code != 0
    assert "'tickets' is already the name of dataset" in second.output
    assert first.output.strip() in second.output
    shown = dpsyn("datasets", "show", "tickets")
    assert shown.exit_code == 0 and first.output.strip() in shown.output


def test_public_uploads_of_one_file_name_are_numbered_not_refused(dpsyn, tmp_path):
    """Without --name a public upload is named after its file; the second of that name is
    numbered by the server (before: both were ``texts``, and the name reached neither)."""
    path = tmp_path / "texts.txt"
    path.write_text("one public text\nanother public text\n")
    names = []
    for _ in range(2):
        result = dpsyn("datasets", "upload", str(path), "--public", "--json")
        assert result.exit_code == 0, result.output
        names.append(json.loads(result.output)["name"])
    assert names == ["texts", "texts-2"]
    assert dpsyn("datasets", "show", "texts").exit_code == 0


def test_a_file_read_here_is_refused_before_sending(dpsyn, tmp_path):
    """With --label-map the client reads the file: its mistakes exit 2, naming lines and
    columns, and nothing reaches the server."""
    path = tmp_path / "ids.csv"
    rows = [f"{SECRET} ticket {i},{1 + i % 2}" for i in range(8)]
    rows[3] = f"{SECRET} a comma, unquoted,2"  # line 5
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    wide = dpsyn("datasets", "upload", str(path), "--label-map", "1=billing,2=outage")
    assert wide.exit_code == 2, wide.output
    assert "1 row has more fields than the header row's 2 columns (line 5 (3 fields))" in (
        wide.output
    )
    same = dpsyn(
        "datasets", "upload", str(path), "--label-map", "1=billing,2=outage",
        "--text-col", "label", "--label-col", "label",
    )  # fmt: skip
    assert same.exit_code == 2, same.output
    assert "the text column and the label column are both 'label'" in same.output
    assert SECRET not in wide.output + same.output
    listed = dpsyn("datasets", "list", "--json")
    assert json.loads(listed.output) == []
