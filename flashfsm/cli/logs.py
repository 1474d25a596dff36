"""The commands that read logs: replay, explain, why-not, whatif, timeline, watch.

Each reads any stream the library writes, by its kind (`flashfsm.views.stream_kind`):

- a job's log is what these commands are about: its timeline, its verdict and its rules;
- a run's stream is shown as the run (its attempts, phase and result) where a command
  shows a whole log (`replay`, `timeline`, `watch`), and stands for its last attempt's job
  stream where a command reads one job (`explain`, `why-not`, `whatif`); a run that has no
  job yet is explained as the run;
- a sweeper's stream is shown as its idle timers: what started, cleared and was reaped,
  and what is still running. It has no verdict (exit 0), and job rules do not apply to it
  (`why-not` and `whatif` exit 1 saying so).

How a log is printed, and its JSON, are `flashfsm.display`'s; `explain` renders the one
view `flashfsm.display.explain` gathers (the web view renders it too), as text or as JSON.

Why it is long: six commands that read logs, sharing their sources and their stream kinds.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from flashfsm import render
from flashfsm.adapters.urls import display_url
from flashfsm.cli.common import (
    EXIT_DISAGREES,
    EXIT_GATE,
    EXIT_NO_VERDICT,
    JsonOption,
    SourceArgument,
    StoreOption,
    UsageErrors,
    emit_json,
    exit_for,
    fail,
    job_source,
    open_reader,
    open_source,
    parse_duration,
    read_all_streams,
    run_exit,
    store_opener,
    store_url,
)
from flashfsm.display.explain import ExplainView, explain_view, print_explain_view
from flashfsm.display.logs import (
    attempt_json,
    measure_json,
    period_json,
    period_text,
    print_run,
    print_run_view,
    print_timeline,
    print_view,
    result_json,
    row_json,
    run_view_json,
    sweeper_row_json,
    sweeper_row_text,
    sweeper_state,
    timer_json,
    verdict_json,
    view_json,
)
from flashfsm.display.sources import Source, is_file_source, source_ledger
from flashfsm.display.text import console, say
from flashfsm.display.workers import worker_json, worker_log_json
from flashfsm.events.codec import require_checksums
from flashfsm.events.models import Event, RunConcluded
from flashfsm.events.policy import GracePolicy
from flashfsm.fsm.capacity import RankReason
from flashfsm.fsm.job import VerifyReport, replay, verify
from flashfsm.fsm.rules import RULE_NAMES
from flashfsm.fsm.run import replay_run
from flashfsm.postmortem import explain as ex
from flashfsm.postmortem.explain import timeline
from flashfsm.postmortem.ledger import AttemptLedger, Cause, Ledger, money_text
from flashfsm.render import duration_text
from flashfsm.views import (
    RunView,
    SweeperView,
    job_view,
    last_job_stream,
    run_label,
    run_view,
    stream_kind,
    sweeper_view,
)

SWEEPER_VERIFY = (
    "the sweeper's stream folds cleanly; its deletes rest on health readings it does not "
    "record, so there is nothing to re-decide"
)

# --- replay -------------------------------------------------------------------------------


def replay_command(
    source: SourceArgument,
    store: StoreOption = None,
    verify_: Annotated[
        bool, typer.Option("--verify", help="Re-decide the log with today's rules.")
    ] = False,
    full: Annotated[bool, typer.Option("--full", help="Show every event.")] = False,
    as_json: JsonOption = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="With --verify: every event must carry a checksum (none unchecked)."
        ),
    ] = False,
) -> None:
    """Replay a log: a job's timeline, timers and verdict; a run's attempts, result and last
    job; a sweeper's idle timers (exit code by failure kind)."""
    if strict and not verify_:
        raise fail("--strict goes with --verify")
    with require_checksums(strict):
        _replay(source, store, verify_=verify_, full=full, as_json=as_json)


