"""``dpsyn budget ...``: a dataset's privacy budget, its ledger, the fleet's ledgers."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Any

import typer

from app.cli.client.common import DatasetIdArg
from app.cli.http_client import ClientError, Reply, err, exit_with, one_line, out, print_rows
from app.cli.options import GroupedTyper
from app.cli.timestamps import shown_time
from app.cli.vocabulary import in_cli_words
from app.privacy.accounting import Accounting
from app.privacy.budget import (
    budget_percent,
    percent_text,
    spend_text,
    warn_fraction,
)
from app.privacy.display import delta_text
from app.privacy.unit import DEFAULT_DELTA

# --- budget ---------------------------------------------------------------------------------

budget_app = GroupedTyper(help="A dataset's privacy budget and ledger.", no_args_is_help=True)


#: Beside a plain sum that reads below the spend: why it does.
SUM_BELOW = (
    "the jobs' and the count release's deltas summed, larger than the budget's: each job's "
    "epsilon holds at its own delta, and a plain sum at a larger delta may read below the spend"
)


def _print_budget(budget: dict[str, Any], *, history: bool) -> None:
    """The budget line, the spend per label group (which group sets the dataset's spend, and
    why a job can add 0) and, with ``history``, the ledger with each closing entry's reason."""
    share = budget.get("spent_fraction")
    level = f" ({budget_percent(share)}, {budget['level']})" if share is not None else ""
    plain_delta = budget.get("plain_sum_delta")
    plain_at = f" at delta {delta_text(plain_delta)}" if plain_delta else ""
    if plain_delta and budget["plain_sum"] < budget["spent"]:
        plain_at += f": {SUM_BELOW}"
    out.print(
        f"budget of dataset {budget['dataset_id']}: epsilon {spend_text(budget['epsilon'])} at "
        f"delta {delta_text(budget['delta'])} ({budget['accounting']} accounting); spent "
        f"{spend_text(budget['spent'])}{level} (plain sum {spend_text(budget['plain_sum'])}"
        f"{plain_at}) by {budget['live_jobs']} job(s), {spend_text(budget['remaining'])} "
        "remaining",
        markup=False,
    )
    _print_rule(budget)
    if "warn_threshold" in budget:
        typer.echo(f"warns at {percent_text(budget['warn_threshold'])} of the budget")
    _print_count_releases(budget)
    _print_delta(budget)
    _print_label_groups(budget.get("label_groups") or [])
    if history and budget["history"]:
        typer.echo("ledger:")
        _print_ledger(budget["history"])


RULES = {
    "one_batch": "the one-batch rule: the count releases and one batch of jobs declared "
    "together (a job submitted alone is a batch of one), composed tightly",
    "renyi_filter": "the Rényi filter, valid for jobs chosen one after another",
}


def _print_rule(budget: dict[str, Any]) -> None:
    """Which of the ledger's filter rules priced the spend, the tight composition beside it,
    and why a budget is over, when it is (a ledger admitted before the filter)."""
    rule = budget.get("rule")
    if rule in RULES and budget.get("live_jobs"):
        typer.echo(
            f"priced by {RULES[rule]} (the tight composition of the same charges: "
            f"{spend_text(budget.get('composed') or 0.0)})"
        )
    if budget.get("over_note"):
        err.print(f"warning: {in_cli_words(one_line(budget['over_note']))}", markup=False)


def share_text(fraction: float) -> str:
    """A count release's share of the budget, to the digits it has (its epsilon is the
    share's, recomputed from its noise: 0.04998 reads "5%", not a floored "4%")."""
    return f"{fraction * 100:.3g}%"


def _print_count_releases(budget: dict[str, Any]) -> None:
    """The dataset's count release(s), each a line of its own: charged once for the dataset
    (once per version of its records), not by any job. Nothing for a server or a ledger
    without one."""
    for release in budget.get("count_releases") or []:
        which = "" if release.get("current", True) else " (of records since changed)"
        out.print(
            f"count release: epsilon {spend_text(release['epsilon'])} "
            f"({share_text(release['share'])} of the budget) at delta "
            f"{delta_text(release['delta'])}, "
            f"noise sigma {release['sigma']:.4g} per label count, once for this "
            f"dataset{which}",
            markup=False,
        )


def _ledger_job(entry: dict[str, Any]) -> str:
    """An entry's job cell: the job, or the count release a ``counts`` entry charges."""
    if entry["kind"] == "counts":
        return f"count release {entry.get('count_release_id') or entry['job_id']}"
    return str(entry["job_id"])


