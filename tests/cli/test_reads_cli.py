"""``dpsyn datasets reads``, against a live server: the job that read a dataset's records, its
worker process and the count, as a table and as JSON; never a record."""

from __future__ import annotations

import json
import os
import socket

from tests.cli.live_server import FAST, SECRET, upload


def test_the_reads_of_a_dataset_name_its_job_and_worker(dpsyn, trec_file):
    dataset = upload(dpsyn, trec_file)
    empty = dpsyn("datasets", "reads", dataset)
    assert empty.exit_code == 0 and "no read of its records" in empty.output
    assert dpsyn("budget", "set", dataset, "--epsilon", "10").exit_code == 0
    submitted = dpsyn(
        "jobs", "submit", "--dataset", dataset, "--method", "tang", "--epsilon", "1",
        *FAST, "--wait", "--poll", "0.1", "-q",
    )  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    [job] = [j["id"] for j in json.loads(dpsyn("jobs", "list", "--json").stdout)]
    shown = dpsyn("datasets", "reads", dataset)
    assert shown.exit_code == 0, shown.output
    assert "reader" in shown.output and "process" in shown.output
    host = f"{socket.gethostname()[:120]}:{os.getpid()}:"
    [row] = shown.output.splitlines()[1:]
    assert " job " in row and job in row and host in row
    assert SECRET not in shown.output
    [read] = json.loads(dpsyn("datasets", "reads", dataset, "--json").stdout)
    assert read["reader_id"] == job and read["record_count"] > 0
    assert "$ dpsyn datasets reads" in dpsyn("datasets", "reads", "--help").output