def _replay(source: str, store: str | None, *, verify_: bool, full: bool, as_json: bool) -> None:
    src = open_source(source, store)
    kind = stream_kind(src.events)
    if kind == "run":
        raise typer.Exit(_replay_run(src, verify_=verify_, full=full, as_json=as_json))
    if kind == "sweeper":
        raise typer.Exit(_replay_sweeper(src, verify_=verify_, as_json=as_json))
    stream, events = src.name, src.events
    with UsageErrors():
        state = replay(events)
        report = verify(events) if verify_ else None
    if as_json:
        out: dict[str, Any] = {
            "stream": stream,
            "events": len(events),
            "state": state.state,
            "timeline": [row_json(r) for r in timeline(events)],
            "verdict": verdict_json(state.verdict),
        }
        if report is not None:
            out["verify"] = _verify_json(report)
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        print_timeline(stream, events, full=full)
        if report is not None:
            colour = "green" if report.ok else "red"
            say("  verify: ", (str(report), colour))
    if report is not None and not report.ok:
        raise typer.Exit(EXIT_DISAGREES)
    raise typer.Exit(exit_for(state.verdict))


def _verify_json(report: VerifyReport) -> dict[str, Any]:
    d = report.first_disagreement
    return {
        "ok": report.ok,
        "seq": None if d is None else d.seq,
        "reason": None if d is None else d.reason,
        "text": str(report),
    }


def _replay_run(src: Source, *, verify_: bool, full: bool, as_json: bool) -> int:
    """A run: its attempts and result, then its last attempt's job timeline."""
    with UsageErrors():
        run = replay_run(src.events)
        job_stream = last_job_stream(run)
        job_events = src.load(job_stream) if job_stream is not None else []
        job_state = replay(job_events) if job_events else None
        reports: list[tuple[int, str, VerifyReport]] = []
        if verify_:
            for a in run.attempts:
                events = src.load(a.job_stream) if a.job_stream else []
                if a.job_stream and events:
                    reports.append((a.started.attempt, a.job_stream, verify(events)))
    if as_json:
        out: dict[str, Any] = {
            "stream": src.name,
            "kind": "run",
            "events": len(src.events),
            "state": run_label(run),
            "phase": run.state,
            "attempts": [attempt_json(a, run) for a in run.attempts],
            "cancel_requested": run.cancel_requested,
            "result": result_json(run.result),
            "job": None
            if job_state is None
            else {
                "stream": job_stream,
                "events": len(job_events),
                "state": job_state.state,
                "timeline": [row_json(r) for r in timeline(job_events)],
                "verdict": verdict_json(job_state.verdict),
            },
        }
        if verify_:
            out["verify"] = {
                "ok": all(r.ok for _, _, r in reports),
                "streams": [{"attempt": n, "stream": s, **_verify_json(r)} for n, s, r in reports],
            }
        emit_json(out)
    else:
        print_run(src.name, run)
        if job_stream is not None and job_events:
            say(f"run {src.name}: its last attempt's job stream is {job_stream}")
            print_timeline(job_stream, job_events, full=full)
        elif job_stream is not None:
            say(f"  (job stream {job_stream} is empty or missing in {src.where})")
        for n, stream, report in reports:
            colour = "green" if report.ok else "red"
            say(f"  verify attempt {n} ({stream}): ", (str(report), colour))
        if verify_ and not reports:
            say("  verify: no attempt has a job log to re-decide")
    if any(not r.ok for _, _, r in reports):
        return EXIT_DISAGREES
    return run_exit(run.result)


