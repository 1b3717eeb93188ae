"""Readers of the private labelled data, and their validation against a task.

Records are private. Nothing here ever puts record text (or an extraction value) into an
error message or a repr: messages name the file, the line or record number, column names and
counts only, so they can be logged and shown to anyone.

Every text is put on one line (whitespace runs become one space) because prompts are
line-based: a newline inside a text would end the demonstration early.
"""

from __future__ import annotations

import csv
import difflib
import html
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.synthesis.tasks import TaskKind, TaskSpec


class DataError(ValueError):
    """The data could not be read or does not fit the task; one line, never record text."""


@dataclass(frozen=True, slots=True)
class Record:
    """One private example: its text and its label (public label name or slot value)."""

    text: str
    label: str

    def __repr__(self) -> str:
        # Records end up in tracebacks and logs; show sizes, never content.
        return f"Record(text=<{len(self.text)} chars>, label=<{len(self.label)} chars>)"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _read_lines(path: Path) -> list[str]:
    """The file's lines; a missing, unreadable or empty file is a :class:`DataError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: data file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, not a data file") from None
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text (byte offset {err.start})") from None
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or type(err).__name__})") from None
    if not text.strip():
        raise DataError(f"{path}: file is empty")
    # Split on "\n" only (str.splitlines also splits on form feeds and other separators
    # that occur inside texts), keeping the ends that csv needs for quoted multi-line fields.
    return io.StringIO(text, newline="\n").readlines()


def _numbered(lines: list[str]) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) of the non-blank lines."""
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield number, line


def read_trec(path: str | Path) -> list[Record]:
    """TREC ``COARSE:fine question`` lines; the label is the coarse code (``LOC``, ...)."""
    path = Path(path)
    records = []
    for number, line in _numbered(_read_lines(path)):
        tag, _, question = line.partition(" ")
        coarse, colon, _fine = tag.partition(":")
        if not colon or not coarse or not question.strip():
            raise DataError(f"{path}: line {number} is not 'COARSE:fine question'")
        records.append(Record(_one_line(question), coarse))
    return records


def read_trec_fine(path: str | Path, keep: Iterable[str]) -> list[Record]:
    """TREC ``COARSE:fine question`` lines whose ``COARSE:fine`` code is in ``keep``, the
    label being that code; the other lines are skipped (a task over some fine classes)."""
    codes = set(keep)
    records = []
    for number, line in _numbered(_read_lines(Path(path))):
        tag, _, question = line.partition(" ")
        if ":" not in tag or not question.strip():
            raise DataError(f"{path}: line {number} is not 'COARSE:fine question'")
        if tag in codes:
            records.append(Record(_one_line(question), tag))
    return records


def read_sst2(path: str | Path) -> list[Record]:
    """SST-2 ``label sentence`` lines; the label is the raw ``0``/``1``."""
    path = Path(path)
    records = []
    for number, line in _numbered(_read_lines(path)):
        label, _, sentence = line.strip().partition(" ")
        if not label.isdigit() or not sentence.strip():
            raise DataError(f"{path}: line {number} is not 'label sentence'")
        records.append(Record(_one_line(sentence), label))
    return records


# AG News escapes some characters as HTML entities without the '&' ("#39;", "quot;"), marks
# line breaks with a backslash and keeps a few formatting tags ("<strong>Opinion</strong>").
# csv refuses fields over 128 KB by default, which a reader can only report as "not valid
# CSV". A field is bounded by the file's size instead (uploads have a size limit); the service
# caps one record's length itself, with a message that names the limit.
csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))

_BARE_ENTITY = re.compile(r"(?<!&)(#\d+;|quot;|amp;|lt;|gt;)")
_FORMAT_TAG = re.compile(r"</?(?:a|b|br|em|font|i|p|span|strong|u)\b[^>]*>", re.IGNORECASE)


def _clean_agnews(text: str) -> str:
    text = html.unescape(_BARE_ENTITY.sub(r"&\1", text))
    return _one_line(_FORMAT_TAG.sub(" ", text.replace("\\", " ")))