def _print_ledger(history: list[dict[str, Any]], dataset: str | None = None) -> None:
    """The ledger's entries, oldest first, with each closing entry's reason (and, for
    ``dataset``, a line saying so when it has none)."""
    if dataset is not None and not history:
        typer.echo(f"the ledger of dataset {dataset} is empty: no job was charged yet")
        return
    print_rows(
        ["time", "kind", "job", "epsilon", "delta", "reason"],
        [
            [
                shown_time(entry["created_at"]),
                entry["kind"],
                _ledger_job(entry),
                spend_text(entry["epsilon"]),
                delta_text(entry["delta"]),
                entry.get("reason") or "",
            ]
            for entry in history
        ],
    )


DELTA_SOURCES = {
    "default": "the public default, chosen independent of the dataset",
    "owner": "set by the owner",
    "former_default": "1/|D| of this dataset, the default of budgets set before counts "
    "became private",
}


def _print_delta(budget: dict[str, Any]) -> None:
    """Where the budget's delta comes from, and the server's warnings on the delta and the
    accounting (in the CLI's words), when it gives them."""
    source = DELTA_SOURCES.get(budget.get("delta_source") or "")
    if source is not None:
        typer.echo(
            f"delta {delta_text(budget['delta'])}: {source} (every prompt carries its job's delta)"
        )
    for name in ("delta_note", "accounting_note"):
        if budget.get(name):
            err.print(f"warning: {in_cli_words(one_line(budget[name]))}", markup=False)


def _print_label_groups(groups: list[dict[str, Any]]) -> None:
    """Each label group's composed spend; the largest is the dataset's spend."""
    if len(groups) < 2:
        return
    print_label_groups(
        "spend per label group (each group's records are priced apart; the dataset's spend "
        "is the largest, so a job that charges only other groups adds 0 to it):",
        {
            "spent": lambda group: spend_text(group["spent"]),
            "remaining": lambda group: spend_text(group["remaining"]),
            "jobs": lambda group: str(group["jobs"]),
            "": lambda group: "sets the spend" if group["binding"] else "",
        },
        groups,
    )


def print_label_groups(
    intro: str, columns: dict[str, Callable[[dict[str, Any]], str]], groups: list[dict[str, Any]]
) -> None:
    """A table of label groups (a budget's spend, a quote's change to it) after the line
    ``intro``: the labels of each group, then ``columns`` (header: the cell of a group)."""
    typer.echo(intro)
    cells = columns.values()
    print_rows(
        ["labels", *columns],
        [[", ".join(g["labels"]) or "(all records)", *(cell(g) for cell in cells)] for g in groups],
    )


@budget_app.command("set")
def budget_set(
    dataset: DatasetIdArg,
    epsilon: Annotated[float, typer.Option("--epsilon", help="Total epsilon (> 0).")],
    delta: Annotated[
        float | None,
        typer.Option(
            "--delta",
            help=f"Public; default: unchanged, a new budget {DEFAULT_DELTA:g} (the same for "
            "every dataset). Above 1/|D| is accepted with a warning.",
        ),
    ] = None,
    accounting: Annotated[
        Accounting,
        typer.Option(
            "--accounting",
            help="tight or paper (needs the counts public); fixed once a job is charged.",
        ),
    ] = Accounting.TIGHT,
    warn: Annotated[
        float | None,
        typer.Option(
            "--warn",
            help="Flag the budget at this percent spent, in (0, 100] (default: unchanged; "
            "80 for a new budget), as the dashboard's 'Warn at (% of ε)'.",
        ),
    ] = None,
    *,
    server: Reply,
) -> None:
    """Set or change a dataset's total privacy budget."""
    body: dict[str, Any] = {"epsilon": epsilon, "accounting": accounting.value}
    if delta is not None:
        body["delta"] = delta
    if warn is not None:
        try:
            body["warn_threshold"] = warn_fraction(warn)
        except ValueError as err:
            exit_with(ClientError(f"--warn is {err}", code=2))
    budget = server.request("PUT", f"/v1/datasets/{dataset}/budget", json=body)
    server.show(budget, partial(_print_budget, history=False))


@budget_app.command("show")
def budget_show(dataset: DatasetIdArg, server: Reply) -> None:
    """A dataset's budget, what was spent, and its ledger history."""
    budget = server.request("GET", f"/v1/datasets/{dataset}/budget")
    server.show(budget, partial(_print_budget, history=True))