def _replay_sweeper(src: Source, *, verify_: bool, as_json: bool) -> int:
    """A sweeper: each timer event with the idle time it ended, then the timers running."""
    with UsageErrors():
        view = sweeper_view(src.events)
    if as_json:
        out: dict[str, Any] = {
            "stream": src.name,
            "kind": "sweeper",
            "events": view.events,
            "state": sweeper_state(view),
            "summary": view.summary,
            "timeline": [sweeper_row_json(r) for r in view.rows],
            "timers": [period_json(p, view) for p in view.timers],
            "reaped": [period_json(p, view) for p in view.reaped],
            "cleared": [period_json(p, view) for p in view.cleared],
            "verdict": None,
        }
        if verify_:
            out["verify"] = {"ok": True, "seq": None, "reason": None, "text": SWEEPER_VERIFY}
        emit_json(out)
        return 0
    title = f"{src.name}: {view.events} events (sweeper: {view.summary})"
    table = Table(title=title, title_justify="left", expand=False)
    table.add_column("t+s", justify="right")
    table.add_column("seq", justify="right")
    table.add_column("event")
    table.add_column("idle", justify="right")
    table.add_column("timers", justify="right")
    for row in view.rows:
        idle = "" if row.idle_s is None else duration_text(row.idle_s)
        table.add_row(
            f"{row.offset:.0f}", str(row.seq), sweeper_row_text(row), idle, str(row.running)
        )
    console.print(table)
    _print_timers(view)
    if verify_:
        say("  verify: ", (SWEEPER_VERIFY, "green"))
    return 0


def _print_timers(view: SweeperView, prefix: str = "  ") -> None:
    if not view.timers:
        say(f"{prefix}no idle timer running")
    for p in view.timers:
        say(f"{prefix}{period_text(p, view)}")


# --- explain, why-not, whatif -------------------------------------------------------------