def read_agnews(path: str | Path) -> list[Record]:
    """AG News CSV without header: ``label`` (1..4), ``title``, ``description``.

    The text is the title, then a space, then the description: the title alone is often the
    most telling sentence and the description alone sometimes starts mid-thought, so the
    article the model sees is both, as a reader would. Entities and backslash line breaks
    are cleaned up.
    """
    path = Path(path)
    lines = _read_lines(path)
    records = []
    reader = csv.reader(lines)
    try:
        for row in reader:
            if not row or not any(cell.strip() for cell in row):
                continue
            if len(row) != 3:
                raise DataError(
                    f"{path}: line {reader.line_num} has {len(row)} fields, "
                    "expected 3 (label, title, description)"
                )
            label, title, description = row
            records.append(Record(_clean_agnews(f"{title} {description}"), label.strip()))
    except csv.Error:
        raise DataError(f"{path}: line {reader.line_num} is not valid CSV") from None
    return records


def read_mit(path: str | Path, slot: str) -> list[Record]:
    """MIT Movies BIO lines (``word:TAG ... <=> <NULL>``); sentences without ``slot`` skipped.

    ``slot`` is a tag name such as ``Genre`` or ``Director`` (case-insensitive). The label
    is the words of the first span of that tag (a ``B-`` token and the ``I-`` tokens after
    it; an ``I-`` without a ``B-`` also starts a span), the text all words of the sentence.
    """
    path = Path(path)
    wanted = slot.casefold()
    records = []
    for number, line in _numbered(_read_lines(path)):
        body = line.split(" <=> ", 1)[0]
        words: list[str] = []
        span: list[str] = []
        done = False
        for token in body.split():
            word, colon, tag = token.rpartition(":")
            if not colon or not word or not (tag == "O" or tag[:2] in ("B-", "I-")):
                raise DataError(f"{path}: line {number} has a token that is not 'word:TAG'")
            words.append(word)
            if done:
                continue
            prefix, name = tag[:2], tag[2:].casefold()
            if name == wanted and ((prefix == "B-" and not span) or prefix == "I-"):
                span.append(word)
            elif span:
                done = True
        if not words:
            raise DataError(f"{path}: line {number} has no words")
        if span:
            records.append(Record(" ".join(words), " ".join(span)))
    return records


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a JSON label 1.0 means "1"
    return _one_line(str(value))


def _missing(available: Iterable[str], *wanted: str) -> str | None:
    """The first wanted column that is not available, else None.

    Messages about it count the names found but never show them: the first row of a CSV
    file without a header row is a record, and a JSON line's keys may be private too.
    """
    names = set(available)
    return next((column for column in wanted if column not in names), None)


# The key under which ``csv.DictReader`` puts a row's fields past the header's (never a
# column name: a header cell cannot hold a NUL).
_EXTRA = "\0extra"
_WIDE_ROWS_SHOWN = 5


