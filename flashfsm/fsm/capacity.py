"""Capacity memory: what recent job logs say about where capacity is, and the walk's order.

Theory of operation. A run's walk prefers candidates in one order. Without memory that is
the static one — cheaper first, then the smaller card, then the order given. With memory,
the shell reads the store's recent run and job logs (it only reads), turns each attempt
into a `JobWait` (`job_wait`: how long its job sat in IN_QUEUE before a worker took it,
how much of that the workers were throttled, whether it ended `no_capacity`; a job that
ended otherwise before any worker took it, a crash loop say, is no evidence), and this
module sums them per candidate identity, the (provider, GPU class) pair, over a window
(`summarize`) and orders the candidates by the ranking rule (`rank`):

    starved_last: a candidate is *starved* when, within the window, one of its jobs ended
    `no_capacity` or waited longer than `starve_after_s` before a worker took it. Candidates
    that are not starved come first, in the static order; the starved follow, the shortest
    mean wait first, then in the static order.

The order and the evidence are recorded in the run's stream (`CandidatesRanked`) before the
first attempt, so a replay, `verify` or `whatif` of the run walks exactly as it did, and
`explain` says why each candidate came in its place (`ranking_reasons`). Everything here is
pure: times come in as arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from flashfsm.events.failures import FailureKind
from flashfsm.events.models import (
    Candidate,
    CandidatesRanked,
    CapacityEvidence,
    Concluded,
    Event,
    HealthObserved,
    JobSubmitted,
    StatusObserved,
    WorkerObserved,
)
from flashfsm.events.policy import DEFAULT_POLICY
from flashfsm.fsm.rules import STARTED_STATES

#: The ranking rule's name, as `CandidatesRanked.rule` records it.
STARVED_LAST = "starved_last"
#: A candidate identity: where the attempt deploys, and the GPU class it asks for.
Identity = tuple[str, str]


@dataclass(frozen=True, slots=True)
class CapacityPolicy:
    """The capacity-memory knob: on or off, how far back it looks, what counts as starved.

    `enabled=False` (or `NO_MEMORY`) walks in the static price order and records no
    ranking, as runs did before capacity memory.
    """

    enabled: bool = True
    window_s: float = 3600.0
    starve_after_s: float = DEFAULT_POLICY.queue_grace_s  # a wait past it: a no_capacity

    def __post_init__(self) -> None:
        if not self.window_s > 0:
            raise ValueError(f"window_s must be > 0, not {self.window_s!r}")
        if not self.starve_after_s >= 0:
            raise ValueError(f"starve_after_s must be >= 0, not {self.starve_after_s!r}")


DEFAULT_CAPACITY = CapacityPolicy()
NO_MEMORY = CapacityPolicy(enabled=False)


def identity(c: Candidate) -> Identity:
    """A candidate's identity in the walk: its (provider, GPU class)."""
    return (c.provider, c.gpu_class)


@dataclass(frozen=True, slots=True)
class JobWait:
    """One attempt's job, as its logs tell how it waited for capacity."""

    provider: str
    gpu_class: str
    at: float  # when the attempt ended (or its log's last event, for one still running)
    waited_s: float  # IN_QUEUE before capacity was found (to its end when none was)
    throttled_s: float  # of that wait, with the endpoint's workers throttled
    picked_up: bool  # a worker took the job, or its records listed one starting for it
    no_capacity: bool
    ended: bool = True  # the attempt or its job reached an outcome

    @property
    def about_capacity(self) -> bool:
        """Whether the wait says anything about capacity: the job was picked up (its queue
        time was the wait for a worker), ended `no_capacity`, or is still waiting. A job that
        ended otherwise before any worker took it (a crash loop, a cancel, a lost job) says
        nothing about capacity."""
        return self.picked_up or self.no_capacity or not self.ended


