"""Every name the library makes: RunPod endpoints, the streams of the event log, and run ids
made from an orchestrator's ids that survive its retries (`stable_run_id`)."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from flashfsm.events.models import NAME_CAP

RUN_SLUG_CAP = 40  # characters of the run id kept in an endpoint name


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def endpoint_name(run_id: str, gpu_class: str, seed: int, attempt: int = 0) -> str:
    """The attempt's endpoint name: `flash-<run>-<gpu>-s<seed>`, plus `-r<attempt>` after 0.

    Each attempt gets a fresh endpoint, so a retry never lands back on the host that
    failed. A long run id is cut and given a hash, keeping names short and distinct.
    """
    run = _slug(run_id)
    if len(run) > RUN_SLUG_CAP:
        digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
        run = f"{run[: RUN_SLUG_CAP - 9].rstrip('-')}-{digest}"
    name = f"flash-{run}-{_slug(gpu_class)}-s{int(seed)}"
    return f"{name}-r{int(attempt)}" if attempt else name


# --- streams --------------------------------------------------------------------------------
# Every stream the library writes is named here. Stream names must fit an event's `stream`
# field (`STREAM_CAP` characters).

#: The longest stream name a store takes: an event's `stream` field holds at most this many
#: characters (`flashfsm.events.models.NAME_CAP`).
STREAM_CAP = NAME_CAP


#: Unicode categories no name holds: control characters (C0, DEL, C1: a line feed, an
#: escape), format characters (bidirectional overrides, zero-width ones), surrogates, and
#: the line and paragraph separators. Each breaks a log line, a terminal or a URL, or shows
#: a name other than the one stored.
CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
#: How much of a refused name its error shows (escaped).
SHOWN_CHARS = 60


def control_character(text: str) -> str | None:
    """The first character of `text` that no name may hold (`CONTROL_CATEGORIES`), or None."""
    if text.isprintable():  # (fast: every refused character is unprintable)
        return None
    return next((c for c in text if unicodedata.category(c) in CONTROL_CATEGORIES), None)


def escaped(text: str) -> str:
    """`text` as an error shows it: quoted, every unprintable character escaped, cut at
    `SHOWN_CHARS` characters (never the raw characters a name was refused for)."""
    shown = repr(text[:SHOWN_CHARS])
    return f"{shown}…" if len(text) > SHOWN_CHARS else shown


def character_name(char: str) -> str:
    """One character as an error names it: its code point and its escaped form."""
    return f"U+{ord(char):04X} {char!r}"


def check_plain(value: str, what: str) -> str:
    """`value`, or a one-line `ValueError` naming `what`, the value (escaped) and the first
    control character it holds (`control_character`)."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {type(value).__name__}")
    bad = control_character(value)
    if bad is not None:
        raise ValueError(
            f"{what} {escaped(value)} holds a control character ({character_name(bad)})"
        )
    return value


def check_stream(name: str, made_from: str = "") -> str:
    """`name`, or a one-line `ValueError`: a control character in it (`check_plain`), or
    longer than `STREAM_CAP` (`made_from`: what the name was made from, for the message).

    Every entry that names a stream checks its name here before anything is opened or
    recorded (`hand_off_job`, `flashfsm runs add`, `supervise_run`, `submit_run`,
    `poll_job`, `JobSpec`, the sweeper), so no stream is created with a name a log line,
    a terminal or a URL would break."""
    if not isinstance(name, str):
        raise ValueError(f"a stream name must be a string, not {type(name).__name__}")
    if made_from and (bad := control_character(name)) is not None:
        raise ValueError(
            f"{made_from} makes the stream name {escaped(name)}, which holds a control "
            f"character ({character_name(bad)})"
        )
    check_plain(name, "stream name")
    if len(name) > STREAM_CAP:
        source = f"{made_from} makes " if made_from else ""
        raise ValueError(
            f"{source}a stream name of {len(name)} characters, over the store's limit of "
            f"{STREAM_CAP}"
        )
    return name


def job_stream(job_id: str) -> str:
    """The stream `poll_job` and the `Supervisor` use for a job when none is given."""
    return f"job-{job_id}"


def attempt_stream(run_id: str, attempt: int, seed: int | None = None) -> str:
    """The job stream of a run's attempt: `job-<run>-s<seed>-a<attempt>` (no `-s` part
    for a run without a seed)."""
    seeded = "" if seed is None else f"-s{int(seed)}"
    return f"job-{run_id}{seeded}-a{int(attempt)}"


def run_stream(run_id: str, seed: int | None = None, attempt: int | None = None) -> str:
    """A run's stream: `run-<run>`, `run-<run>-s<seed>` for a seeded run, and
    `run-<run>-s<seed>-a<attempt>` for the one-attempt run `submit_run` records."""
    name = f"run-{run_id}"
    if seed is not None:
        name += f"-s{int(seed)}"
    if attempt is not None:
        name += f"-a{int(attempt)}"
    return name


def sweeper_stream(account: int | None = None) -> str:
    """The idle sweeper's stream: one per account of a key pool (`sweeper-<index>`, never
    the key), or `sweeper` for a single account."""
    return "sweeper" if account is None else f"sweeper-{int(account)}"


# --- run ids -----------------------------------------------------------------------------------
# A run is resumed by calling again on its stream, and its stream is named from its run id: a
# run id an orchestrator's retry keeps is what makes a retried worker resume rather than deploy
# and submit again. `stable_run_id` makes one from the ids that survive a retry.