def dict_reader(path: Path, lines: list[str]) -> csv.DictReader[str]:
    """A reader of a table with a header row, separated as its extension says."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    return csv.DictReader(lines, delimiter=delimiter, restkey=_EXTRA)


def table_rows(path: Path, reader: csv.DictReader[str]) -> list[tuple[int, dict[str, str]]]:
    """The rows of ``reader`` (:func:`dict_reader`) with the line each ends on, refusing
    rows with more fields than the header row has columns, by their line numbers (the first
    few) and field counts.

    ``csv.DictReader`` files such fields away and reads the row's first cells as if nothing
    were wrong: a text with an unquoted comma loses its tail, or puts a piece of its text in
    the label column. Extra fields that are all blank (a trailing separator) change no cell
    and are let through. The caller catches :class:`csv.Error`."""
    rows, wide = [], []
    for row in reader:
        extra = row.pop(_EXTRA, None) or []
        if any(str(cell).strip() for cell in extra):
            wide.append((reader.line_num, len(reader.fieldnames or ()) + len(extra)))
        rows.append((reader.line_num, row))
    if wide:
        first = wide[:_WIDE_ROWS_SHOWN]
        shown = ", ".join(f"line {line} ({fields} fields)" for line, fields in first)
        if len(wide) > _WIDE_ROWS_SHOWN:
            shown += f", and {len(wide) - _WIDE_ROWS_SHOWN} more"
        rows_word = "1 row has" if len(wide) == 1 else f"{len(wide)} rows have"
        separator = "a tab" if reader.reader.dialect.delimiter == "\t" else "a comma"
        raise DataError(
            f"{path}: {rows_word} more fields than the header row's "
            f"{len(reader.fieldnames or ())} columns ({shown}): a text with {separator} in "
            'it needs quotes ("..."), or the extra fields removed; nothing was read'
        )
    return rows


def _read_csv(path: Path, lines: list[str], text_col: str, label_col: str) -> list[Record]:
    reader = dict_reader(path, lines)
    try:
        header = reader.fieldnames or []
        if (column := _missing(header, text_col, label_col)) is not None:
            raise DataError(
                f"{path}: no column {column!r} in the header row (line 1, {len(header)} "
                "columns): name the text and label columns with --text-col and --label-col "
                "(the API's text_column and label_column), or give the file a header row "
                f"naming them{_separator_hint(path, header)}"
            )
        rows = table_rows(path, reader)
        return [Record(_cell(row[text_col]), _cell(row[label_col])) for _, row in rows]
    except csv.Error:
        raise DataError(f"{path}: line {reader.line_num} is not valid CSV") from None


def _separator_hint(path: Path, header: Sequence[str]) -> str:
    """Why a header may read as one column (a ';'-separated file read as "1
    columns" with no reason given). Said whatever the row holds, so the message tells
    nothing of a first row that may be a record."""
    if len(header) > 1:
        return ""
    separator = "a tab (.tsv)" if path.suffix.lower() == ".tsv" else "',' (.csv)"
    return (
        f"; a header read as one column usually means another separator: this file is read "
        f"as separated by {separator}, so a file separated by ';' or '|' needs saving with "
        "commas first"
    )


def _json_rows(path: Path, lines: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank JSONL line; a line that is not a JSON object
    is a :class:`DataError` naming the line, never its text (private and public readers)."""
    for number, line in _numbered(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise DataError(f"{path}: line {number} is not valid JSON") from None
        except RecursionError:
            raise DataError(f"{path}: line {number} is JSON nested too deeply") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}: line {number} is not a JSON object")
        yield number, row


def _read_jsonl(path: Path, lines: list[str], text_col: str, label_col: str) -> list[Record]:
    records = []
    for number, row in _json_rows(path, lines):
        if (column := _missing(row, text_col, label_col)) is not None:
            raise DataError(
                f"{path}: line {number} has no field {column!r} (it has {len(row)} fields)"
            )
        text = _json_value(path, number, row, text_col, label=False)
        records.append(Record(text, _json_value(path, number, row, label_col, label=True)))
    return records


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "an object" if isinstance(value, dict) else "an array"


def _json_value(path: Path, number: int, row: dict[str, Any], field: str, *, label: bool) -> str:
    """A JSON line's text (a string) or label (a string, a number: a label id, or null: no
    slot value), refused otherwise as the JSON upload refuses a text that is not a string,
    by line, field and JSON type: an object's ``str`` would be stored as if it were text."""
    value = row[field]
    if isinstance(value, str):
        return _cell(value)
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if label and (value is None or numeric):
        return _cell(value)
    wanted = "a string or a number" if label else "a string"
    raise DataError(f"{path}: line {number}: field {field!r} is {_json_type(value)}, not {wanted}")


# A column of a table: its header name, or 1-based column numbers of a CSV/TSV without a
# header (several numbers: their cells joined by a space, e.g. a title and a body).
Column = str | tuple[int, ...]


def _read_headerless(
    path: Path, lines: list[str], text_cols: tuple[int, ...], label_cols: tuple[int, ...]
) -> list[Record]:
    if min(text_cols + label_cols) < 1:
        raise DataError(f"{path}: column numbers start at 1")
    reader = csv.reader(lines, delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
    wanted = max(text_cols + label_cols)
    records = []
    try:
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            if len(row) < wanted:
                raise DataError(
                    f"{path}: line {reader.line_num} has {len(row)} fields, "
                    f"column {wanted} was asked for"
                )
            text = " ".join(row[i - 1] for i in text_cols)
            label = " ".join(row[i - 1] for i in label_cols)
            records.append(Record(_cell(text), _cell(label)))
    except csv.Error:
        raise DataError(f"{path}: line {reader.line_num} is not valid CSV") from None
    return records


def _column_name(column: Column) -> str:
    """How a message names a column: its header name, or its numbers (``column 2+3``)."""
    if isinstance(column, str):
        return repr(column)
    return "column " + "+".join(str(number) for number in column)


def _shared_column(text_col: Column, label_col: Column) -> str | None:
    """The column that is both the text and the label column (its name), else None."""
    if isinstance(text_col, str) or isinstance(label_col, str):
        return repr(text_col) if text_col == label_col else None
    shared = sorted(set(text_col) & set(label_col))
    return _column_name(tuple(shared)) if shared else None


def read_table(
    path: str | Path, text_col: Column = "text", label_col: Column = "label"
) -> list[Record]:
    """A user's table: CSV/TSV with a header row (or, given column numbers, without one), or
    JSON lines; chosen by extension."""
    path = Path(path)
    suffix = path.suffix.lower()
    numbered = isinstance(text_col, tuple), isinstance(label_col, tuple)
    if any(numbered) and suffix not in (".csv", ".tsv"):
        raise DataError(f"{path}: column numbers are for CSV/TSV files without a header")
    if any(numbered) and not all(numbered):
        raise DataError(
            f"{path}: give both the text and the label column as numbers "
            "(a file without a header has no column names)"
        )
    if shared := _shared_column(text_col, label_col):
        raise DataError(
            f"{path}: the text column and the label column are both {shared}: every record's "
            "text would be its label; name the text column with --text-col and the label "
            "column with --label-col (the API's text_column and label_column)"
        )
    if isinstance(text_col, tuple) and isinstance(label_col, tuple):
        return _read_headerless(path, _read_lines(path), text_col, label_col)
    assert isinstance(text_col, str) and isinstance(label_col, str)
    if suffix in (".csv", ".tsv"):
        return _read_csv(path, _read_lines(path), text_col, label_col)
    if suffix in (".jsonl", ".ndjson"):
        return _read_jsonl(path, _read_lines(path), text_col, label_col)
    raise DataError(f"{path}: unsupported data file type {suffix!r} (use .csv, .tsv or .jsonl)")


# Raw labels of the built-in datasets, mapped to the built-in tasks' public labels.
_RAW_LABELS: dict[str, dict[str, str]] = {
    "trec": {
        "ABBR": "Abbreviation",
        "ENTY": "Entity",
        "DESC": "Description",
        "HUM": "Person",
        "LOC": "Location",
        "NUM": "Number",
    },
    # 14 of TREC's 50 fine classes, those with 100 or more training questions but the
    # catch-alls ("other entity", "other number"): a many-label public task.
    "trec14": {
        "HUM:ind": "person",
        "HUM:gr": "organization",
        "LOC:country": "country",
        "LOC:city": "city",
        "LOC:other": "place",
        "DESC:def": "definition",
        "DESC:desc": "description",
        "DESC:manner": "manner",
        "DESC:reason": "reason",
        "NUM:count": "count",
        "NUM:date": "date",
        "ENTY:cremat": "creative work",
        "ENTY:animal": "animal",
        "ENTY:food": "food",
    },
    "sst2": {"0": "negative", "1": "positive"},
    "agnews": {"1": "World", "2": "Sports", "3": "Business", "4": "Technology"},
}

_READERS: dict[str, Callable[[Path, TaskSpec], list[Record]]] = {
    "trec": lambda path, task: read_trec(path),
    "trec14": lambda path, task: read_trec_fine(path, _RAW_LABELS["trec14"]),
    "sst2": lambda path, task: read_sst2(path),
    "agnews": lambda path, task: read_agnews(path),
    "mitg": lambda path, task: read_mit(path, task.slot or "genre"),
    "mitd": lambda path, task: read_mit(path, task.slot or "director"),
}

# File name endings of the tables :func:`read_table` reads (anything else is no table).
TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".ndjson")


def own_format_tasks() -> tuple[str, ...]:
    """The tasks whose benchmark files :func:`load_dataset` reads in their own format."""
    return tuple(sorted(_READERS))


def has_own_format(task: TaskSpec) -> bool:
    """Whether ``task`` (by name) has a reader of its benchmark's own file format."""
    return task.name in _READERS


def _header_names(path: Path, text_col: str, label_col: str) -> bool:
    """Whether the CSV's first row names both columns (a header), read without keeping it."""
    try:
        with path.open(encoding="utf-8", errors="replace", newline="") as handle:
            first = next(csv.reader(handle), [])
    except (OSError, csv.Error):
        return False  # the reader that runs next reports the problem, by line
    cells = {cell.strip() for cell in first}
    return text_col in cells and label_col in cells


def own_format(
    task: TaskSpec, path: str | Path, text_col: str = "text", label_col: str = "label"
) -> bool:
    """Whether the file at ``path`` is read in ``task``'s own format rather than as a table
    with the columns ``text_col`` and ``label_col``.

    A built-in task's file that is no table by its name (TREC's ``train.txt``, SST-2's
    ``stsa.binary.train``, MIT's ``train``) is in the task's own format. AG News's own format
    is a CSV without a header, so a ``.csv`` for it is a table only when its first row names
    both columns: an upload cannot say "no columns given" the way the command line can.
    """
    if not has_own_format(task):
        return False
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        return True
    return (
        task.name == "agnews" and suffix == ".csv" and not _header_names(path, text_col, label_col)
    )


def _label_mapper(task: TaskSpec) -> Callable[[str], str | None]:
    """Raw label -> public label: exact, a built-in raw code, or a case-insensitive match
    of a label or its verbaliser. None when nothing matches."""
    lookup = {label.casefold(): label for label in task.labels}
    lookup.update({word.casefold(): label for label, word in task.verbalisers.items()})
    raw_codes = _RAW_LABELS.get(task.name, {})
    codes = {raw: name for raw, name in raw_codes.items() if name in task.labels}

    def mapped(raw: str) -> str | None:
        if raw in task.labels:
            return raw
        if raw in codes:
            return codes[raw]
        return lookup.get(raw.casefold())

    return mapped


def _check_labels(path: Path, task: TaskSpec, records: list[Record]) -> list[Record]:
    mapped = _label_mapper(task)
    result, first = [], 0
    unknown: dict[str, int] = {}  # raw value -> records, in order of first appearance
    for number, record in enumerate(records, start=1):
        label = mapped(record.label)
        if label is None:
            unknown[record.label] = unknown.get(record.label, 0) + 1
            first = first or number
        else:
            result.append(Record(record.text, label))
    if unknown:
        count = sum(unknown.values())
        raise DataError(
            f"{path}: {count} of {len(records)} records (first: record {first}) have "
            f"{len(unknown)} distinct label value(s) that are not labels of task "
            f"{task.name!r} ({', '.join(task.labels)})"
            + _unknown_labels_shown(unknown, task)
            + (
                "; numeric label ids need a map to label names, e.g. --label-map 1=NAME,2=NAME"
                if all(value.isdigit() for value in unknown)
                else ""
            )
        )
    return result


#: A bad label value is shown only when it is empty or a near miss of one of the task's
#: (public) label names, and at most this long: then it is that label, misspelt. Any other
#: value is counted, not shown: far from every label, it may be a record's text read from
#: the wrong column, and no record's text is echoed in an error.
SHOWN_LABEL_MAX_CHARS = 40
NEAR_MISS = 0.75  # difflib's similarity ratio, casefolded


def _unknown_labels_shown(unknown: Mapping[str, int], task: TaskSpec) -> str:
    """': 'Biling' (2 records; did you mean 'Billing'?), (empty) (1 record); 1 other value
    not shown ...', or '' when no value can be shown."""
    names = {label.casefold(): label for label in task.labels}
    shown, hidden = [], 0
    for value, records in sorted(unknown.items(), key=lambda item: -item[1]):
        times = f"{records} record{'s' if records != 1 else ''}"
        if not value.strip():
            shown.append(f"(empty) ({times})")
            continue
        close = difflib.get_close_matches(value.strip().casefold(), names, n=1, cutoff=NEAR_MISS)
        if close and len(value) <= SHOWN_LABEL_MAX_CHARS:
            shown.append(f"{value!r} ({times}; did you mean {names[close[0]]!r}?)")
        else:
            hidden += 1
    if not shown:
        return ""
    rest = (
        f"; {hidden} other value(s) not shown (far from every label: a text column read as labels?)"
        if hidden
        else ""
    )
    return ": " + ", ".join(shown[:8]) + rest


def _check_label_lengths(path: Path, records: list[Record], limit: int) -> None:
    """Refuse the first label longer than ``limit`` characters, by its record number and
    length (never its text): a store with a sized label column cannot hold it."""
    for number, record in enumerate(records, start=1):
        if len(record.label) > limit:
            raise DataError(
                f"{path}: record {number}: the label has {len(record.label)} characters, "
                f"more than the {limit} the database can store"
            )


def _check_texts_are_not_labels(
    path: Path, records: Sequence[Record], text_col: Column, label_col: Column
) -> None:
    """Refuse a table whose every record's text is its label: the label column copied
    under another name (40 records whose text is their label teach nothing but the label).
    Compared before any ``--label-map``, as the file holds them; case and spaces aside."""
    if records and all(r.text.strip().casefold() == r.label.strip().casefold() for r in records):
        raise DataError(
            f"{path}: all {len(records)} records have their label as their text: the text "
            f"column {_column_name(text_col)} holds the same values as the label column "
            f"{_column_name(label_col)}; name the column of the texts with --text-col (the "
            "API's text_column)"
        )


def load_dataset(
    task: TaskSpec,
    path: str | Path,
    text_col: Column | None = None,
    label_col: Column | None = None,
    label_map: Mapping[str, str] | None = None,
    max_label_chars: int | None = None,
) -> list[Record]:
    """The task's validated private records from ``path``.

    Built-in tasks (``trec``, ``sst2``, ``agnews``, ``mitg``, ``mitd``) read their dataset's
    own format unless columns are given; any other task, or one given ``text_col`` or
    ``label_col``, reads a table (:func:`read_table`, columns default to ``text``/``label``).
    Classification labels become the task's public label names; extraction records without
    a slot value are skipped. Every text must be non-empty. ``label_map`` turns raw label
    values (e.g. ids ``1``..``14``) into label names first; unmapped values stay as they are.
    ``max_label_chars`` (the service's label column) refuses a longer label.
    """
    path = Path(path)
    if task.name in _READERS and text_col is None and label_col is None:
        records = _READERS[task.name](path, task)
    else:
        text_col, label_col = text_col or "text", label_col or "label"
        records = read_table(path, text_col, label_col)
        _check_texts_are_not_labels(path, records, text_col, label_col)
    if label_map:
        if task.kind == TaskKind.CLASSIFICATION and (
            unknown := [name for name in label_map.values() if name not in task.labels]
        ):
            raise DataError(
                f"label map: {unknown[0]!r} is not a label of task {task.name!r} "
                f"({', '.join(task.labels)})"
            )
        records = [Record(r.text, label_map.get(r.label, r.label)) for r in records]
    if task.kind == TaskKind.CLASSIFICATION:
        records = _check_labels(path, task, records)
    if max_label_chars is not None:  # before extraction skips records: numbers stay the file's
        _check_label_lengths(path, records, max_label_chars)
    if task.kind != TaskKind.CLASSIFICATION:
        records = [record for record in records if record.label]
    if not records:
        what = "records" if task.kind == TaskKind.CLASSIFICATION else f"records with a {task.slot}"
        raise DataError(f"{path}: no {what} for task {task.name!r}")
    if empty := sum(1 for record in records if not record.text):
        first = next(i for i, record in enumerate(records, start=1) if not record.text)
        raise DataError(f"{path}: {empty} records have an empty text (first: record {first})")
    return records


def partition(records: Iterable[Record]) -> dict[str, list[Record]]:
    """Records grouped by label, labels in order of first appearance.

    Synthesis samples teacher subsets from the records of one label at a time.
    """
    groups: dict[str, list[Record]] = {}
    for record in records:
        groups.setdefault(record.label, []).append(record)
    return groups
