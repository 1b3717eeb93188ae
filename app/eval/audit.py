"""Empirical privacy audit: the membership inference attack of Duan et al. on 1-shot prompts.

The attack (Duan et al., "Flocks of Stochastic Parrots", and AdaDPSyn's appendix C.6): an
adversary who can query a prompted model holds candidate records with their true labels and
asks, for each, the probability the prompted model gives the true label when the record is
the query. Records shown in the prompt tend to get a higher probability, so thresholding that
score separates members from non-members. We report the ROC AUC of that score.

Design
------
* **Split.** The training records are de-duplicated by text and shuffled (seeded), then split
  in half: a *member pool* and a held-out *non-member pool*. Members are only ever drawn from
  the first, non-members only from the second, so the two sets are disjoint (also by text).
* **(a) Real prompts** (the non-private baseline, epsilon = infinity). Per trial: one member
  record is drawn from the member pool and forms the 1-shot prompt
  (:func:`~app.synthesis.prompts.demonstration_prompt`); ``candidates - 1`` non-members with
  the *same label* are drawn from the held-out pool (Duan et al. use 1 member against many
  non-members). Matching the label keeps the attack about membership, not about a bias of
  the model towards the label shown in the prompt.
* **(b) A registered method's release** (``AuditConfig.attacks``: any registered method, by
  name, with its trials and parameters; by default AdaDPSyn's 1-shot prompts). Per trial, a
  member subset is drawn from the member pool and the method runs on exactly it as a job
  (shots = 1 if it has demonstrations; the target ``epsilon``; ``delta`` is
  ``1 / |training set|``; its ``Method.audit_params``, or ``audit_quick_params`` under
  ``--quick``, below the user's). The subset's shape is the method's word
  (``Method.audit_subset``): the token loop takes ``M * N`` records of *each* label, because
  the job's public label schedule picks the target label ``L`` before any record is read and
  generation reads only the partition of ``L``; with exactly ``M * N`` records in it, every
  teacher step sees every one of them (Poisson rate 1 under tight accounting, all records
  under paper accounting), the setting most favourable to the attacker. A method without a
  per-label shape (PromptDPSGD) draws ``members`` records of any label: every step samples
  from that small set at rate ``batch_size / members``. The members are the subset's records
  of the labels the job's public schedule names (all of them if it names none); as many
  non-members of each of those labels are drawn from the held-out pool. A method the audit
  cannot attack says why (``Method.audit_refusal``: PromptPATE reads a public dataset the
  audit lacks), before any trial runs.
* **As a job.** Every method run goes through the method registry the way a service job does
  (:func:`app.eval.methods.run_method`: configure, plan from the subset's counts, run),
  seeded from the audit's generator; so the attacked prompts (or soft prompts, scored
  through :class:`~app.promptdpsgd.backend.SoftPromptedBackend`) are those the service would
  release for such a subset.
* **Score.** For each candidate as the query, the score of its true label by
  :func:`app.synthesis.scoring.label_probabilities`, the scorer ``/complete`` answers with
  (when the labels' answers start with different tokens: the probability of the first token
  of the true label's answer, renormalised over the labels' first tokens; labels sharing
  first tokens are scored along their tokens). All candidates of a prompt go to the backend
  in one call (they share the prompt as a prefix, so a KV-cache backend runs it once).
* **AUC.** Per trial, the Mann-Whitney statistic over (member, non-member) pairs (ties count
  one half); the reported AUC is the mean over trials. The 95% confidence interval is the
  percentile bootstrap of that mean over trials (seeded). The ROC curve pools the scores of
  all trials; its AUC is reported too.

Nothing here logs or writes record text: the outputs hold scores, labels and AUCs only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.eval.methods import JobSpec, configure, get, run_method, scorer, title
from app.llm.base import LLMBackend
from app.privacy.accounting import Accounting
from app.results import SynthesisResult
from app.synthesis.data import Record
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.scoring import label_probabilities
from app.synthesis.tasks import TaskKind, TaskSpec

AuditProgress = Callable[[str, int, int], None]  # (which attack, trials done, trials planned)


# --- statistics -----------------------------------------------------------------------------


def auc(members: Sequence[float], non_members: Sequence[float]) -> float:
    """ROC AUC as the Mann-Whitney statistic: P(member > non-member) + P(tie) / 2."""
    m = np.asarray(members, dtype=float)
    n = np.asarray(non_members, dtype=float)
    if m.size == 0 or n.size == 0:
        raise ValueError("AUC needs at least one member and one non-member score")
    greater = (m[:, None] > n[None, :]).sum()
    ties = (m[:, None] == n[None, :]).sum()
    return float((greater + 0.5 * ties) / (m.size * n.size))


def bootstrap_ci(
    values: Sequence[float], *, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampling the values)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("no values to bootstrap")
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def roc_points(
    members: Sequence[float], non_members: Sequence[float]
) -> tuple[list[float], list[float]]:
    """(FPR, TPR) of every threshold, from (0, 0) to (1, 1); tied scores move together."""
    scores = np.concatenate([np.asarray(members, float), np.asarray(non_members, float)])
    is_member = np.concatenate([np.ones(len(members)), np.zeros(len(non_members))])
    if is_member.sum() == 0 or is_member.sum() == is_member.size:
        raise ValueError("ROC needs at least one member and one non-member score")
    order = np.argsort(-scores, kind="stable")
    scores, is_member = scores[order], is_member[order]
    last_of_group = np.r_[np.flatnonzero(np.diff(scores) != 0), scores.size - 1]
    tp = np.cumsum(is_member)[last_of_group]
    fp = np.cumsum(1 - is_member)[last_of_group]
    tpr = np.r_[0.0, tp / is_member.sum()]
    fpr = np.r_[0.0, fp / (is_member.size - is_member.sum())]
    return fpr.tolist(), tpr.tolist()


def curve_auc(fpr: Sequence[float], tpr: Sequence[float]) -> float:
    """Area under a ROC curve by the trapezoid rule (equals :func:`auc` of its scores)."""
    return float(np.trapezoid(tpr, fpr))


# --- trials ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trial:
    """One attack: a 1-shot prompt and the candidates scored after it (indices into pools)."""

    label: str
    members: tuple[int, ...]  # into the member pool
    non_members: tuple[int, ...]  # into the held-out pool


@dataclass
class TrialResult:
    member_scores: list[float]
    non_member_scores: list[float]
    auc: float


@dataclass
class AttackSummary:
    name: str
    trials: list[TrialResult]
    seed: int
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def aucs(self) -> list[float]:
        return [t.auc for t in self.trials]

    def mean_auc(self) -> float:
        return float(np.mean(self.aucs))

    def ci(self) -> tuple[float, float]:
        return bootstrap_ci(self.aucs, seed=self.seed)

    def roc(self) -> tuple[list[float], list[float]]:
        members = [s for t in self.trials for s in t.member_scores]
        non_members = [s for t in self.trials for s in t.non_member_scores]
        return roc_points(members, non_members)

    def to_dict(self) -> dict[str, object]:
        fpr, tpr = self.roc()
        low, high = self.ci()
        return {
            "name": self.name,
            "trials": len(self.trials),
            "auc_mean": self.mean_auc(),
            "auc_ci95": [low, high],
            "auc_pooled": curve_auc(fpr, tpr),
            "per_trial_auc": self.aucs,
            "per_trial": [asdict(t) for t in self.trials],
            "roc": {"fpr": fpr, "tpr": tpr},
            **self.extra,
        }


@dataclass(frozen=True)
class MethodAttack:
    """Attack (b) on one registered method: its trials, and the parameters its runs take (a
    job's params, over the method's ``audit_params``)."""

    method: str
    trials: int = 20
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditConfig:
    """What the audit runs: the real-prompt attack (a) and one attack (b) per method."""

    trials: int = 100
    candidates: int = 16  # per real-prompt trial: 1 member + (candidates - 1) non-members
    attacks: tuple[MethodAttack, ...] = (MethodAttack("adadpsyn"),)
    members: int = 32  # per trial of a method without a per-label subset (audit_subset)
    epsilon: float = 8.0
    accounting: Accounting = Accounting.TIGHT
    seed: int = 0


@dataclass
class Pools:
    """The de-duplicated training records split into members and held-out non-members."""

    members: list[Record]
    held_out: list[Record]

    def by_label(self, which: str) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, record in enumerate(self.members if which == "members" else self.held_out):
            out.setdefault(record.label, []).append(i)
        return out


def split_pools(records: Sequence[Record], rng: np.random.Generator) -> Pools:
    """Drop repeated texts, shuffle, and split in half (members first)."""
    seen: set[str] = set()
    unique = []
    for record in records:
        if record.text not in seen:
            seen.add(record.text)
            unique.append(record)
    order = rng.permutation(len(unique))
    half = len(unique) // 2
    return Pools([unique[i] for i in order[:half]], [unique[i] for i in order[half:]])


def _draw(indices: list[int], count: int, rng: np.random.Generator, what: str) -> tuple[int, ...]:
    if len(indices) < count:
        raise ValueError(f"need {count} {what}, only {len(indices)} available")
    return tuple(int(i) for i in rng.choice(indices, size=count, replace=False))


def real_trials(
    task: TaskSpec, pools: Pools, count: int, candidates: int, rng: np.random.Generator
) -> list[Trial]:
    """(a): one member (the prompt's record) and ``candidates - 1`` same-label non-members."""
    if candidates < 2:
        raise ValueError("a trial needs at least 2 candidates (1 member, 1 non-member)")
    members, held = pools.by_label("members"), pools.by_label("held_out")
    usable = [label for label in task.labels if members.get(label) and held.get(label)]
    if not usable:
        raise ValueError("no label has records in both the member and the held-out pool")
    trials = []
    for _ in range(count):
        member = int(rng.integers(len(pools.members)))
        label = pools.members[member].label
        if label not in usable:
            label = usable[int(rng.integers(len(usable)))]
            member = _draw(members[label], 1, rng, "members")[0]
        non = _draw(held[label], candidates - 1, rng, f"held-out records of label {label!r}")
        trials.append(Trial(label, (member,), non))
    return trials


def score_candidates(
    task: TaskSpec, backend: LLMBackend, prompt: str, candidates: Sequence[Record]
) -> list[float]:
    """The score ``/complete`` gives each candidate's true label, in one backend call."""
    probs = label_probabilities(backend, task, prompt, [c.text for c in candidates])
    return [float(probs[i, task.labels.index(c.label)]) for i, c in enumerate(candidates)]


def _result(
    task: TaskSpec,
    backend: LLMBackend,
    prompt: str,
    members: Sequence[Record],
    non_members: Sequence[Record],
) -> TrialResult:
    scores = score_candidates(task, backend, prompt, [*members, *non_members])
    m, n = scores[: len(members)], scores[len(members) :]
    return TrialResult(m, n, auc(m, n))


def run_real(
    task: TaskSpec,
    backend: LLMBackend,
    pools: Pools,
    config: AuditConfig,
    rng: np.random.Generator,
    progress: AuditProgress | None = None,
) -> AttackSummary:
    """Attack (a): 1-shot prompts made of a real member record."""
    results = []
    trials = real_trials(task, pools, config.trials, config.candidates, rng)
    for number, trial in enumerate(trials, 1):
        members = [pools.members[i] for i in trial.members]
        prompt = demonstration_prompt(task, members)
        non = [pools.held_out[i] for i in trial.non_members]
        results.append(_result(task, backend, prompt, members, non))
        if progress is not None:
            progress("real", number, len(trials))
    return AttackSummary("real", results, config.seed, {"epsilon": "inf"})


def _delta(pools: Pools) -> float:
    """The audit's delta: one over the training set's (de-duplicated) size."""
    return 1.0 / (len(pools.members) + len(pools.held_out))


def _same_labels(
    task: TaskSpec, pools: Pools, members: Sequence[Record], rng: np.random.Generator
) -> list[Record]:
    """As many held-out records of each label as ``members`` has."""
    held_by = pools.by_label("held_out")
    non: list[Record] = []
    for label in task.labels:
        wanted = sum(m.label == label for m in members)
        if wanted:
            picked = _draw(held_by.get(label, []), wanted, rng, f"held-out of {label!r}")
            non += [pools.held_out[i] for i in picked]
    return non


def _subset(
    task: TaskSpec, pools: Pools, per_label: int | None, members: int, rng: np.random.Generator
) -> list[Record]:
    """A trial's member subset: ``per_label`` records of each label (in the task's order),
    or ``members`` records of any label when ``per_label`` is None."""
    if per_label is None:
        chosen = _draw(list(range(len(pools.members))), members, rng, "members")
        return [pools.members[i] for i in chosen]
    by_label = pools.by_label("members")
    subset = {
        label: _draw(by_label.get(label, []), per_label, rng, f"members of label {label!r}")
        for label in task.labels
    }
    return [pools.members[i] for label in task.labels for i in subset[label]]


def run_method_attack(
    task: TaskSpec,
    backend: LLMBackend,
    pools: Pools,
    config: AuditConfig,
    attack: MethodAttack,
    rng: np.random.Generator,
    progress: AuditProgress | None = None,
) -> AttackSummary:
    """Attack (b) on ``attack.method``: per trial, the method runs as a job runs on a member
    subset (:func:`_subset`, shaped by ``Method.audit_subset``), and candidates are scored
    after what it released; the members are the subset's records of the labels its public
    schedule names (all, if it names none)."""
    method = get(attack.method)
    params = {**method.audit_params, **attack.params}
    job = JobSpec(
        epsilon=config.epsilon,
        shots=1 if method.shots_param is not None else None,
        accounting=config.accounting,
        delta=_delta(pools),
    )
    per_label = method.audit_subset(configure(attack.method, task, job, params)[1])
    results, spent, release = [], [], "1-shot prompt"
    for number in range(1, attack.trials + 1):
        subset = _subset(task, pools, per_label, config.members, rng)
        seeded = JobSpec(**{**job.__dict__, "seed": int(rng.integers(2**31))})
        ran = run_method(attack.method, task, subset, backend, seeded, params)
        schedule = set(ran.plan.stored().schedule) or set(task.labels)
        members = [record for record in subset if record.label in schedule]
        non = _same_labels(task, pools, members, rng)
        release = _release(attack.method, ran.result)
        spent.append(ran.result.epsilon)
        results.append(_result(task, scorer(backend, ran.result), ran.result.prompt, members, non))
        if progress is not None:
            progress(attack.method, number, attack.trials)
    extra: dict[str, object] = {
        "epsilon": config.epsilon,
        "epsilon_spent_max": max(spent) if spent else None,
        "delta": _delta(pools),
        "release": release,
        **params,
    }
    if per_label is None:
        extra["members_per_trial"] = config.members
    else:
        extra["member_subset_per_label"] = per_label
    return AttackSummary(attack.method, results, config.seed, extra)


def _release(name: str, result: SynthesisResult) -> str:
    """What the attack scores after: a soft prompt or the released demonstrations; a
    ValueError if a run released neither (nothing for the attack to put before a query)."""
    if result.soft_prompt is not None:
        return "soft prompt"
    if not result.demonstrations:
        raise ValueError(
            f"dpsyn audit cannot attack method {name}: a run released neither text "
            "demonstrations nor a soft prompt, so no prompt holds what it learnt"
        )
    return f"{len(result.demonstrations)}-shot prompt"


def check_attacks(config: AuditConfig) -> None:
    """ValueError naming a method that is not registered or that cannot be audited, and
    why, before any trial runs."""
    for attack in config.attacks:
        refusal = get(attack.method).audit_refusal()
        if refusal is not None:
            raise ValueError(f"dpsyn audit cannot attack method {attack.method}: {refusal}")


def run_audit(
    task: TaskSpec,
    records: Sequence[Record],
    backend: LLMBackend,
    config: AuditConfig,
    progress: AuditProgress | None = None,
) -> dict[str, AttackSummary]:
    """The attacks on ``records`` (a task's training set); trials are seeded by the config."""
    if task.kind != TaskKind.CLASSIFICATION:
        raise ValueError("the audit scores a label probability: classification tasks only")
    check_attacks(config)
    rng = np.random.default_rng(config.seed)
    pools = split_pools(records, rng)
    out: dict[str, AttackSummary] = {}
    if config.trials > 0:
        out["real"] = run_real(task, backend, pools, config, rng, progress)
    for attack in config.attacks:
        if attack.trials > 0:
            out[attack.method] = run_method_attack(
                task, backend, pools, config, attack, rng, progress
            )
    if not out:
        raise ValueError("nothing to run: every trial count is 0")
    return out


# --- outputs --------------------------------------------------------------------------------


def _title(summary: AttackSummary) -> str:
    if summary.name == "real":
        return "Real 1-shot prompt (ε = ∞)"
    release = summary.extra.get("release", "1-shot prompt")
    return f"{title(summary.name)} {release} (ε = {summary.extra.get('epsilon', 0):g})"


def plot_roc(summaries: dict[str, AttackSummary], path: Path) -> None:
    """Pooled ROC curves of the attacks and the diagonal, to a PNG file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5), dpi=100)
    try:
        ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="random guess")
        for summary in summaries.values():
            fpr, tpr = summary.roc()
            low, high = summary.ci()
            ax.plot(
                fpr,
                tpr,
                label=f"{_title(summary)}: AUC {summary.mean_auc():.3f} [{low:.3f}, {high:.3f}]",
            )
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("False positive rate")
        ax.set_ylabel("True positive rate")
        ax.set_title("Membership inference on 1-shot prompts")
        ax.legend(loc="lower right", fontsize=7)
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def markdown(summaries: dict[str, AttackSummary], meta: dict[str, object]) -> str:
    lines = [
        f"# Membership inference audit: {meta.get('dataset')}",
        "",
        f"Model `{meta.get('model')}`, seed {meta.get('seed')}. Attack of Duan et al.: the "
        "score of a candidate is the probability the 1-shot-prompted model gives its true "
        "label. AUC is the Mann-Whitney statistic per trial, averaged over trials; the 95% "
        "interval is a bootstrap over trials; 0.5 is random guessing.",
        "",
        "| Prompt | Trials | Members / non-members per trial | Mean AUC | 95% CI | Pooled AUC |",
        "|---|---|---|---|---|---|",
    ]
    for summary in summaries.values():
        low, high = summary.ci()
        fpr, tpr = summary.roc()
        first = summary.trials[0]
        sizes = f"{len(first.member_scores)} / {len(first.non_member_scores)}"
        lines.append(
            f"| {_title(summary)} | {len(summary.trials)} | {sizes} | "
            f"{summary.mean_auc():.3f} | [{low:.3f}, {high:.3f}] | {curve_auc(fpr, tpr):.3f} |"
        )
    lines += ["", "ROC curves (pooled over trials): `roc.png`.", ""]
    return "\n".join(lines)


def write_outputs(
    summaries: dict[str, AttackSummary], meta: dict[str, object], out_dir: Path
) -> dict[str, Path]:
    """``audit.json``, ``audit.md`` and ``roc.png`` in ``out_dir`` (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / "audit.json",
        "markdown": out_dir / "audit.md",
        "plot": out_dir / "roc.png",
    }
    data = {**meta, "attacks": {name: s.to_dict() for name, s in summaries.items()}}
    paths["json"].write_text(json.dumps(data, indent=2, default=_json_default, allow_nan=False))
    paths["markdown"].write_text(markdown(summaries, meta))
    plot_roc(summaries, paths["plot"])
    return paths


def _json_default(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
