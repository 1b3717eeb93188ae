"""Everything `dpsyn synthesize --out` writes, on neighbouring datasets (issue 32).

A dataset D of tickets, D with one record removed and D with one record relabelled, the same
seed: every written field other than the DP outputs must be identical. The DP outputs are
the count release (app.privacy.unit), the demonstrations and prompt, and what follows from
when the generated text stopped (backend calls). The count release is a DP output whose
value differs between D and D', so the test conditions on it: the run's own release
(``local_release``, at a share of its target, issue 41) is replaced by one that draws the same
noise and returns the same counts for all three datasets (an outcome the real release can
produce), and then nothing else written may differ. Before issue 32, delta (1/|D|), the
sampling rates, every noise multiplier and the planner's clip did.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.methods import base as method_base
from app.privacy.unit import CountRelease
from tests.cli.test_synthesize_cli import CUSTOM, WRITTEN, _fields
from tests.synthesis.fake_backend import FakeBackend

runner = CliRunner()

#: What differs between neighbours by design: DP outputs, and counters that follow from when
#: the generated text stopped.
DP_FIELDS = {name for name, kind in WRITTEN.items() if kind == "dp"}


@pytest.fixture(autouse=True)
def fake_backend(monkeypatch):
    monkeypatch.setattr(
        "app.cli.synthesize.make_backend",
        lambda kind, model, url, dtype: FakeBackend(stop_after=2, marker="Text:"),
    )


def condition_release(monkeypatch, outcome: float) -> list[tuple[dict[str, int], CountRelease]]:
    """The run's count release, conditioned on one outcome: the real release's noise draws,
    noise and cost, but ``outcome`` (plus 3 per label, in order) whatever the exact counts
    were; records the exact counts it was given and the release it returned."""
    seen: list[tuple[dict[str, int], CountRelease]] = []
    real = method_base.local_release

    def release(sizes, declared_public, epsilon, delta, rng):
        drawn = real(sizes, declared_public, epsilon, delta, rng)
        if drawn is None:
            return None
        noisy = {label: outcome + 3 * i for i, label in enumerate(sorted(sizes))}
        same = CountRelease(drawn.sigma, noisy, drawn.epsilon, drawn.delta, drawn.id)
        seen.append((dict(sizes), same))
        return same

    monkeypatch.setattr(method_base, "local_release", release)
    return seen


@pytest.fixture
def equal_releases(monkeypatch):
    """:func:`condition_release` at 40 (and 43)."""
    return condition_release(monkeypatch, 40.0)


def neighbours() -> dict[str, list[tuple[str, str]]]:
    """D (61 tickets, uneven labels), D minus its first record, D with it relabelled."""
    rows = [
        (f"secretticket{i} about {i % 7}", "billing" if i % 3 else "network") for i in range(61)
    ]
    return {
        "D": rows,
        "removed": rows[1:],
        "relabelled": [
            (rows[0][0], "billing" if rows[0][1] == "network" else "network"),
            *rows[1:],
        ],
    }


def write(path, rows) -> None:
    path.write_text("text,category\n" + "".join(f"{t},{label}\n" for t, label in rows))


@pytest.mark.parametrize("method", ["adadpsyn", "tang"])
def test_neighbouring_datasets_write_the_same_fields_but_dp_outputs(
    method, tmp_path, equal_releases
):
    written = {}
    for name, rows in neighbours().items():
        data, out = tmp_path / f"{name}.csv", tmp_path / f"{name}.json"
        write(data, rows)
        args = ["synthesize", "--data", str(data), *CUSTOM, "--label-col", "category"]
        args += ["--method", method, "--epsilon", "4", "--M", "4", "--N", "2", "--tmax", "4"]
        result = runner.invoke(
            app, [*args, "--shots", "2", "--K", "10", "--seed", "3", "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        written[name] = _fields(json.loads(out.read_text()))
    assert len({json.dumps(sizes, sort_keys=True) for sizes, _ in equal_releases}) == 3
    first = written["D"]
    assert set(first) <= set(WRITTEN), set(first) - set(WRITTEN)
    for name, fields in written.items():
        assert set(fields) == set(first), name
        differing = {k for k in first if k not in DP_FIELDS and fields[k] != first[k]}
        assert not differing, (name, differing)
    # The run's own release is charged in what is written: its epsilon and delta are the
    # job's and the release's together (the target's share), not in each label's event.
    labels = first["event"]["labels"]
    assert labels and not any(entry.get("count_release") for entry in labels)
    release = equal_releases[0][1]
    assert release.epsilon == pytest.approx(0.05 * 4) and first["epsilon"] <= 4
    assert first["epsilon"] == pytest.approx(4, rel=1e-2) and first["delta"] == 1e-6


def _flat(data: dict) -> dict[str, object]:
    """Every leaf of a written file by its dotted path (lists kept whole)."""
    out: dict[str, object] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in _flat(value).items()})
        else:
            out[key] = value
    return out


def _synthesize_neighbours(tmp_path, extra: list[str]) -> dict[str, dict[str, object]]:
    """``dpsyn synthesize --out`` on D, D minus one record and D relabelled, every leaf."""
    written = {}
    for name, rows in neighbours().items():
        data, out = tmp_path / f"{name}.csv", tmp_path / name / "out.json"
        write(data, rows)
        args = ["synthesize", "--data", str(data), *CUSTOM, "--label-col", "category"]
        result = runner.invoke(app, [*args, *extra, "--seed", "3", "--out", str(out)])
        assert result.exit_code == 0, result.output
        written[name] = _flat(json.loads(out.read_text()))
    return written


def _differing(written: dict[str, dict[str, object]], dp: set[str]) -> dict[str, set[str]]:
    first = written["D"]
    return {
        name: {k for k in set(first) | set(fields) if k not in dp and fields.get(k) != first.get(k)}
        for name, fields in written.items()
    }


def test_promptpate_writes_the_same_fields_on_neighbours(tmp_path, monkeypatch):
    """PromptPATE reads no count: nothing is conditioned; the teachers' votes (their keyed
    hash, seeded here) give DP outputs only: the labels, the chosen student and its shots."""
    public = tmp_path / "public.jsonl"
    public.write_text(
        "".join(json.dumps({"text": f"ticket {i} one two"}) + "\n" for i in range(40))
    )
    extra = ["--method", "promptpate", "--public", str(public), "--epsilon", "4"]
    extra += ["--teachers", "4", "--queries", "10", "--student-candidates", "2"]
    written = _synthesize_neighbours(tmp_path, extra)
    dp = {"demonstrations", "prompt"}
    assert _differing(written, dp) == {name: set() for name in written}
    assert written["D"]["delta"] == 1e-6 and "plan.n_private" not in written["D"]


def test_promptdpsgd_writes_the_same_fields_on_neighbours(tmp_path, monkeypatch):
    """PromptDPSGD plans from the run's count release (per label, as every method that reads
    counts; conditioned on one outcome here): then only the soft prompt (a DP output: its
    hash) and the wall time differ."""
    from tests.promptdpsgd.tiny import tiny_backend

    monkeypatch.setattr("app.cli.synthesize.make_backend", lambda kind, **kw: tiny_backend())
    seen = condition_release(monkeypatch, 27.0)
    extra = ["--method", "promptdpsgd", "--epsilon", "4", "--steps", "2", "--batch-size", "4"]
    written = _synthesize_neighbours(tmp_path, [*extra, "--prompt-length", "2"])
    dp = {"soft_prompt.sha256"}
    assert _differing(written, dp) == {name: set() for name in written}
    assert [sizes for sizes, _ in seen] == [
        {"billing": 40, "network": 21},
        {"billing": 40, "network": 20},
        {"billing": 41, "network": 20},
    ]
    planned = sum(seen[0][1].estimates().values())
    assert written["D"]["plan.planned_records"] == planned and written["D"]["delta"] == 1e-6