def explain_command(
    source: SourceArgument,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Why the verdict fired: the rule, its why, its evidence and the numbers behind it
    (a run: its last job's; a sweeper: what it reaped and what it is timing)."""
    src = open_source(source, store)
    with UsageErrors():
        view = explain_view(src, store_opener(store))
        if as_json:
            data = explain_json(view)  # (a run's ledger that could not be priced: exit 1)
        else:
            print_explain_view(view)  # (… said after the rest)
    if as_json:
        emit_json(data)
    if view.kind == "sweeper":
        raise typer.Exit(0)
    told = view.told
    raise typer.Exit(run_exit(told) if isinstance(told, RunConcluded) else exit_for(told))


def explain_json(view: ExplainView) -> dict[str, Any]:
    """`explain --json`: the explanation `explain` prints (`flashfsm.display.explain`), as
    data; raises what pricing a run's ledger raised."""
    if view.sweeper is not None:
        return _explain_sweeper_json(view.name, view.sweeper)
    walk = [rank_json(r) for r in view.walk]
    cost = view.cost()
    if view.run is not None and view.stream is None:
        run = view.run
        return {
            "stream": view.name,
            "kind": "run",
            "cost": None if cost is None else failure_cost_json(cost),
            "state": run_label(run),
            "job_stream": None,
            "attempts": [attempt_json(a, run) for a in run.attempts],
            "result": result_json(run.result),
            "walk": walk,
        }
    assert view.stream is not None and view.explanation is not None
    run_json = (
        {
            "walk": walk,
            "cost": None if cost is None else failure_cost_json(cost),
            "failed_attempts": [j.json() for j in view.failed],
        }
        if view.kind == "run"
        else {}
    )
    return {**run_json, **_explanation_json(view.stream, view.explanation)}


def _explanation_json(stream: str, e: ex.Explanation) -> dict[str, Any]:
    """A job's explanation as `explain --json` prints it (but a run's walk, cost and
    failed attempts)."""
    return {
        "stream": stream,
        "state": e.state,
        "verdict": verdict_json(e.verdict),
        "rule": e.rule,
        "step": e.step,
        "why": e.why,
        "at": e.at,
        "offset_s": e.offset,
        "evidence": [
            {
                "seq": i.seq,
                "at": i.at,
                "offset_s": i.offset,
                "kind": i.kind,
                "summary": i.summary,
            }
            for i in e.evidence
        ],
        "numbers": [measure_json(m) for m in e.measures],
        "facts": list(e.facts),
        "timers": [timer_json(t) for t in e.timers],
        "worker": worker_json(e.worker),
        "worker_log": worker_log_json(e.worker_log),
    }


def lane_cost_json(a: AttemptLedger) -> dict[str, Any]:
    """A timeline lane's cost strip as data: what its attempt billed (as `cost` says it)."""
    return {
        "billed_s": a.billed_s,
        "money": a.money(),
        "waste_money": a.waste_money,
        "open_since": a.open_since,
        "causes": {c.value: a.billed_seconds(c) for c in Cause if a.billed_seconds(c)},
    }


def failure_cost_json(led: Ledger) -> dict[str, Any]:
    """What a run cost, and what its failed attempts threw away."""
    return {
        "billed_s": led.billed_s,
        "money": led.money(),
        "waste_s": led.waste_s,
        "waste_money": led.waste_money,
        "failures": [
            {
                "attempt": a.attempt,
                "verdict": a.label,
                "billed_s": a.billed_s,
                "money": a.money(),
                "waste_s": a.waste_s,
                "waste_money": a.waste_money,
            }
            for a in led.failed
        ],
    }


def rank_json(r: RankReason) -> dict[str, Any]:
    """One candidate's place in a walk, and why."""
    return {
        "place": r.place,
        "candidate": r.candidate,
        "provider": r.provider,
        "gpu_class": r.gpu_class,
        "price_per_hour": r.price_per_hour,
        "starved": r.starved,
        "reason": r.reason,
    }


def _explain_sweeper_json(stream: str, view: SweeperView) -> dict[str, Any]:
    """What a sweeper did, as data: the endpoints it reaped, the timers it cleared and those
    running."""
    return {
        "stream": stream,
        "kind": "sweeper",
        "state": sweeper_state(view),
        "summary": view.summary,
        "at": view.last_at,
        "offset_s": view.last_at - view.start,
        "reaped": [period_json(p, view) for p in view.reaped],
        "cleared": [period_json(p, view) for p in view.cleared],
        "timers": [period_json(p, view) for p in view.timers],
    }


def why_not_command(
    source: SourceArgument,
    rule: Annotated[str, typer.Argument(metavar="RULE", help=f"One of: {', '.join(RULE_NAMES)}.")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Why RULE did not fire at the verdict (or by the end of the log), with its numbers."""
    if rule not in RULE_NAMES:
        raise fail(f"unknown rule {rule!r}; the rules are: {', '.join(RULE_NAMES)}")
    src = open_source(source, store)
    stream, events = job_source(src, quiet=as_json)
    with UsageErrors():
        w = ex.why_not_report(events, rule)
    if as_json:
        emit_json(
            {
                "stream": stream,
                "rule": w.rule,
                "fired": w.fired,
                "held": w.held,
                "verdict_rule": w.verdict_rule,
                "at": w.at,
                "offset_s": w.offset,
                "numbers": [measure_json(m) for m in w.measures],
                "facts": list(w.facts),
                "text": w.text,
            }
        )
        return
    say(f"{stream}: {w.text}")


def parse_settings(settings: list[str]) -> dict[str, Any]:
    """`--set name=value` pairs as policy overrides; names are checked against GracePolicy."""
    known = list(GracePolicy.model_fields)
    out: dict[str, Any] = {}
    for item in settings:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise fail(f"--set {item!r}: write NAME=VALUE, e.g. --set queue_grace_s=600")
        if name not in known:
            raise fail(f"--set {name}: unknown policy field; GracePolicy has: {', '.join(known)}")
        value = value.strip()
        out[name] = None if value.lower() in ("none", "null", "") else value
    return out


def whatif_command(
    source: Annotated[
        str | None,
        typer.Argument(
            metavar="SOURCE", help="A stream of the store, or a .jsonl file (not with --all)."
        ),
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set", metavar="NAME=VALUE", help="A policy override NAME=VALUE (repeatable)."
        ),
    ] = None,
    store: StoreOption = None,
    every: Annotated[
        bool,
        typer.Option(
            "--all", help="Replay every recorded job of the store and total what changes."
        ),
    ] = False,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DURATION",
            help="With --all: only jobs whose last event is within DURATION (90s, 15m, 12h, "
            "30d, 2w) of the store's newest event.",
        ),
    ] = None,
    gates: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-if",
            metavar="METRIC>N",
            help="With --all: exit 6 when METRIC>N (or >=, <, <=, ==) holds; repeatable. "
            f"Metrics: {', '.join(ex.CORPUS_METRICS)}.",
        ),
    ] = None,
    price: Annotated[
        float | None,
        typer.Option(
            "--price",
            metavar="USD_PER_HOUR",
            min=0,
            help="With --all: the hourly price of a job no run priced.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Replay the recorded observations under another policy; report the first difference
    (with --all: over every recorded job, the verdicts changed, time and money)."""
    overrides = parse_settings(settings or [])
    if every:
        if source is not None:
            raise fail("whatif --all replays the whole store: give SOURCE or --all, not both")
        parsed = _parsed_gates(gates or [])
        since_s = parse_duration(since) if since is not None else None
        raise typer.Exit(_whatif_all(store, overrides, since_s, parsed, price, as_json=as_json))
    for flag, value in (("--since", since), ("--fail-if", gates), ("--price", price)):
        if value:
            raise fail(f"{flag} goes with --all")
    if source is None:
        raise fail("whatif needs a SOURCE, or --all for every recorded job")
    src = open_source(source, store)
    stream, events = job_source(src, quiet=as_json)
    with UsageErrors():
        w = ex.what_if(events, **overrides)
    if as_json:
        emit_json(_whatif_json(stream, w, overrides))
        return
    colour = {"earlier": "yellow", "different": "yellow", "same": "green"}.get(w.outcome, "cyan")
    say(f"{stream}: ", (w.outcome, colour))
    say(f"  {w.text}")


def _parsed_gates(gates: list[str]) -> list[ex.Gate]:
    """The `--fail-if` gates, parsed (one that does not parse is a usage error)."""
    parsed = []
    for text in gates:
        try:
            parsed.append(ex.parse_gate(text))
        except ValueError as exc:
            raise fail(f"--fail-if {exc}") from None
    return parsed


def _whatif_json(stream: str, w: ex.WhatIf, overrides: dict[str, Any]) -> dict[str, Any]:
    """One job's what-if as `whatif --json` prints it."""
    v = w.verdict
    return {
        "stream": stream,
        "overrides": {k: getattr(w.policy, k) for k in overrides},
        "policy": w.policy.model_dump(),
        "recorded_policy": w.recorded_policy.model_dump(),
        "outcome": w.outcome,
        "recorded": verdict_json(w.recorded),
        "verdict": None
        if v is None
        else {
            "state": v.state.value,
            "ok": v.ok,
            "failure": v.failure,
            "rule": v.rule,
            "detail": v.detail,
            "evidence": list(v.evidence),
        },
        "at": w.at,
        "offset_s": w.offset,
        "after_seq": w.after_seq,
        "instead_of_seq": w.instead_of_seq,
        "end_at": w.end_at,
        "end_offset_s": w.end_offset,
        "timers": [timer_json(t) for t in w.timers],
        "text": w.text,
    }


def corpus_logs(logs: dict[str, list[Event]], price: float | None = None) -> list[ex.JobLog]:
    """Every job log of `logs` as a corpus entry, priced as `cost` prices it: in its run's
    context (its candidate's price, the run's cancel and teardown, the deploy's idle
    timeout), else at `price` (None: unknown); the sweeper's reaps and the store's newest
    event apply as in `cost` (`flashfsm.postmortem.explain.corpus`)."""
    with UsageErrors():  # a corrupt run is one line, exit 1
        return ex.corpus(logs, price)


def _whatif_all(
    store: str | None,
    overrides: dict[str, Any],
    since_s: float | None,
    gates: list[ex.Gate],
    price: float | None,
    *,
    as_json: bool,
) -> int:
    url = store_url(store, reading=True)
    with UsageErrors():
        ex.policy_with(GracePolicy(), **overrides)  # a bad value is one line, before any work
    read = read_all_streams(url, since_s)
    with UsageErrors():
        result = ex.what_if_corpus(corpus_logs(read.logs, price), **overrides)
    metrics = result.metrics()
    crossed = [g for g in gates if g.crossed(result)]
    if as_json:
        emit_json(
            {
                "store": display_url(url),
                "damaged": read.damaged_json(),
                "overrides": dict(overrides),
                "jobs": result.jobs,
                "open": result.open,
                "priced": result.priced,
                "metrics": metrics,
                "shifts": [
                    {
                        "from": s.before,
                        "to": s.after,
                        "count": s.count,
                        "examples": list(s.examples),
                        "delta_s": s.delta_s,
                        "saved": s.saved,
                        "wasted": s.wasted,
                    }
                    for s in result.shifts
                ],
                "changes": [
                    {
                        "stream": c.stream,
                        "outcome": c.outcome,
                        "from": c.before,
                        "to": c.after,
                        "delta_s": c.delta_s,
                        "money_before": c.money_before,
                        "money_after": c.money_after,
                        "money_after_at_least": c.after == "undecided",
                        "billed_before_s": c.billed_before_s,
                        "billed_after_s": c.billed_after_s,
                        "saved": c.saved,
                        "wasted": c.wasted,
                    }
                    for c in result.changes
                ],
                "gates": [
                    {"gate": g.text, "value": metrics[g.metric], "crossed": g in crossed}
                    for g in gates
                ],
            }
        )
    else:
        _print_corpus(display_url(url), result, metrics)
        for g in gates:
            value = f"{metrics[g.metric]:g}"
            if g in crossed:
                say("gate ", (g.text, "bold red"), f": crossed ({g.metric} = {value})")
            else:
                say(f"gate {g.text}: ok ({g.metric} = {value})")
        read.flag()
    # A crossed gate wins over the damaged streams (still flagged): a CI gate routes on 6.
    return EXIT_GATE if crossed else read.exit_code()


def _print_corpus(where: str, result: ex.CorpusWhatIf, m: dict[str, float]) -> None:
    changes = ", ".join(f"{k}={v}" for k, v in result.overrides.items()) or "the recorded policy"
    say(f"whatif --all over {result.jobs} recorded job(s) of {where} with {changes}")
    if result.open:
        say(f"  ({result.open} job log(s) with no verdict yet skipped)")
    say(
        f"  changed: {m['changed']:g} job(s): {m['verdict_changed']:g} verdict(s) moved, "
        f"{m['success_lost']:g} success(es) lost, {m['undecided']:g} undecided by the "
        "end of their observations"
    )
    say(
        f"  time to verdict: {duration_text(m['gained_s'])} gained, "
        f"{duration_text(m['lost_s'])} lost"
    )
    priced = "" if result.priced else " (jobs without a price not counted)"
    say(
        f"  money: saved {money_text(m['saved'])}, wasted {money_text(m['wasted'])} by the "
        f"changed verdicts (signed: a saving below 0 is money spent more){priced}"
    )
    if m["success_lost"]:
        say(
            f"  each lost success takes a new attempt, which pays its cold start again: "
            f"{duration_text(m['cold_start_again_s'])}, {money_text(m['cold_start_again'])} "
            "at least"
        )
    if not result.shifts:
        return
    table = Table(expand=False)
    table.add_column("from → to", overflow="fold")
    table.add_column("jobs", justify="right")
    table.add_column("Δ time", justify="right")
    table.add_column("saved", justify="right")
    table.add_column("wasted", justify="right")
    for s in result.shifts:
        sign = "-" if s.delta_s < 0 else "+" if s.delta_s > 0 else ""
        table.add_row(
            f"{s.before} → {s.after}",
            str(s.count),
            f"{sign}{duration_text(abs(s.delta_s))}",
            "?" if s.saved is None else money_text(s.saved),
            "?" if s.wasted is None else money_text(s.wasted),
        )
    console.print(table)
    for s in result.shifts:
        say(f"  {s.before} → {s.after}: e.g. {', '.join(s.examples)}")


# --- the picture --------------------------------------------------------------------------


def timeline_command(
    source: Annotated[
        str,
        typer.Argument(metavar="SOURCE", help="A job, run or sweeper stream, or a .jsonl file."),
    ],
    out: Annotated[
        Path, typer.Option("--out", metavar="FILE", help="FILE.svg or FILE.html to write.")
    ],
    store: StoreOption = None,
    title: Annotated[str | None, typer.Option(metavar="TEXT", help="The picture's title.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Draw a run (attempts as lanes), a job log, or a sweeper's idle timers (endpoints as
    lanes) as a self-contained SVG or HTML file."""
    suffix = out.suffix.lower()
    if suffix not in (".svg", ".html", ".htm"):
        raise fail(f"--out {out}: the file must end in .svg or .html")
    src = open_source(source, store)
    kind = stream_kind(src.events)
    with UsageErrors():
        cost = None if kind == "sweeper" else source_ledger(src, None, store_opener(store))
        pic = render.picture(src.events, src.load, title=title, cost=cost)
        document = render.svg(pic) if suffix == ".svg" else render.html(pic)
        summary = sweeper_view(src.events).summary if kind == "sweeper" else None
    try:
        out.write_text(document, encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot write {out}: {exc}") from None
    if as_json:
        emit_json(
            {
                "out": str(out),
                "format": "svg" if suffix == ".svg" else "html",
                "title": pic.title,
                "verdict": pic.verdict,
                "ok": pic.ok,
                "duration_s": pic.duration,
                "lanes": [
                    {
                        "key": lane.key,
                        "title": lane.title,
                        "subtitle": lane.subtitle,
                        "stream": lane.stream,
                        "verdict": lane.verdict,
                        "rule": lane.rule,
                        "ok": lane.ok,
                        "spans": [
                            {"state": sp.state, "start_s": sp.start, "end_s": sp.end}
                            for sp in lane.spans
                        ],
                        "marks": [
                            {"at_s": m.at, "kind": m.kind, "label": m.label} for m in lane.marks
                        ],
                        "worker": worker_json(lane.worker),
                        "worker_log": worker_log_json(lane.worker_log),
                        "cost": None if lane.cost is None else lane_cost_json(lane.cost),
                    }
                    for lane in pic.lanes
                ],
            }
        )
        return
    verdict = summary or pic.verdict or "no verdict yet"
    say(f"wrote {out}: {len(pic.lanes)} lane(s), {verdict}")


# --- the live view ------------------------------------------------------------------------


def watch_command(
    stream: Annotated[
        str, typer.Argument(metavar="STREAM", help="A job, run or sweeper stream of the store.")
    ],
    store: StoreOption = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Keep printing as events land, until a verdict; wait for a stream that is "
            "not there yet.",
        ),
    ] = False,
    read_only: Annotated[
        bool,
        typer.Option(
            "--read-only",
            help="Only read the log: never write to it or call RunPod (what watch does today).",
        ),
    ] = False,
    as_json: JsonOption = False,
    now: Annotated[
        float | None,
        typer.Option(
            metavar="EPOCH_S",
            help="The wall-clock time to view an open log at (default: now); a finished log "
            "is viewed at its last event.",
        ),
    ] = None,
    poll_s: Annotated[
        float,
        typer.Option(metavar="SECONDS", min=0.001, help="How often --follow looks for events."),
    ] = 0.5,
) -> None:
    """A live view of a job or run (state, time in state, time left on the next timer), or
    of a sweeper (its idle timers running)."""
    url = store_url(store, reading=True)
    clock: Callable[[], float] = (lambda: now) if now is not None else time.time  # type: ignore[assignment]
    opened = open_reader(url)  # a missing store is an error, even to --follow
    try:
        with UsageErrors():
            events = opened.read(stream)
        if not events and not follow:
            hint = " (watch reads a stream of a store: --store jsonl:///DIR)"
            raise fail(
                f"stream {stream!r} is empty or missing in {display_url(url)}"
                + (hint if is_file_source(stream) else "")
            )
        if not events:
            say(
                f"waiting for stream {stream} to appear in {display_url(url)} (Ctrl-C stops)",
                err=True,
            )
            try:
                while not events:
                    time.sleep(poll_s)
                    with UsageErrors():
                        events = opened.read(stream)
            except KeyboardInterrupt:
                raise typer.Exit(EXIT_NO_VERDICT) from None
        watch = {"run": _watch_run, "sweeper": _watch_sweeper}.get(stream_kind(events), _watch_job)
        code = watch(opened, stream, events, clock, follow, as_json, poll_s)
    finally:
        opened.close()
    raise typer.Exit(code)


def _watch_job(
    opened: Any,
    stream: str,
    events: list[Event],
    clock: Callable[[], float],
    follow: bool,
    as_json: bool,
    poll_s: float,
) -> int:
    with UsageErrors():
        view = job_view(events, clock())
    if as_json:
        sys.stdout.write(json.dumps(view_json(view)) + "\n")
    else:
        print_view(view)
    if not follow or view.verdict is not None:
        return exit_for(view.verdict)
    try:
        for event in opened.follow(stream, after=events[-1].seq, poll_s=poll_s):
            events.append(event)
            with UsageErrors():
                view = job_view(events, clock())
            if as_json:
                sys.stdout.write(json.dumps(view_json(view)) + "\n")
                sys.stdout.flush()
            else:
                rows = timeline(events)
                say(f"t+{ex.secs(rows[-1].offset)} s seq {event.seq} {rows[-1].summary}")
                print_view(view, prefix="  ")
            if view.verdict is not None:
                break
    except KeyboardInterrupt:
        return exit_for(None)
    return exit_for(view.verdict)


def _watch_run(
    opened: Any,
    stream: str,
    events: list[Event],
    clock: Callable[[], float],
    follow: bool,
    as_json: bool,
    poll_s: float,
) -> int:
    seen: dict[str, int] = {}

    def load(name: str) -> list[Event]:
        got = opened.read(name)
        seen[name] = len(got)
        return got

    def show(rv: RunView) -> None:
        if as_json:
            sys.stdout.write(json.dumps(run_view_json(rv)) + "\n")
            sys.stdout.flush()
        else:
            print_run_view(rv)

    with UsageErrors():
        rv = run_view(stream, events, load, clock())
    show(rv)
    if not follow:
        return run_exit(rv.run.result)
    last = (len(events), dict(seen))
    try:
        while rv.run.result is None:
            time.sleep(poll_s)
            with UsageErrors():
                events = opened.read(stream)
                rv = run_view(stream, events, load, clock())
            if (len(events), dict(seen)) != last:
                last = (len(events), dict(seen))
                show(rv)
    except KeyboardInterrupt:
        return run_exit(None)
    return run_exit(rv.run.result)


def _watch_sweeper(
    opened: Any,
    stream: str,
    events: list[Event],
    clock: Callable[[], float],
    follow: bool,
    as_json: bool,
    poll_s: float,
) -> int:
    """A sweeper has no verdict: --follow prints each new event until interrupted (exit 0)."""

    def show(view: SweeperView) -> None:
        if as_json:
            sys.stdout.write(json.dumps(_sweeper_view_json(view)) + "\n")
            sys.stdout.flush()
            return
        quiet = f", last event {ex.secs(view.now - view.last_at)} s ago"
        say(
            f"sweeper {stream}: {len(view.timers)} idle timer(s) running, "
            f"{len(view.reaped)} reaped, {len(view.cleared)} cleared{quiet}"
        )
        for p in view.timers:
            say(f"  {period_text(p, view)}")

    with UsageErrors():
        view = sweeper_view(events, clock())
    show(view)
    if not follow:
        return 0
    try:
        for event in opened.follow(stream, after=events[-1].seq, poll_s=poll_s):
            events.append(event)
            with UsageErrors():
                view = sweeper_view(events, clock())
            if not as_json:
                row = view.rows[-1]
                say(f"t+{ex.secs(row.offset)} s seq {row.seq} {sweeper_row_text(row)}")
            show(view)
    except KeyboardInterrupt:
        return 0
    return 0


def _sweeper_view_json(view: SweeperView) -> dict[str, Any]:
    return {
        "stream": view.stream,
        "kind": "sweeper",
        "state": sweeper_state(view),
        "now": view.now,
        "last_at": view.last_at,
        "quiet_s": view.now - view.last_at,
        "events": view.events,
        "reaped": len(view.reaped),
        "cleared": len(view.cleared),
        "timers": [period_json(p, view) for p in view.timers],
    }
