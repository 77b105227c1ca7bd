"""One chaos soak, from an empty run directory to its whole history (``run_soak``).

The order of a run, each step bounded in time:

1. the plan: ``nemesis.schedule`` from the seed, printed and written into ``run.json``;
2. the fakes' process (tests/chaos/fakes.py) and its world: the engineers, the notified
   assignees with their leader;
3. a fresh database (a throw-away PostgreSQL schema, or a SQLite file in the run directory)
   and the cluster on it (tests/chaos/cluster.py); the engineers and the two policies
   created through the API;
4. the load (tests/chaos/load.py) and the nemesis start together and run for the duration;
5. the load stops (triggers in flight finish their tries), every fault still running ends, and
   whatever a fault left is undone (a dead replica started, a paused one continued, a relay
   restored, the peers' fault knobs cleared);
6. the service settles: until no trigger is pending or processing and no execution is
   running, or the settle bound passes;
7. ``final.json`` is read straight from the database and ``calls.jsonl`` from the fakes, then
   everything stops and ``run.json`` gets its end.

``WorldFaults`` is what each planned fault does to the live cluster and fakes. Every process
started here is stopped on the way out, however the run ends (an ``ExitStack`` unwound by
``finally``; bench/chaos.py adds signal handlers and ``atexit``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peewee import fn

from tests.chaos.cluster import (
    AUTO_ASSIGN_LABEL,
    Cluster,
    Fakes,
    Workflow,
    world_users,
)
from tests.chaos.load import Load, LoadConfig
from tests.chaos.nemesis import (
    DB_CUT,
    DB_STALL,
    KILL9,
    PEER_FAULTS,
    POSTGRES_KINDS,
    SIGSTOP,
    SIGTERM_RESTART,
    SQLITE_KINDS,
    SQLITE_LOCK,
    Fault,
    Nemesis,
    schedule,
)
from tests.chaos.staging import Deployment, Target
from tests.databases import postgres_schema, sqlite_url

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
LEASE_S = 12.0
HEARTBEAT_S = 1.0
READ_TIMEOUT_S = 10.0  # integrations.read_timeout, the default
RETRY_BUDGET_S = 1800.0  # transient_retry_budget, the default ("30m")
SETTLE_S = 180.0
PROGRESS_S = 10.0
SERVING_WAIT_S = 30.0  # a rolling deploy waits this long for another replica to serve
PAGE = 500
# The load's rate fits the slots at the slowest peer: three replicas' 18 slots carry 4
# triggers a second while Oncall answers a page in 8 s; one SQLite process's 10 carry half.
SQLITE_RATE = 2.0


def ack_bound(lease_s: float, workflow: Workflow) -> float:
    """How late past its deadline an ACK wait may end: the lease of a replica lost at that
    moment runs out and the sweep finds it (lease + heartbeat); then the resumed step makes
    its three calls one after another, each within a read timeout however slow the peer (the
    issue's load, the card's read list, then the ACK comment or the next page); two polls;
    and a margin for a busy two-core machine."""
    return lease_s + HEARTBEAT_S + 3 * READ_TIMEOUT_S + 2 * workflow.poll_s + 3.0


class WorldFaults:
    """The nemesis's ``FaultActions`` over one cluster and its fakes."""

    def __init__(self, cluster: Cluster, fakes: Fakes, say: Callable[[str], None]):
        self.cluster = cluster
        self.fakes = fakes
        self.say = say
        self._peer_faults: dict[tuple[float, str], int] = {}

    def serving_besides(self, replica: int) -> bool:
        if len(self.cluster.replicas) == 1:
            return True  # a single process: nobody else to keep serving
        return self.cluster.serving_besides(replica)

    def begin(self, fault: Fault) -> dict[str, Any]:
        if fault.kind in PEER_FAULTS:
            return self._peer_begin(fault)
        if fault.kind == SIGTERM_RESTART:
            return self._rolling(fault)
        if fault.kind == SQLITE_LOCK:
            waited = self.cluster.sqlite_lock.begin(backstop_s=fault.duration + 30)
            return {"lock_wait_s": round(waited, 3)}
        replica = self.cluster.replica(fault.replica)
        learned = {"generation": replica.generation}
        if fault.kind == KILL9:
            learned["pid"] = replica.kill9()
        elif fault.kind == SIGSTOP:
            learned["pid"] = replica.sigstop()
        elif fault.kind in (DB_CUT, DB_STALL):
            (replica.relay.cut if fault.kind == DB_CUT else replica.relay.stall)()
            replica.cut = True
        return learned

    def end(self, fault: Fault) -> dict[str, Any]:
        if fault.kind in PEER_FAULTS:
            fault_id = self._peer_faults.pop((fault.at, fault.target), None)
            if fault_id is not None:
                self.fakes.clear_fault(fault_id=fault_id)
            return {}
        if fault.kind == SQLITE_LOCK:
            self.cluster.sqlite_lock.end()
            return {}
        replica = self.cluster.replica(fault.replica)
        if fault.kind == KILL9:
            replica.start()
            return {"restarted_generation": replica.generation,
                    "serving_after_s": round(replica.wait_serving(), 3)}
        if fault.kind == SIGSTOP:
            replica.sigcont()
        elif fault.kind in (DB_CUT, DB_STALL):
            replica.relay.restore()
            replica.cut = False
        return {}

    def _peer_begin(self, fault: Fault) -> dict[str, Any]:
        service = PEER_FAULTS[fault.kind]
        knob: dict[str, Any] = {"service": service,
                                # a backstop: the fake ends it by itself should the runner die
                                "until": time.time() + fault.duration + 30}
        if "status" in fault.detail:
            knob["status"] = fault.detail["status"]
        if "retry_after_s" in fault.detail:
            knob.update(status=429, retry_after=fault.detail["retry_after_s"])
        if "latency_s" in fault.detail:
            knob["latency_ms"] = int(fault.detail["latency_s"] * 1000)
        fault_id = self.fakes.add_fault(**knob)
        self._peer_faults[(fault.at, fault.target)] = fault_id
        return {"fake_fault_id": fault_id}

    def _rolling(self, fault: Fault) -> dict[str, Any]:
        """Each replica in turn: SIGTERM, its exit, a new generation serving, then the next.
        One faults.jsonl line per replica replaced."""
        steps = []
        for index in fault.detail["order"]:
            replica = self.cluster.replica(index)
            deadline = time.monotonic() + SERVING_WAIT_S
            while not self.serving_besides(index) and time.monotonic() < deadline:
                time.sleep(0.2)
            began = time.time()
            code = replica.sigterm()
            generation = replica.generation
            replica.start()
            serving_after = replica.wait_serving()
            steps.append({"t_start": began, "t_end": time.time(), "target": replica.name,
                          "detail": {"exit_code": code, "generation": generation,
                                     "restarted_generation": replica.generation,
                                     "serving_after_s": round(serving_after, 3),
                                     "order": fault.detail["order"]}})
        return {"finished": True, "steps": steps}


