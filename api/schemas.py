"""Response models of the REST API (the README's "REST API"), used for OpenAPI and output checks."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class SinkTarget(BaseModel):
    running_task: str = Field(description="The running task whose output is this sink's.")
    topic: str = Field(description="The Kafka topic carrying the sink's output.")


class ContainedOut(BaseModel):
    task: str = Field(description="The submitted task that reads a running task containing it.")
    kind: str = Field(description="filter, select or window_aggregate.")
    reads: str = Field(description="The running task it reads (a wider filter, a select it computes from, a shorter "
                       "window it rolls up).")
    residual: dict[str, Any] | None = Field(description="The config the task runs over that output; null when it is "
                                            "the running task itself (an equivalent predicate).")
    finish: dict[str, Any] | None = Field(None, description="For a roll-up with an avg: the config of the select that "
                                          "divides the rolled-up sum by the count (the task runs as that select); "
                                          "null otherwise.")


class SubmitResponse(BaseModel):
    id: str
    name: str
    tasks: dict[str, str] = Field(description="Submitted task id -> running task id.")
    reused: list[str] = Field(description="Submitted task ids served by tasks that were already running; from the "
                              "caller's point of view: for a user, only tasks their own dataflows already used.")
    created: list[str] = Field(description="Submitted task ids that started new running tasks; for a user, every task "
                               "not in reused (some may have been running for another owner).")
    sinks: dict[str, SinkTarget]
    sites: dict[str, str | None] = Field({}, description="Submitted task id -> site of its running task.")
    not_shared: list[dict[str, Any]] = Field([], description="Equivalent tasks not shared for lack of bandwidth, with the link and the numbers.")
    placement: dict[str, dict[str, Any]] = Field({}, description="How each new task was placed (WAN configuration only).")
    weighing: dict[str, Any] | None = Field(None, description="How Algorithm 1's plan, the plan taking every share and the "
                                            "private plan (sharing nothing running) stood on the WAN, which was kept and the "
                                            "criterion that decided (WAN configuration only).")
    duplicate_of: str | None = Field(None, description="A dataflow of the same owner, running already, that this one is "
                                     "identical to (the same sinks writing the same topics; name and task ids do not "
                                     "count); null if none. With ?unique=true such a submit is refused instead (409 "
                                     "DATAFLOW_DUPLICATE).")
    warnings: list[str] = Field([], description="What the submitter should know, in words: a duplicate, or a dataflow "
                                "of the same owner and name writing one of the same topics but computing something else.")
    contained: list[ContainedOut] = Field([], description="Containment shares (docs/containment.md); for a user, only "
                                          "those reading tasks their own dataflows already used.")


class TaskFailureOut(BaseModel):
    task: str = Field(description="The submitted task that failed at run time.")
    running_task: str
    type: str | None = None
    config: dict[str, Any] | None = Field(None, description="The failed task's config as submitted.")
    expression: str | None = Field(None, description="The part of the task's SQL Spark named, when it did.")
    error: str | None = Field(None, description="Spark's error.")
    error_class: str | None = Field(None, description="Spark's error class, e.g. DATETIME_OVERFLOW.")
    batch: int | None = None
    at: float | None = Field(None, description="When it failed, seconds since the epoch.")
    query: str | None = Field(None, description="The Spark query it ran in (admins only).")


class StalledOut(BaseModel):
    tasks: list[str] = Field(description="The submitted tasks whose Spark query is down or restarting.")
    restarts: int = 0
    query: str | None = Field(None, description="Admins only.")
    error: str | None = Field(None, description="The query's error (admins only).")


class DataflowStatus(BaseModel):
    status: str = Field("running", description="running; failed (a task failed at run time and was taken out of "
                        "its query: see failure; remove the dataflow, fix it and submit it again); stalled (its "
                        "Spark query is down or restarting; it resumes from its checkpoint).")
    failure: TaskFailureOut | None = None
    stalled: StalledOut | None = None


class DataflowSummary(DataflowStatus):
    id: str
    name: str
    owner: str | None = None
    submitted_at: str = Field(description="ISO 8601, UTC.")
    tasks: dict[str, str]
    contained: list[ContainedOut] = Field([], description="Containment shares (docs/containment.md).")


class DataflowList(BaseModel):
    dataflows: list[DataflowSummary]


class RemoveResponse(BaseModel):
    id: str
    terminated: list[str] = Field(description="Running task ids stopped; for a user, the removed dataflow's running "
                                  "tasks that none of their other dataflows uses (some may run on for another owner).")


class RunningTaskOut(BaseModel):
    id: str
    type: str
    config: dict[str, Any]
    site: str | None
    fragment: str
    dataflows: list[str]
    signature: str
    schema_: dict[str, str] = Field(alias="schema", description="Output columns -> Spark SQL types.")
    not_shared: list[dict[str, Any]] = Field([], description="Why an equivalent running task was not shared (WAN).")
    equivalents: list[dict[str, Any]] = Field([], description="Equivalent tasks running at other sites (WAN).")

    model_config = ConfigDict(populate_by_name=True)


class RunningStreamOut(BaseModel):
    from_: str = Field(alias="from")
    to: str
    port: str

    model_config = ConfigDict(populate_by_name=True)


class RunningDag(BaseModel):
    id: str
    dataflows: list[str]
    tasks: list[RunningTaskOut]
    streams: list[RunningStreamOut]


class RunningOut(BaseModel):
    dags: list[RunningDag]


class StatsOut(BaseModel):
    submitted_dataflows: int
    submitted_tasks: int
    running_tasks: int
    running_streams: int
    running_dags: int
    fragments: int
    saving_percent: float = Field(description="100 * (submitted - running) / submitted tasks.")
    sharing_histogram: dict[str, int] = Field(description="Number of dataflows using a task -> number of such tasks.")
    sharing: bool = Field(True, description="False when the service runs every dataflow alone (SANA_SHARING=false).")
    containment: bool = Field(True, description="False when only equivalent tasks are shared (SANA_CONTAINMENT=false).")
    containment_shares: dict[str, int] = Field({}, description="Running containment shares per kind: filter, select, "
                                               "window_aggregate, equivalent.")
    wan_configured: bool = Field(False, description="Whether a WAN configuration is set (GET /wan answers 404 without one).")
    change_groups: dict[str, int] = Field({}, description="Group commit since this process started: `groups` deployed "
                                          "and committed, `changes` in them (submits and removals), `largest` group.")


class CostFigures(BaseModel):
    cpu_cores: float = Field(description="Cores of the service's measured CPU (process tree), over the window.")
    kafka_bytes_per_s: float = Field(description="Value bytes per second written to Kafka by sinks and taps.")
    state_bytes: float = Field(description="Bytes of keyed state (Arrow tables of the workers' state).")


class TaskCostOut(BaseModel):
    task: str = Field(description="Running task id.")
    submitted: list[str] = Field([], description="The dataflow's own task ids (as submitted) this running task serves.")
    users: int | None = Field(description="Dataflows using the task; each is charged 1/users of it. "
                              "Null in a user's answer (they learn no sharer counts), as share is.")
    share: float | None
    cpu_cores: float
    kafka_bytes_per_s: float
    state_bytes: float


class DataflowShareOut(BaseModel):
    id: str
    cost: CostFigures = Field(description="This dataflow's shares of the cost of the tasks it uses.")
    alone: CostFigures = Field(description="The full cost of the tasks it uses: what it would cost unshared.")
    saved: CostFigures = Field(description="alone - cost: what sharing saves this dataflow.")
    saved_percent: dict[str, float]
    tasks: list[TaskCostOut]


class DataflowCostOut(DataflowShareOut, DataflowStatus):
    measured: bool = Field(description="False until the runtime has two samples (and always under --dry-run).")
    window_s: float = Field(description="Length of the measurement window, seconds.")


class CostsOut(BaseModel):
    measured: bool
    window_s: float
    service_cpu_cores: float = Field(description="CPU of the service's whole process tree over the window.")
    total: CostFigures = Field(description="Cost of every task some dataflow uses: the dataflows' shares add up to it.")
    unattributed: CostFigures = Field(description="Measured on tasks no dataflow uses (stopping meanwhile).")
    dataflows: dict[str, DataflowShareOut]


class HealthOut(BaseModel):
    status: str = Field(description="ok or degraded: the service's own parts (Redis, Kafka, Spark, the manager)")
    components: dict[str, dict[str, Any]]
    work: dict[str, Any] = Field(default_factory=dict, description="The dataflows' work: how many run, failed or "
                                 "stalled. Never turns the status (a tenant's failure is not the service's).")


class ErrorOut(BaseModel):
    detail: str
    code: str
    culprit: dict[str, Any] = {}


class TopicRecordOut(BaseModel):
    partition: int
    offset: int
    key: str | None = Field(description="The record's key as text (UTF-8), or null.")
    headers: dict[str, str | None] = Field(description="Header name -> value as text; Sana's records carry sana.writer, "
                                           "sana.run, sana.batch and sana.seq.")
    value: Any = Field(description="The value parsed as JSON when it is JSON, else its text; null for a null value.")


class TopicRecordsOut(BaseModel):
    topic: str
    records: list[TopicRecordOut] = Field(description="In offset order within each partition; replayed copies left "
                                          "out unless raw (one record per sana.writer, sana.batch, sana.seq).")
    next: str = Field(description="Where to continue: pass it back as ?cursor= to read what follows, nothing twice.")
