"""Readers of the public unlabelled inputs the teachers label.

Public inputs are not private, but they are still user files, so errors follow the private
readers' rule (``app.synthesis.data``): one line naming the file, the line and the problem,
never the text. A label column in the file (IMDB's ``label``) is ignored: PromptPATE labels
the inputs with the teachers, and a public label would not be a DP one anyway.
"""

from __future__ import annotations

import csv
import html
from pathlib import Path

from app.synthesis.data import (
    DataError,
    _json_rows,
    _one_line,
    _read_lines,
    dict_reader,
    table_rows,
)
from app.synthesis.markup import HTML_TAG

TABLE_SUFFIXES = (".csv", ".tsv")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
TEXT_SUFFIXES = (".txt", ".text", "")


def _jsonl(path: Path, lines: list[str], field: str) -> list[str]:
    texts = []
    for number, row in _json_rows(path, lines):
        if field not in row:
            raise DataError(f"{path}: line {number} has no field {field!r}")
        value = row[field]
        if not isinstance(value, str):
            kind = "null" if value is None else type(value).__name__
            raise DataError(f"{path}: line {number}: field {field!r} is {kind}, not a string")
        if not value.strip():
            raise DataError(f"{path}: line {number}: field {field!r} is empty")
        texts.append(_one_line(value))
    return texts


def _table(path: Path, lines: list[str], field: str) -> list[str]:
    reader = dict_reader(path, lines)
    texts = []
    try:
        header = reader.fieldnames or []
        if field not in header:  # the names are not shown: without a header, a text
            raise DataError(
                f"{path}: no column {field!r} in the header row (line 1, {len(header)} "
                "columns): name the text column with --text-col (the API's text_column), or "
                "give the file a header row naming it"
            )
        for line, row in table_rows(path, reader):
            value = row.get(field)
            if value is None or not value.strip():
                raise DataError(f"{path}: line {line}: column {field!r} is empty")
            texts.append(_one_line(value))
    except csv.Error:
        raise DataError(f"{path}: line {reader.line_num} is not valid CSV") from None
    return texts


def read_public(path: str | Path, field: str = "text") -> list[str]:
    """Public inputs from ``path``, each on one line, in file order.

    By extension: JSON lines (``.jsonl``/``.ndjson``: the string field ``field`` of each
    object), CSV/TSV with a header (the column ``field``), or plain text (``.txt`` or no
    extension: one input per non-blank line). Any problem is a :class:`DataError`.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (*JSONL_SUFFIXES, *TABLE_SUFFIXES, *TEXT_SUFFIXES):
        raise DataError(
            f"{path}: unsupported public data file type {suffix!r} (use .jsonl, .csv, .tsv or .txt)"
        )
    lines = _read_lines(path)
    if suffix in JSONL_SUFFIXES:
        texts = _jsonl(path, lines, field)
    elif suffix in TABLE_SUFFIXES:
        texts = _table(path, lines, field)
    else:
        texts = [_one_line(line) for line in lines if line.strip()]
    if not texts:
        raise DataError(f"{path}: no public inputs")
    return texts


# HTML markup in scraped public texts (IMDB reviews carry "<br /><br />" between paragraphs):
# the one rule of known HTML elements that generated demonstrations are cleaned with too
# (app.synthesis.markup), so "x <y and z> w" in ordinary prose is left as it is.
_HTML_TAG = HTML_TAG


def clean_public_text(text: str) -> str:
    """``text`` without HTML markup, on one line: tags become a space, entities their
    characters (``&amp;`` -> ``&``), whitespace runs one space.

    PromptPATE puts public texts into teacher queries and, with their noisy labels, into the
    student prompt as demonstrations; markup there is noise to the model and looks broken to
    a reader. Tags are removed before entities are unescaped, so an escaped ``&lt;br&gt;`` is
    kept as the text it shows. A text that is markup only is returned as it was (one line):
    an input is never empty.
    """
    cleaned = _one_line(html.unescape(_HTML_TAG.sub(" ", text)))
    return cleaned or _one_line(text)


def cut(text: str, max_chars: int) -> str:
    """``text`` on one line, cut at a word boundary to at most ``max_chars`` characters.

    A first word longer than ``max_chars`` is cut inside the word (an input is never empty).
    """
    text = _one_line(text)
    if len(text) <= max_chars:
        return text
    head = text[: max_chars + 1]
    space = head.rfind(" ")
    return head[:space] if space > 0 else text[:max_chars]