@budget_app.command("list")
def budget_list(
    over_threshold: Annotated[
        bool,
        typer.Option(
            "--over-threshold/--no-over-threshold",
            help="Only budgets at or past their warn threshold.",
        ),
    ] = False,
    all_tenants: Annotated[
        bool,
        typer.Option(
            "--all-tenants/--no-all-tenants",
            help="Every tenant's budgets (an organisation key, org:read).",
        ),
    ] = False,
    *,
    server: Reply,
) -> None:
    """Budgeted datasets and their spend: budget, composed spend, share used and its level."""
    params = {
        name: "true"
        for name, given in (("over_threshold", over_threshold), ("all_tenants", all_tenants))
        if given
    }
    rows = server.request("GET", "/v1/budgets", params=params)
    server.show(rows, partial(_print_budgets, all_tenants=all_tenants))


def _print_budgets(rows: list[dict[str, Any]], *, all_tenants: bool) -> None:
    """``budget list``'s table, and a note on its count release column."""
    tenant = ["tenant"] if all_tenants else []
    print_rows(
        [*tenant, "dataset", "name", "budget", "spent", "count release", "used", "warn at",
         "level", "jobs"],
        [
            [
                *([row.get("tenant_name") or row.get("tenant_id", "-")] if all_tenants else []),
                row["dataset_id"],
                row["name"],
                spend_text(row["epsilon"]),
                spend_text(row["spent"]),
                _release_cell(row),
                budget_percent(row["spent_fraction"]),
                percent_text(row["warn_threshold"]),
                row["level"],
                str(row["live_jobs"]),
            ]
            for row in rows
        ],
    )  # fmt: skip
    for row in rows:  # budgets follow the records: which rows share one budget
        owner = row.get("budget_dataset_id")
        if owner and owner != row["dataset_id"]:
            err.print(f"{row['dataset_id']} shares the budget of {owner}", markup=False)
        elif row.get("linked_datasets"):
            shared = ", ".join(row["linked_datasets"])
            err.print(f"{row['dataset_id']}'s budget is shared with {shared}", markup=False)
    if any(row.get("counts_epsilon") for row in rows):  # a note, beside the table
        err.print(
            "count release: the part of the spend that is the dataset's release of its label "
            "counts, charged once for the dataset ('dpsyn budget show DATASET')",
            markup=False,
        )


def _release_cell(row: dict[str, Any]) -> str:
    """The count release's part of a budget's spend ("-": none, or an older server)."""
    counts = row.get("counts_epsilon")
    return spend_text(counts) if counts else "-"


@budget_app.command("ledger")
def budget_ledger(
    dataset: Annotated[
        str | None, typer.Argument(help="The dataset (not with --all-tenants).")
    ] = None,
    csv: Annotated[
        bool,
        typer.Option(
            "--csv/--no-csv", help="The ledger as CSV (the dashboard's export) on stdout."
        ),
    ] = False,
    all_tenants: Annotated[
        bool,
        typer.Option(
            "--all-tenants/--no-all-tenants",
            help="Every tenant's ledgers as one CSV (an organisation key, org:read).",
        ),
    ] = False,
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="With --all-tenants: one tenant's only (ID or name)."),
    ] = None,
    *,
    server: Reply,
) -> None:
    """A dataset's ledger: every reserve, commit and release, and its count release
    (kind counts, charged once), oldest first; with --all-tenants, every tenant's (or one
    team's, --tenant) as the fleet CSV, for a privacy officer's org key."""
    if all_tenants or tenant is not None:
        _fleet_ledgers(dataset, tenant, server)
        return
    if dataset is None:
        exit_with(ClientError("give a dataset ID (or --all-tenants with an org key)", code=2))
    with server.session() as api:
        if csv:
            response = api.download(f"/v1/datasets/{dataset}/budget/ledger.csv")
            typer.get_binary_stream("stdout").write(response.content)  # as served: CRLF
            return
        budget = api.call("GET", f"/v1/datasets/{dataset}/budget")
    server.show(budget["history"], partial(_print_ledger, dataset=dataset))


def _fleet_ledgers(dataset: str | None, tenant: str | None, server: Reply) -> None:
    """``budget ledger --all-tenants``: the fleet CSV on stdout, as served."""
    if dataset is not None:
        exit_with(ClientError("--all-tenants reads every dataset: give no dataset ID", code=2))
    with server.session() as api:
        params = {"tenant": tenant} if tenant is not None else None
        response = api.download("/v1/fleet/ledgers.csv", params=params)
    typer.get_binary_stream("stdout").write(response.content)