# -- the run -----------------------------------------------------------------------------------


def run_soak(seed: int, duration_s: float, engine: str = "postgres", replicas: int = 3,
             out: Path | str = "chaos-run", *, postgres_url: str = DEFAULT_POSTGRES_URL,
             load: LoadConfig | None = None, workflow: Workflow | None = None,
             lease_s: float = LEASE_S, settle_s: float = SETTLE_S,
             kinds: Sequence[str] | None = None, target: Target | None = None,
             say: Callable[[str], None] = print) -> Path:
    """Run one soak into ``out`` (created; it must not hold an earlier run) and return it.
    With ``target``, against that deployment (tests/chaos/staging.py) instead of replicas of
    its own: ``engine``, ``replicas`` and ``lease_s`` are the deployment's then."""
    load = load or LoadConfig()
    workflow = workflow or Workflow()
    run_dir = Path(out).resolve()
    if run_dir.exists() and any(run_dir.iterdir()):
        raise FileExistsError(f"{run_dir} is not empty: give each run a directory of its own")
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    if target is not None:
        engine, replicas = "staging", len(target.replicas)
        kinds = list(kinds or target.kinds())
    kinds = list(kinds or (POSTGRES_KINDS if engine == "postgres" else SQLITE_KINDS))
    plan = schedule(seed, duration_s, kinds, replicas, lease_s=lease_s)
    say(f"seed {seed}: {len(plan)} faults planned over {duration_s:g} s on {replicas} "
        f"{engine} replica(s)")
    for fault in plan:
        say("  " + fault.describe())
    run: dict[str, Any] = {
        "seed": seed, "engine": engine, "replicas": replicas, "duration_s": duration_s,
        "started_at": None, "ended_at": None, "settings": {}, "kinds": kinds,
        "schedule": [fault.to_json() for fault in plan], "lease_seconds": lease_s,
        "ack_bound_s": ack_bound(lease_s, workflow), "assign_label": AUTO_ASSIGN_LABEL,
        "read_timeout_s": READ_TIMEOUT_S, "transient_retry_budget_s": RETRY_BUDGET_S,
        "workflow": {"attempts": workflow.attempts, "ack_timeout_s": workflow.ack_timeout_s,
                     "poll_s": workflow.poll_s, "escalate": workflow.escalate},
        "load": {"rate": load.rate, "notify_share": load.notify_share,
                 "again_share": load.again_share, "threads": load.threads,
                 "attempts": load.attempts, "ack_share": load.ack_share},
    }
    _write_json(run_dir / "run.json", run)

    with ExitStack() as stack:
        fakes = Fakes(run_dir, target.fakes_listen if target else None).start()
        stack.callback(fakes.stop)
        fakes.add_world(world_users())
        since = Since()
        if target is not None:
            database_url = target.database_url
            cluster: Cluster | Deployment = Deployment(target, run_dir, say)
            since = Since.now(database_url)  # the deployment keeps what it had
            run["settings"] = {**fakes.settings, **cluster.shown_settings()}
            run["since"] = {"trigger_id": since.trigger_id,
                            "execution_id": since.execution_id}
            # the fakes' own fixed test credentials, not secrets of the deployment
            say("the deployment must call the fakes: " + ", ".join(
                f"TICKET_DISPATCHER_{k}={v}" for k, v in fakes.settings.items()))
        else:
            if engine == "postgres":
                database_url = stack.enter_context(postgres_schema(postgres_url, "td_chaos_"))
            else:
                (run_dir / "db").mkdir(exist_ok=True)
                database_url = sqlite_url(run_dir / "db")
            cluster = Cluster(engine, database_url, replicas, fakes, run_dir, lease_s=lease_s)
            run["settings"] = {**cluster.shown_settings(), "DATABASE_URL": database_url}
            run["database_urls"] = {r.name: r.database_url for r in cluster.replicas}
        run["transient_retry_budget_s"] = retry_budget_s(run["settings"])
        stack.callback(cluster.stop)
        say("starting the cluster")
        cluster.start()
        run["policies"] = cluster.configure(workflow)

        actions = WorldFaults(cluster, fakes, say)
        nemesis = Nemesis(plan, actions, run_dir / "faults.jsonl", say=say)
        traffic = Load([(r.index, r.url) for r in cluster.replicas], cluster.automation_key,
                       fakes, run_dir, seed, load, say=say)
        stack.callback(traffic.close)
        stack.callback(nemesis.stop, 30.0)
        started = time.time()
        run["started_at"] = started
        _write_json(run_dir / "run.json", run)
        say(f"load and nemesis started; running {duration_s:g} s")
        traffic.start()
        nemesis.start(started)
        _wait_out(started, duration_s, traffic, nemesis, say)

        say("stopping the load and ending every fault")
        traffic.stop()
        nemesis.stop()
        run["restored"] = cluster.restore() + _clear_peer_faults(fakes)
        if run["restored"]:
            say("restored: " + "; ".join(run["restored"]))
        settled, waited = settle(database_url, settle_s, say, since)
        run["settled"], run["settle_s"] = settled, round(waited, 3)
        run["ended_at"] = time.time()
        final = read_final(database_url, since)
        _write_json(run_dir / "final.json", final)
        _wait_calls_answered(fakes, say)
        calls = fakes.calls()
        with (run_dir / "calls.jsonl").open("w") as out_file:
            for call in calls:
                out_file.write(json.dumps(call) + "\n")
        run["load_counts"] = traffic.summary()
        run["faults_applied"] = dict(Counter(f["kind"] for f in nemesis.applied))
        run["faults_skipped"] = nemesis.skipped
        run["generations"] = {r.name: r.generation for r in cluster.replicas}
        _write_json(run_dir / "run.json", run)
        say("stopping the cluster and the fakes")
    return run_dir