def job_wait(
    provider: str,
    gpu_class: str,
    events: Sequence[Event],
    *,
    failure: FailureKind | str | None = None,
    ended_at: float | None = None,
) -> JobWait | None:
    """How one attempt's job waited, from its job log (None for an empty log).

    The wait runs from the submission (`JobSubmitted.submitted_at`, else the log's first
    event) to the first status other than IN_QUEUE — or, sooner, the first worker record
    read while IN_QUEUE that lists a worker starting or up (capacity was found; the start
    is not the class's shortage, D10) — or to the log's end when neither came. Throttled
    time is the part of it during which `/health` said the workers were throttled with
    none usable. `failure` (the run's `AttemptEnded`) wins over the log's
    own verdict for `no_capacity`.
    """
    if not events:
        return None
    start = events[0].at
    for e in events:
        if isinstance(e, JobSubmitted) and e.submitted_at is not None:
            start = min(start, e.submitted_at)
            break
    picked_at: float | None = None
    throttled_s = 0.0
    throttled_since: float | None = None
    verdict: FailureKind | None = None
    concluded = False
    last = events[-1].at
    for e in events:
        if isinstance(e, StatusObserved) and picked_at is None and e.status != "IN_QUEUE":
            picked_at = e.at
        elif isinstance(e, WorkerObserved) and picked_at is None and e.status in STARTED_STATES:
            picked_at = e.at  # (a pickup's record comes after its status: never this one)
        elif isinstance(e, HealthObserved) and picked_at is None:
            w = e.workers
            usable = w.running + w.ready + w.idle + w.initializing
            if w.throttled > 0 and usable == 0:
                throttled_since = e.at if throttled_since is None else throttled_since
            elif throttled_since is not None:
                throttled_s += e.at - throttled_since
                throttled_since = None
        elif isinstance(e, Concluded):
            verdict, concluded = e.failure, True
    end = picked_at if picked_at is not None else last
    if throttled_since is not None:
        throttled_s += max(0.0, end - throttled_since)
    kind = failure if failure is not None else verdict
    waited = max(0.0, end - start)
    return JobWait(
        provider=provider,
        gpu_class=gpu_class,
        at=ended_at if ended_at is not None else last,
        waited_s=waited,
        throttled_s=min(throttled_s, waited),
        picked_up=picked_at is not None,
        no_capacity=kind == FailureKind.NO_CAPACITY,
        ended=concluded or failure is not None or ended_at is not None,
    )


def in_window(wait: JobWait, now: float, policy: CapacityPolicy) -> bool:
    """Whether a job's wait is recent enough to count at `now`."""
    return now - policy.window_s <= wait.at <= now


def is_starved(e: CapacityEvidence, policy: CapacityPolicy) -> bool:
    """The rule's judgement: a `no_capacity` in the window, or a wait past `starve_after_s`."""
    return e.no_capacity > 0 or e.longest_wait_s > policy.starve_after_s


def mean_wait_s(e: CapacityEvidence) -> float:
    """The mean wait before pickup of a candidate's jobs in the window (0 without jobs)."""
    return e.waited_s / e.jobs if e.jobs else 0.0


def summarize(
    waits: Iterable[JobWait],
    candidates: Sequence[Candidate],
    now: float,
    policy: CapacityPolicy = DEFAULT_CAPACITY,
) -> tuple[CapacityEvidence, ...]:
    """The evidence per candidate identity from the waits inside the window ending at `now`.

    Only identities among `candidates` are kept, each once, sorted by (provider, class); an
    identity with no job in the window has no entry. Waits that say nothing about capacity
    (`JobWait.about_capacity`) are left out.
    """
    wanted = {identity(c) for c in candidates}
    sums: dict[Identity, list[JobWait]] = {}
    for w in waits:
        key = (w.provider, w.gpu_class)
        if key in wanted and w.about_capacity and in_window(w, now, policy):
            sums.setdefault(key, []).append(w)
    out = []
    for (provider, gpu_class), ws in sorted(sums.items()):
        starved_at = [w.at for w in ws if w.no_capacity or w.waited_s > policy.starve_after_s]
        e = CapacityEvidence(
            provider=provider,
            gpu_class=gpu_class,
            jobs=len(ws),
            no_capacity=sum(w.no_capacity for w in ws),
            waited_s=sum(w.waited_s for w in ws),
            throttled_s=sum(w.throttled_s for w in ws),
            longest_wait_s=max(w.waited_s for w in ws),
            last_starved_at=max(starved_at) if starved_at else None,
        )
        out.append(e.model_copy(update={"starved": is_starved(e, policy)}))
    return tuple(out)


def static_order(candidates: Sequence[Candidate]) -> tuple[int, ...]:
    """The order without memory: cheaper first, the unpriced (no price given) after every
    priced one, then the smaller card, then as given."""

    def key(i: int) -> tuple[bool, float, float, int]:
        price = candidates[i].price_per_hour
        return (price is None, price or 0.0, candidates[i].vram_gb, i)

    return tuple(sorted(range(len(candidates)), key=key))


