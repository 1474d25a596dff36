"""`stable_run_id`: a run id from the ids an orchestrator's retry keeps — deterministic,
readable where it can be, always a valid run id whose names fit their caps, and refusing the
ids a retry changes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashfsm import RunSpec, stable_run_id
from flashfsm.naming import (
    ID_VALUE_CAP,
    ORCHESTRATORS,
    RUN_ID_CAP,
    RUN_SLUG_CAP,
    STREAM_CAP,
    TRY_COUNTERS,
    attempt_stream,
    endpoint_name,
    run_stream,
)

AIRFLOW = {
    "dag_id": "train",
    "run_id": "scheduled__2024-01-01T00:00:00+00:00",
    "task_id": "fit",
    "map_index": -1,
}
values = st.one_of(
    st.text(min_size=1, max_size=ID_VALUE_CAP).filter(str.strip),
    st.integers(min_value=-(10**30), max_value=10**30),
)
airflow_ids = st.fixed_dictionaries({key: values for key in AIRFLOW})


def test_the_same_ids_make_the_same_readable_run_id():
    run_id = stable_run_id("airflow", **AIRFLOW)
    assert run_id == stable_run_id("airflow", **dict(reversed(AIRFLOW.items())))
    assert run_id.startswith("airflow.train.scheduled__2024-01-01T00-00-00-00-00.fit.-1.")
    assert stable_run_id("airflow", **{**AIRFLOW, "map_index": 3}) == stable_run_id(
        "airflow", **{**AIRFLOW, "map_index": "3"}
    )
    flow_run = "0b9e5c3a-1234-4567-89ab-0123456789ab"
    assert stable_run_id("prefect", flow_run_id=flow_run, name="sft").startswith(
        f"prefect.{flow_run}.sft."
    )


@given(airflow_ids, st.none() | st.text(min_size=1, max_size=300).filter(str.strip))
def test_any_ids_make_a_valid_run_id_whose_streams_and_endpoint_names_fit_their_caps(ids, name):
    run_id = stable_run_id("airflow", name=name, **ids)
    assert RunSpec(run_id=run_id, gpu_class="H100").run_id == run_id
    assert len(run_id) <= RUN_ID_CAP
    seed, attempt = 2**31 - 1, 99
    for stream in (run_stream(run_id, seed, attempt), attempt_stream(run_id, attempt, seed)):
        assert len(stream) <= STREAM_CAP
    endpoint = endpoint_name(run_id, "H100", seed, attempt)
    assert len(endpoint) <= len(endpoint_name("x" * RUN_SLUG_CAP, "H100", seed, attempt))


@given(airflow_ids, airflow_ids)
def test_distinct_ids_make_distinct_run_ids(one, other):
    same = {k: str(v) for k, v in one.items()} == {k: str(v) for k, v in other.items()}
    assert (stable_run_id("airflow", **one) == stable_run_id("airflow", **other)) is same


def test_ids_that_read_alike_still_make_distinct_run_ids():
    alike = [
        stable_run_id("dagster", root_run_id="a:b"),
        stable_run_id("dagster", root_run_id="a/b"),
        stable_run_id("dagster", root_run_id="a", step_key="b"),
        stable_run_id("dagster", root_run_id="a", name="b"),
        stable_run_id("dagster", root_run_id="x" * 300 + "1"),
        stable_run_id("dagster", root_run_id="x" * 300 + "2"),
    ]
    assert len(set(alike)) == len(alike)


CHANGING = sorted(
    (orchestrator, key)
    for orchestrator, ids in ORCHESTRATORS.items()
    for key in [*ids.changing, *TRY_COUNTERS]
)


@pytest.mark.parametrize(("orchestrator", "key"), CHANGING)
def test_an_id_a_retry_changes_is_refused_saying_so(orchestrator, key):
    ids = {required: "x" for required in ORCHESTRATORS[orchestrator].required}
    with pytest.raises(ValueError, match=f"{orchestrator} {key} changes on a retry"):
        stable_run_id(orchestrator, **ids, **{key: "1"})


def test_what_the_refusals_advise_is_the_id_that_survives():
    advice = r"root_run_id=context\.run\.root_run_id or context\.run_id"
    with pytest.raises(ValueError, match=advice):
        stable_run_id("dagster", run_id="abc")
    with pytest.raises(ValueError, match=r"flow_run_id=flow_run\.id"):
        stable_run_id("prefect", flow_run_id="f", task_run_id="t")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: stable_run_id("luigi", task_id="t"), "unknown orchestrator 'luigi'"),
        (lambda: stable_run_id("dbos", workflow_id="w", step="s"), "no stable id 'step'"),
        (lambda: stable_run_id("airflow", dag_id="d", run_id="r"), "needs map_index, task_id"),
        (lambda: stable_run_id("temporal", workflow_id=" "), "workflow_id is empty"),
        (lambda: stable_run_id("temporal", workflow_id=True), "a string or an integer"),
        (lambda: stable_run_id("dbos", workflow_id="w" * (ID_VALUE_CAP + 1)), "at most 1000"),
        (lambda: stable_run_id("dbos", workflow_id="w", name=""), "name is empty"),
    ],
)
def test_what_is_not_an_id_that_survives_a_retry_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()