def retry_budget_s(settings: dict[str, Any]) -> float:
    """The replicas' ``transient_retry_budget`` in seconds, when the settings the soak gave
    them carry it; else the default (a deployment's own configuration is not known here)."""
    from ticket_dispatcher.timeutil import parse_duration  # the product's reading of it

    text = settings.get("TRANSIENT_RETRY_BUDGET")
    return parse_duration(str(text)).total_seconds() if text else RETRY_BUDGET_S


def _wait_out(started: float, duration_s: float, traffic: Load, nemesis: Nemesis,
              say: Callable[[str], None]) -> None:
    """Until the run's duration has passed, with a line of progress now and then."""
    end = started + duration_s
    while (left := end - time.time()) > 0:
        time.sleep(min(PROGRESS_S, left))
        counts = traffic.summary()
        say(f"  +{time.time() - started:5.0f} s: {counts.get('accepted', 0)} triggers "
            f"accepted, {counts.get('no_answer', 0)} without answer, "
            f"{sum(v for k, v in counts.items() if k.startswith('answered_5'))} 5xx, "
            f"{len(nemesis.applied)} faults done")


def _wait_calls_answered(fakes: Fakes, say: Callable[[str], None], timeout: float = 15.0
                         ) -> None:
    """A call is in the fakes' log once answered: wait (bounded) for the ones in flight."""
    deadline = time.monotonic() + timeout
    while any(fakes.in_flight().values()):
        if time.monotonic() > deadline:
            say(f"calls still in flight after {timeout:g} s: {fakes.in_flight()}")
            return
        time.sleep(0.2)