#: The longest run id (`RunSpec.run_id`'s limit): its streams, with a seed and an attempt, and
#: its endpoint names (`RUN_SLUG_CAP`) stay within their caps.
RUN_ID_CAP = 100
#: Hex digits of the hash that ends every run id `stable_run_id` makes.
RUN_ID_HASH = 12
#: The longest id value `stable_run_id` takes (Airflow's ids are at most 250 characters).
ID_VALUE_CAP = 1000

_PART = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True)
class OrchestratorIds:
    """An orchestrator's ids, for `stable_run_id`: `stable`, the ids a retry keeps (in the
    run id's order), `required` of them; `changing`, ids a retry changes, each with why."""

    stable: tuple[str, ...]
    required: frozenset[str]
    changing: Mapping[str, str]


#: Ids that count tries, refused for every orchestrator: a retry changes them.
TRY_COUNTERS: Mapping[str, str] = {
    name: "it counts tries, so a retry changes it"
    for name in ("try_number", "attempt", "attempt_number", "run_count", "retry_count")
}

#: Which ids survive a retry, per orchestrator (docs/api.md has the table and each call).
ORCHESTRATORS: Mapping[str, OrchestratorIds] = {
    "airflow": OrchestratorIds(
        ("dag_id", "run_id", "task_id", "map_index"),
        frozenset({"dag_id", "run_id", "task_id", "map_index"}),
        {
            name: "an Airflow 3 task instance's id is a new UUID each try"
            for name in ("id", "ti_id", "task_instance_id")
        },
    ),
    "prefect": OrchestratorIds(
        ("flow_run_id",),
        frozenset({"flow_run_id"}),
        {
            "task_run_id": "a flow run retried or restarted after a crash runs its tasks "
            "again as new task runs (pass flow_run_id=flow_run.id)"
        },
    ),
    "dagster": OrchestratorIds(
        ("root_run_id", "step_key"),
        frozenset({"root_run_id"}),
        {
            "run_id": "a re-execution or run retry is a new run with a new run_id (pass "
            "root_run_id=context.run.root_run_id or context.run_id)",
            "parent_run_id": "it names the run before this one: each re-execution changes it",
        },
    ),
    "dbos": OrchestratorIds(("workflow_id",), frozenset({"workflow_id"}), {}),
    "temporal": OrchestratorIds(
        ("workflow_id", "activity_id"),
        frozenset({"workflow_id"}),
        {
            name: "a workflow retry, continue-as-new, reset or cron run gets a new run id "
            "(pass workflow_id)"
            for name in ("run_id", "workflow_run_id")
        },
    ),
}


def stable_run_id(orchestrator: str, /, *, name: str | None = None, **ids: str | int) -> str:
    """A run id made from the ids of `orchestrator` that survive its retries: the same ids
    always make the same run id, so a retried worker calling `supervise_run` again resumes
    the run's stream instead of starting a second run (a second deploy and submit).

    `orchestrator` is one of `ORCHESTRATORS` ("airflow", "prefect", "dagster", "dbos",
    "temporal"); `ids` are its stable ids by name (`ORCHESTRATORS[...].stable`), and `name`
    tells apart the runs one piece of orchestrated work supervises (say "sft", "eval").
    The id reads `<orchestrator>.<id>.<id>….<name>.<hash>`: each value with the characters a
    run id cannot hold made `-`, cut to fit `RUN_ID_CAP`, and ended by a hash of the exact
    values, so distinct ids never meet in one run id. It is always a valid `RunSpec.run_id`.

    A `ValueError` refuses an id a retry changes (a try number, a task run's id, an attempt:
    `TRY_COUNTERS` and the orchestrator's `changing`, with what to pass instead), an id the
    orchestrator does not have, a missing required one, and an empty, over-long
    (`ID_VALUE_CAP`) or non-text value.
    """
    known = ORCHESTRATORS.get(orchestrator)
    if known is None:
        raise ValueError(
            f"unknown orchestrator {orchestrator!r}: one of {', '.join(sorted(ORCHESTRATORS))}"
        )
    for key in ids:
        why = known.changing.get(key) or TRY_COUNTERS.get(key)
        if why is not None:
            raise ValueError(f"{orchestrator} {key} changes on a retry: {why}")
        if key not in known.stable:
            raise ValueError(
                f"{orchestrator} has no stable id {key!r}: pass {', '.join(known.stable)}"
            )
    missing = sorted(known.required - set(ids))
    if missing:
        raise ValueError(f"{orchestrator} needs {', '.join(missing)}")
    named = [(key, _id_value(key, ids[key])) for key in known.stable if key in ids]
    if name is not None:
        named.append(("name", _id_value("name", name)))
    digest = hashlib.sha256(json.dumps([orchestrator, named]).encode()).hexdigest()
    readable = ".".join([orchestrator, *(_PART.sub("-", value) for _, value in named)])
    room = RUN_ID_CAP - RUN_ID_HASH - 1
    return f"{readable[:room].rstrip('.-_')}.{digest[:RUN_ID_HASH]}"


def _id_value(key: str, value: object) -> str:
    """One id's value as text: a string or an integer (not a bool), not empty, bounded."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"{key} must be a string or an integer, got {type(value).__name__}")
    text = str(value)
    if not text.strip():
        raise ValueError(f"{key} is empty")
    if len(text) > ID_VALUE_CAP:
        raise ValueError(f"{key} is {len(text)} characters: at most {ID_VALUE_CAP}")
    return text
