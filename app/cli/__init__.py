"""The ``dpsyn`` command line. Sub-commands live in sibling modules and register here."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
import typer.main

from app.cli.admin import admin_app
from app.cli.admin_ledger import ledger_app
from app.cli.admin_records import records_app
from app.cli.advise import advise_command
from app.cli.audit import audit_command
from app.cli.client import budget_app, datasets_app, jobs_app, prompts_app
from app.cli.config import config_app
from app.cli.eval import eval_command
from app.cli.examples import add_examples
from app.cli.help_format import show_flags_without_a_type
from app.cli.keys import keys_app
from app.cli.privacy import privacy_app
from app.cli.privacy_quote import quote_command
from app.cli.serve import (
    migrate_command,
    serve_command,
    worker_command,
    worker_health_command,
)
from app.cli.synthesize import synthesize_command
from app.log_redaction import install_log_redaction
from app.methods.registry import import_method_modules
from app.settings import Settings

show_flags_without_a_type()
app = typer.Typer(
    name="dpsyn",
    help="Differentially private prompt synthesis for in-context learning.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
privacy_app.command("quote")(quote_command)
app.add_typer(privacy_app, name="privacy")
app.command("synthesize")(synthesize_command)
app.command("serve")(serve_command)
app.command("worker")(worker_command)
app.command("worker-health")(worker_health_command)
app.command("migrate")(migrate_command)
app.add_typer(datasets_app, name="datasets")
app.add_typer(budget_app, name="budget")
app.add_typer(jobs_app, name="jobs")
app.add_typer(prompts_app, name="prompts")
app.add_typer(keys_app, name="keys")
app.command("eval")(eval_command)
app.command("audit")(audit_command)
app.command("advise")(advise_command)
admin_app.add_typer(ledger_app, name="ledger")
admin_app.add_typer(records_app, name="records")
app.add_typer(admin_app, name="admin")
app.add_typer(config_app, name="config")
add_examples(app)


# The commands that run, serve or price methods: each loads the plug-in methods
# (DPSYN_METHOD_MODULES) before typer builds its options. The thin client's commands do not
# (they know no method; the server they talk to does).
METHOD_COMMANDS = frozenset({"synthesize", "eval", "audit", "advise", "privacy", "serve", "worker"})


def load_method_plugins(argv: Sequence[str]) -> None:
    """Import the plug-in method modules if ``argv`` names a command of
    :data:`METHOD_COMMANDS`, before the commands' options are built from the registry (so
    ``--help`` and ``--method`` offer a plug-in's method and its parameters). A module that
    cannot load is one line naming it, and exit status 2."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    if command not in METHOD_COMMANDS:
        return
    try:
        import_method_modules(Settings().method_module_names())
    except ValueError as error:  # a plug-in, or another DPSYN_ setting, is wrong
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


#: Options that every client command takes, accepted before the command and between its words
#: too (``dpsyn --url URL jobs list``, ``dpsyn --json jobs list``): each is moved after the
#: command's words, where the command reads it as its own. The first take a value.
GLOBAL_OPTIONS = ("--url", "--key")
GLOBAL_FLAGS = ("--json", "--no-json")


class MisplacedOptionError(ValueError):
    """An option given before the command (or between its words) that the command does not
    take: said as such, rather than as click's "No such option", which read as if the
    option's place were wrong."""


def hoist_global_options(argv: Sequence[str]) -> list[str]:
    """``argv`` with each of :data:`GLOBAL_OPTIONS` and :data:`GLOBAL_FLAGS` given before or
    between the command's words (``dpsyn --url U jobs list``, ``dpsyn jobs --json list``)
    moved after them; anything else is left as it is. A moved option the command does not
    take (``dpsyn --json serve``) raises :class:`MisplacedOptionError` naming the command,
    never dropped: a script that asked for JSON must not get text silently. With ``--help``
    they are left out (help is all that runs); after an unknown command word they stay, for
    click to name the word."""
    command: Any = typer.main.get_command(app)  # a group: its sub-commands by name
    words: list[str] = []
    moved: list[str] = []
    rest = list(argv)
    known = True
    while rest and _is_group(command):
        token = rest.pop(0)
        name = token.split("=", 1)[0]
        if name in GLOBAL_OPTIONS or name in GLOBAL_FLAGS:
            moved.append(token)
            if name in GLOBAL_OPTIONS and "=" not in token and rest:
                moved.append(rest.pop(0))
            continue
        words.append(token)
        command, known = command.commands.get(token, command), token in command.commands
        if not known:
            break
    if moved and HELP in [*words, *rest]:
        return words + rest
    if known:
        _check_taken(command, words, moved)
    return words + rest + moved


#: The option that shows a command's help, whatever else is given.
HELP = "--help"


def _is_group(command: Any) -> bool:
    """Whether ``command`` is a group of commands (it takes a command word, not options)."""
    return bool(getattr(command, "commands", None))


def _check_taken(command: Any, words: list[str], moved: list[str]) -> None:
    """Raise :class:`MisplacedOptionError` for the first of ``moved`` that ``command`` (the
    command ``words`` name) has no option for; a group takes none (its commands do)."""
    params = [] if _is_group(command) else command.params
    takes = {opt for param in params for opt in (*param.opts, *param.secondary_opts)}
    names = [token.split("=", 1)[0] for token in moved if token.startswith("--")]
    missing = next((name for name in names if name not in takes), None)
    if missing is None:
        return
    path = " ".join(["dpsyn", *words])
    if _is_group(command):
        raise MisplacedOptionError(
            f"'{path}' needs a command after it, which takes {missing} ('{path} --help' lists them)"
        )
    raise MisplacedOptionError(
        f"'{path}' takes no {missing} option (an option before the command is the "
        f"command's own; '{path} --help' lists what it takes)"
    )


def main() -> None:
    """Console-script entry point. Every command's log redacts exceptions and leaves out the
    HTTP clients' request lines, which quote what a server answered (a vLLM server's reason
    phrase may hold a prompt): `dpsyn synthesize --backend vllm` as much as `dpsyn serve`.
    The plug-in methods load first (:func:`load_method_plugins`)."""
    install_log_redaction()
    try:
        argv = hoist_global_options(sys.argv[1:])
    except MisplacedOptionError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    load_method_plugins(argv)
    app(args=argv)