def _clear_peer_faults(fakes: Fakes) -> list[str]:
    cleared = fakes.clear_fault()
    return [f"{cleared} peer fault knob(s) cleared"] if cleared else []


def _write_json(path: Path, value: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(value, indent=1, default=str))
    partial.replace(path)


# -- the database, read directly -----------------------------------------------------------------


def _open_store(database_url: str):
    from ticket_dispatcher.store import Store  # the product's own reading of its tables

    return Store.for_url(database_url, max_connections=2)


@dataclass(frozen=True)
class Since:
    """The run's rows are the ones above these ids: 0 on a fresh database; on a deployment,
    the newest ids found when the soak started."""

    trigger_id: int = 0
    execution_id: int = 0

    @classmethod
    def now(cls, database_url: str) -> Since:
        from ticket_dispatcher.store.database import unit_of_work
        from ticket_dispatcher.store.models import ExecutionRow, TriggerRow

        store = _open_store(database_url)
        try:
            with unit_of_work(store.db):
                return cls(TriggerRow.select(fn.MAX(TriggerRow.id)).scalar() or 0,
                           ExecutionRow.select(fn.MAX(ExecutionRow.id)).scalar() or 0)
        finally:
            store.close()


def unsettled(store, since: Since = Since()) -> tuple[int, int]:
    """(triggers pending or processing, executions created or executing), of the run's."""
    from ticket_dispatcher.domain.execution import ExecutionStatus, TriggerStatus
    from ticket_dispatcher.store.database import unit_of_work
    from ticket_dispatcher.store.models import ExecutionRow, TriggerRow

    with unit_of_work(store.db):
        triggers = TriggerRow.select().where(
            TriggerRow.id > since.trigger_id,
            TriggerRow.status.in_([TriggerStatus.PENDING.value,
                                   TriggerStatus.PROCESSING.value])).count()
        executions = ExecutionRow.select().where(
            ExecutionRow.id > since.execution_id,
            ExecutionRow.status.in_([ExecutionStatus.CREATED.value,
                                     ExecutionStatus.EXECUTING.value])).count()
    return triggers, executions


