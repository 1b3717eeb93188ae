"""Options of a custom task and of table columns, declared once for ``dpsyn synthesize``
and ``dpsyn datasets upload`` so their names and help never drift apart. (The method options
of ``dpsyn synthesize`` are made from the registry: :mod:`app.cli.method_options`.)"""

from __future__ import annotations

import typer

TEXT_COL = typer.Option(
    "--text-col",
    "--text-column",
    help="Text column: a header name, or a number (1 = first) for a CSV without a header "
    "(2+3 joins two columns, e.g. a title and a body).",
)
LABEL_COL = typer.Option(
    "--label-col",
    "--label-column",
    help="Label column: a header name, or a number for a CSV without a header.",
)
LABEL_MAP = typer.Option(
    "--label-map",
    help="Raw label values to label names, e.g. 1=Company,2=Artist; alone it also gives a "
    "custom task's labels, in this order.",
)
LABELS = typer.Option(
    "--labels", help="Custom task: its labels, a,b,... (the answer words, as written)."
)
ANSWER_WORDS = typer.Option(
    "--answer-words",
    help="Custom task: the word the model writes for a label, LABEL=WORD,... "
    "(default: the label as given).",
)
INSTRUCTION = typer.Option(
    "--instruction", help="Custom task: generation instruction (the first line of a prompt)."
)
ICL_INSTRUCTION = typer.Option(
    "--icl-instruction",
    help="Custom task: classification instruction (default: one that lists the labels).",
)
TEXT_FIELD = typer.Option("--text-field", help="Custom task: name of the text line (Text).")
LABEL_FIELD = typer.Option("--label-field", help="Custom task: name of the label line (Label).")
