"""An example for every ``dpsyn`` command and group, shown at the end of its ``--help``.

Help said what each option does but never showed a whole command line, and a command line
is what a user copies. The examples are the README's and the docs' commands, kept here in
one table (:data:`EXAMPLES`, by command path) and laid into each command's help as its
epilog by :func:`add_examples` when :mod:`app.cli` builds the command tree. Each example is
a real invocation: tests/cli/test_help_contract.py parses every one through the command it
names (its words, options, values and required options), so an example that goes stale
fails there. Upper-case words stand for what an earlier command printed (DATASET: a
dataset's ID or name, JOB, PROMPT, KEY_ID, PUBLIC, VALIDATION); ``# ...`` says what a line
does. No square brackets: help text is Rich markup.
"""

from __future__ import annotations

from typing import Any

import typer
import typer.main

_TICKETS = "--task custom --labels billing,network --text-col body --label-col queue"
_SHAPE = "--n-label 835 --n-total 5452"

#: Example lines by command path ("" is ``dpsyn`` itself), each ``dpsyn ...`` and an
#: optional ``  # what it does``.
EXAMPLES: dict[str, list[str]] = {
    "": [
        "dpsyn serve  # the API, a worker and the dashboard, on this machine",
        f"dpsyn datasets upload tickets.csv {_TICKETS} -q  # -> DATASET",
        "dpsyn budget set DATASET --epsilon 10",
        "dpsyn jobs submit --dataset DATASET --method adadpsyn --epsilon 8 --wait -q",
    ],
    "admin": [
        "dpsyn admin tenants create acme  # the tenant and its first admin key",
        "dpsyn admin keys create acme --scope prompts:read",
    ],
    "admin keys": ["dpsyn admin keys list acme"],
    "admin keys create": [
        "dpsyn admin keys create acme --scope prompts:read --name support-app",
        "dpsyn admin keys create acme --scope org:read --name finance",
    ],
    "admin keys list": ["dpsyn admin keys list acme", "dpsyn admin keys list acme --json"],
    "admin keys revoke": ["dpsyn admin keys revoke KEY_ID"],
    "admin ledger": ["dpsyn admin ledger verify", "dpsyn admin ledger holds"],
    "admin ledger acknowledge": ["dpsyn admin ledger acknowledge DATASET"],
    "admin ledger holds": ["dpsyn admin ledger holds --json"],
    "admin ledger verify": ["dpsyn admin ledger verify --json"],
    "admin records": ["dpsyn admin records rotate-kek", "dpsyn admin records expire --days 90"],
    "admin records expire": ["dpsyn admin records expire --days 90  # e.g. from cron"],
    "admin records rotate-kek": ["dpsyn admin records rotate-kek"],
    "admin tenants": ["dpsyn admin tenants create acme", "dpsyn admin tenants list"],
    "admin tenants create": ["dpsyn admin tenants create acme"],
    "admin tenants disable": ["dpsyn admin tenants disable acme  # every key answers 401"],
    "admin tenants enable": ["dpsyn admin tenants enable acme"],
    "admin tenants list": ["dpsyn admin tenants list", "dpsyn admin tenants list --json"],
    "advise": [
        "dpsyn advise --dataset sst2 --seeds 2  # a built-in public benchmark",
        "dpsyn advise --data tickets.csv --labels billing,login,crash  # a custom task",
        "dpsyn advise --dataset trec14 --seeds 3 --epsilons 1,4 --shots 4 --json",
    ],
    "audit": ["dpsyn audit --dataset sst2 --quick  # -> out/audit/sst2/"],
    "budget": ["dpsyn budget set DATASET --epsilon 10", "dpsyn budget show DATASET"],
    "budget ledger": [
        "dpsyn budget ledger DATASET",
        "dpsyn budget ledger DATASET --csv  # the dashboard's CSV export",
        "dpsyn budget ledger --all-tenants --tenant TEAM --key ORG_KEY",
    ],
    "budget list": ["dpsyn budget list", "dpsyn budget list --over-threshold"],
    "budget set": [
        "dpsyn budget set DATASET --epsilon 10  # delta: the public default 1e-6",
        "dpsyn budget set DATASET --epsilon 12 --warn 80",
    ],
    "budget show": ["dpsyn budget show DATASET", "dpsyn budget show DATASET --json"],
    "config": [
        "dpsyn config set --url https://dpsyn.example.org --key-file acme.key",
        "dpsyn config show",
    ],
    "config set": ["dpsyn config set --url https://dpsyn.example.org --key-file acme.key"],
    "config show": ["dpsyn config show"],
    "datasets": [
        "dpsyn datasets upload ../shared/data/trec/train.txt --task trec -q  # -> DATASET",
        "dpsyn datasets list",
    ],
    "datasets counts-public": [
        "dpsyn datasets counts-public DATASET --yes",
        "dpsyn datasets counts-public DATASET --withdraw --yes",
    ],
    "datasets delete": ["dpsyn datasets delete DATASET --yes"],
    "datasets list": ["dpsyn datasets list", "dpsyn datasets list --include-deleted --json"],
    "datasets reads": ["dpsyn datasets reads DATASET --limit 20"],
    "datasets show": ["dpsyn datasets show DATASET"],
    "datasets upload": [
        "dpsyn datasets upload ../shared/data/trec/train.txt --task trec -q  # -> DATASET",
        f"dpsyn datasets upload tickets.csv {_TICKETS} --name tickets -q",
        "dpsyn datasets upload ../shared/data/imdb/test_sample2000.jsonl --public -q  # PUBLIC",
        f"dpsyn datasets upload held-out.csv --public --labelled {_TICKETS} -q  # VALIDATION",
    ],
    "eval": [
        "dpsyn eval --dataset trec --quick  # -> out/eval/trec/",
        "dpsyn eval --dataset sst2 --quick --methods promptpate",
    ],
    "jobs": [
        "dpsyn jobs submit --dataset DATASET --method adadpsyn --epsilon 8 --wait -q",
        "dpsyn jobs list --dataset DATASET",
    ],
    "jobs cancel": ["dpsyn jobs cancel JOB"],
    "jobs list": ["dpsyn jobs list --dataset DATASET", "dpsyn jobs list --status running"],
    "jobs quote": [
        "dpsyn jobs quote --dataset DATASET --method adadpsyn --epsilon 8",
        "dpsyn jobs quote --dataset DATASET --method tang --epsilon 4 --shots 2 "
        "--validation-dataset VALIDATION",
    ],
    "jobs show": ["dpsyn jobs show JOB", "dpsyn jobs show JOB --json"],
    "jobs submit": [
        "dpsyn jobs submit --dataset DATASET --method adadpsyn --epsilon 8 --wait -q  # PROMPT",
        "dpsyn jobs submit --dataset DATASET --method promptpate --public-dataset PUBLIC "
        "--epsilon 8 --param teachers=100 --wait -q",
        "dpsyn jobs submit --dataset DATASET --epsilon 4 --validation-dataset VALIDATION",
    ],
    "jobs submit-batch": ["dpsyn jobs submit-batch plan.json -q  # one job ID a line"],
    "jobs wait": ["dpsyn jobs wait JOB", "dpsyn jobs wait JOB -q  # -> PROMPT"],
    "keys": ["dpsyn keys create --scope prompts:read --name support-app", "dpsyn keys list"],
    "keys create": ["dpsyn keys create --scope prompts:read --name support-app"],
    "keys list": ["dpsyn keys list", "dpsyn keys list --json"],
    "keys revoke": ["dpsyn keys revoke KEY_ID --yes"],
    "migrate": ["dpsyn migrate  # once, before the API replicas and workers start"],
    "privacy": [
        f"dpsyn privacy quote --method tang --task trec {_SHAPE} --epsilon 4 --shots 2",
        f"dpsyn privacy calibrate --method tang --epsilon 4 --M 20 --N 2 --tmax 15 {_SHAPE}",
    ],
    "privacy calibrate": [
        f"dpsyn privacy calibrate --method tang --epsilon 4 --M 20 --N 2 --tmax 15 {_SHAPE} --json",
    ],
    "privacy epsilon": [
        "dpsyn privacy epsilon --method adadpsyn --accounting paper --sigma0 15 --sigma1 1.09 "
        f"--sigma2 5 --T 2 --M 20 --N 2 --tmax 15 {_SHAPE} --json",
    ],
    "privacy plan": [
        "dpsyn privacy plan --epsilon 4 --M 20 --K 50 --tmax 30 --n-labels 4 "
        "--n-label 357 --n-total 4998",
    ],
    "privacy quote": [
        f"dpsyn privacy quote --method tang --task trec {_SHAPE} --epsilon 4 --shots 2 "
        "--public-counts",
        "dpsyn privacy quote --method adadpsyn --labels billing,network --n-label 30 "
        "--n-total 60 --epsilon 8",
    ],
    "prompts": ["dpsyn prompts list", "dpsyn prompts get PROMPT"],
    "prompts complete": [
        'dpsyn prompts complete PROMPT --query "What city is the capital of Australia ?"',
    ],
    "prompts download": ["dpsyn prompts download PROMPT --output soft-prompt.safetensors"],
    "prompts get": ["dpsyn prompts get PROMPT", "dpsyn prompts get PROMPT --format messages"],
    "prompts list": [
        "dpsyn prompts list --dataset DATASET",
        "dpsyn prompts list --sort validation",
    ],
    "serve": [
        "dpsyn serve  # embedded: SQLite and an in-process worker, http://127.0.0.1:8000",
        "dpsyn serve --port 8080",
        "dpsyn serve --no-migrate  # each API replica behind a one-shot 'dpsyn migrate'",
    ],
    "synthesize": [
        "dpsyn synthesize --data ../shared/data/trec/train.txt --task trec --method adadpsyn "
        "--epsilon 4 --shots 4 --out out/trec.json",
        f"dpsyn synthesize --data tickets.csv {_TICKETS} --epsilon 2",
        "dpsyn synthesize --data dbpedia.csv --text-col 2+3 --label-col 1 "
        "--label-map 1=Company,2=EducationalInstitution,3=Artist,4=Athlete --epsilon 4",
    ],
    "worker": ["dpsyn worker  # needs DPSYN_BROKER_URL", "dpsyn worker --concurrency 2"],
    "worker-health": ["dpsyn worker-health --max-age 120"],
}


def epilog(lines: list[str]) -> str:
    """The examples as help shows them, after the options."""
    return "Examples:\n\n" + "\n".join(f"  $ {line}" for line in lines)


def add_examples(app: typer.Typer) -> None:
    """Give ``app``, each of its groups and each of their commands the epilog of its path in
    :data:`EXAMPLES` (one without an entry keeps none; the help tests name it)."""
    if "" in EXAMPLES:
        app.info.epilog = epilog(EXAMPLES[""])
    _add(app, ())


def _add(group: typer.Typer, path: tuple[str, ...]) -> None:
    for command in group.registered_commands:
        name = command.name or typer.main.get_command_name(_callback_name(command.callback))
        lines = EXAMPLES.get(" ".join((*path, name)))
        if lines:
            command.epilog = epilog(lines)
    for sub in group.registered_groups:
        sub_path = (*path, str(sub.name))
        lines = EXAMPLES.get(" ".join(sub_path))
        if lines:
            sub.epilog = epilog(lines)
        if sub.typer_instance is not None:
            _add(sub.typer_instance, sub_path)


def _callback_name(callback: Any) -> str:
    return str(getattr(callback, "__name__", ""))
