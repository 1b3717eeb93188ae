"""The ``dpsyn`` command line. Sub-commands live in sibling modules and register here."""

from __future__ import annotations

import typer

from app.cli.privacy import privacy_app
from app.cli.synthesize import synthesize_command

app = typer.Typer(
    name="dpsyn",
    help="Differentially private prompt synthesis for in-context learning.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(privacy_app, name="privacy")
app.command("synthesize")(synthesize_command)


def main() -> None:
    """Console-script entry point."""
    app()