def rank(
    candidates: Sequence[Candidate],
    evidence: Sequence[CapacityEvidence],
    policy: CapacityPolicy = DEFAULT_CAPACITY,
) -> tuple[int, ...]:
    """The walk's order under `starved_last` (candidate indexes, the preferred first)."""
    by_id = {(e.provider, e.gpu_class): e for e in evidence}
    place = {index: n for n, index in enumerate(static_order(candidates))}

    def key(index: int) -> tuple[bool, float, int]:
        e = by_id.get(identity(candidates[index]))
        starved = e is not None and is_starved(e, policy)
        return (starved, mean_wait_s(e) if starved and e is not None else 0.0, place[index])

    return tuple(sorted(range(len(candidates)), key=key))


def ranking_fields(
    candidates: Sequence[Candidate],
    waits: Iterable[JobWait],
    now: float,
    policy: CapacityPolicy = DEFAULT_CAPACITY,
    *,
    jobs_read: int = 0,
) -> dict[str, object]:
    """The fields of the run's `CandidatesRanked`: the evidence at `now` and its order."""
    evidence = summarize(waits, candidates, now, policy)
    return {
        "order": rank(candidates, evidence, policy),
        "rule": STARVED_LAST,
        "window_s": policy.window_s,
        "starve_after_s": policy.starve_after_s,
        "evidence": evidence,
        "jobs_read": jobs_read,
    }


def check_order(order: Sequence[int], count: int) -> str | None:
    """Why a recorded order is not a ranking of `count` candidates (None: it is one)."""
    if sorted(order) != list(range(count)):
        return f"order {list(order)} is not a permutation of the {count} candidates"
    return None


@dataclass(frozen=True, slots=True)
class RankReason:
    """Why one candidate came in its place in the walk's order."""

    place: int  # 0: the walk's first choice
    candidate: int  # index into RunStarted.candidates
    provider: str
    gpu_class: str
    price_per_hour: float | None  # None: unpriced
    starved: bool
    reason: str

    @property
    def text(self) -> str:
        """One line: "1. runpod/L4 $0.39/h: not starved (2 jobs, mean wait 12 s)" ("unpriced"
        in place of the rate for a candidate nobody gave a price)."""
        rate = "unpriced" if self.price_per_hour is None else f"${self.price_per_hour:.2f}/h"
        return f"{self.place + 1}. {self.provider}/{self.gpu_class} {rate}: {self.reason}"


def ranking_reasons(
    candidates: Sequence[Candidate], ranked: CandidatesRanked | None
) -> tuple[RankReason, ...]:
    """Why each candidate came in its place: from the recorded ranking, or the price order."""
    if ranked is None:
        return tuple(
            RankReason(
                n,
                i,
                candidates[i].provider,
                candidates[i].gpu_class,
                candidates[i].price_per_hour,
                False,
                "price order (no capacity memory recorded for this run)",
            )
            for n, i in enumerate(static_order(candidates))
        )
    by_id = {(e.provider, e.gpu_class): e for e in ranked.evidence}
    window = _duration(ranked.window_s)
    out = []
    for n, i in enumerate(ranked.order):
        c = candidates[i]
        e = by_id.get(identity(c))
        if e is None:
            why = f"not starved: no job in the last {window}; by price"
        else:
            jobs = f"{e.jobs} job(s), mean wait {_duration(mean_wait_s(e))}"
            if e.starved:
                causes = []
                if e.no_capacity:
                    causes.append(f"{e.no_capacity} no_capacity")
                if e.longest_wait_s > ranked.starve_after_s:
                    causes.append(
                        f"a wait of {_duration(e.longest_wait_s)} > "
                        f"{_duration(ranked.starve_after_s)}"
                    )
                if e.throttled_s:
                    causes.append(f"{_duration(e.throttled_s)} throttled")
                why = (
                    f"starved in the last {window} ({', '.join(causes)}; {jobs}): after the "
                    "candidates that were not, the shorter mean wait first"
                )
            else:
                why = f"not starved in the last {window} ({jobs}); by price"
        out.append(
            RankReason(n, i, c.provider, c.gpu_class, c.price_per_hour, bool(e and e.starved), why)
        )
    return tuple(out)


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:.0f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