def settle(database_url: str, timeout: float, say: Callable[[str], None],
           since: Since = Since()) -> tuple[bool, float]:
    """Wait until nothing is left to do (bounded); whether it got there, and how long."""
    began = time.monotonic()
    store = _open_store(database_url)
    last = None
    try:
        while True:
            try:
                left = unsettled(store, since)
            except Exception as exc:  # noqa: BLE001 (a moment of contention: look again)
                left = (-1, -1)
                say(f"settle: could not read the database: {exc}")
            if left == (0, 0):
                waited = time.monotonic() - began
                say(f"settled after {waited:.1f} s")
                return True, waited
            if left != last:
                say(f"  settling: {left[0]} triggers and {left[1]} executions still open")
                last = left
            if time.monotonic() - began > timeout:
                say(f"not settled within {timeout:g} s: {left[0]} triggers and {left[1]} "
                    f"executions still open")
                return False, time.monotonic() - began
            time.sleep(1.0)
    finally:
        store.close()


def read_final(database_url: str, since: Since = Since()) -> dict[str, Any]:
    """The database's state as final.json keeps it: the run's triggers and executions."""
    from ticket_dispatcher.store.database import unit_of_work
    from ticket_dispatcher.store.models import ExecutionRow

    store = _open_store(database_url)
    try:
        # both lists are newest first: a deployment's older rows end the paging
        triggers, before = [], None
        for _ in range(100_000):
            page, before = store.triggers.page(before_id=before, limit=PAGE)
            triggers += page
            if before is None or not page or page[-1].id <= since.trigger_id:
                break
        executions, offset = [], 0
        for _ in range(100_000):
            page, total = store.executions.page(limit=PAGE, offset=offset)
            executions += page
            offset += len(page)
            if not page or offset >= total or page[-1].id <= since.execution_id:
                break
        with unit_of_work(store.db):
            owners = dict(ExecutionRow.select(ExecutionRow.id, ExecutionRow.lease_owner)
                          .where(ExecutionRow.id > since.execution_id).tuples())
        engineers, _ = store.engineers.page(limit=1000)
        policies, _ = store.policies.page(limit=1000)
    finally:
        store.close()
    return {
        "triggers": [_trigger(t.to_json()) for t in sorted(triggers, key=lambda t: t.id)
                     if t.id > since.trigger_id],
        "executions": [{**e.to_json(), "lease_owner": owners.get(e.id)}
                       for e in sorted(executions, key=lambda e: e.id)
                       if e.id > since.execution_id],
        "engineers": [{k: e.to_json()[k] for k in ("email", "last_dispatched_at",
                                                   "last_dispatched_issue")}
                      for e in engineers],
        "policies": [{k: p.to_json()[k] for k in ("id", "family_id", "name", "status",
                                                  "version")} for p in policies],
    }


def _trigger(raw: dict) -> dict:
    return {"id": raw["id"], "source": raw["source"], "issue_key": raw["input"]["issue_key"],
            "status": raw["status"], "failure_reason": raw["failure_reason"],
            "execution_ids": raw["output"]["execution_ids"], "created_at": raw["created_at"],
            "completed_at": raw["completed_at"], "available_at": raw["available_at"],
            "updated_at": raw["updated_at"], "retries": raw.get("retries")}
