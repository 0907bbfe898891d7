"""The worker: reconciles every queue it can lease, and carries out their effects.

For each queue, once per tick (and at once when woken after an API write): take the queue's
lease by compare-and-swap (one writer per queue across processes), compare the code host with
what the queue believes (target tip, PR heads, readiness) and feed the differences to the
engine as events, tick, then carry out the outbox: each effect is done through a port and its
result is fed back in the transaction that deletes the effect's row. A crash between the two
repeats the effect, which is why every effect is idempotent.

Leases are short (5 s by default) and a heartbeat thread renews the ones this worker holds
every second, so a pass may take as long as it needs while a dead worker's queues are taken
over within seconds. Two checks keep one writer per queue even when a whole process stalls
longer than its lease (so that the heartbeat stops too): the lease is taken again before each
effect, and every write the worker makes to a queue happens in a transaction that first locks
the lease row and finds this worker holding it (fencing). The heartbeat also marks the worker
alive in the `workers` table: a built-in CI run whose worker is no longer alive is lost, and
the worker that holds its queue starts it again (`CiLost`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import assert_never

import structlog

from keepgreen.app.engine import QueueEngine, live_entries
from keepgreen.app.errors import KeepgreenError
from keepgreen.app.github.duties import GithubDuties
from keepgreen.app.incidents import HostIncidents
from keepgreen.app.ports import (
    BuildConflict,
    CiRunner,
    Clock,
    CodeHostError,
    Landing,
    MergeHost,
    UnitOfWorkFactory,
    WakeChannel,
)
from keepgreen.app.queue_log import queue_name
from keepgreen.app.stall import StallWatch
from keepgreen.app.telemetry import Telemetry
from keepgreen.core.enums import Mergeability, PrState, StateReason, TestRunStatus
from keepgreen.core.git_urls import redact_url
from keepgreen.core.ids import QueueId
from keepgreen.core.model import Queue, QueueEntry, Repository
from keepgreen.core.scheduler import (
    LAND_PR_CLOSED,
    LAND_PUSHED_TO,
    BuildTestCommit,
    CancelCi,
    CiLost,
    DeleteTestBranch,
    Effect,
    Event,
    Land,
    Landed,
    LandRefused,
    PrClosed,
    PrHeadMoved,
    PrRead,
    PrsRead,
    ReadinessChanged,
    StartCi,
    TargetBranchMoved,
    TestCommitBuilt,
    TestCommitConflict,
    Tick,
)

log = structlog.get_logger(__name__)

# Bounds one pass over a queue's outbox: effects beget effects (a merge starts the next run),
# but a pass must end so other queues get their turn.
_MAX_EFFECTS_PER_PASS = 200
# The merge facts remembered (see `_merge_facts`); past it the memory starts over.
_MERGE_FACTS_KEPT = 10_000
_SETTLED = frozenset({Mergeability.MERGEABLE, Mergeability.NOT_MERGEABLE})
# PRs submitted but not read yet that one pass reads per queue, oldest first: a token that
# submits thousands of numbers makes its queue's passes no longer than this, and the worker
# goes on to the other queues (the rest are read in the passes after).
READS_PER_PASS = 100
# Failed effects this worker remembers, to count their retries; past it the memory starts over
# (another worker may have done the effects it holds).
_MAX_REMEMBERED_FAILURES = 10_000


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    holder: str  # this worker's name in lease rows (unique per process)
    # How long a lease lasts unrenewed, which is also how long a silent worker counts as
    # alive: the time a dead worker's queues and CI runs wait for another worker.
    lease_seconds: float = 5.0
    heartbeat_seconds: float = 1.0  # between renewals of the leases held, and liveness beats
    poll_seconds: float = 1.0
    # Woken (a submit, a status): wait this long before the pass, so that the request that
    # woke it answers before the pass takes the process's time, and a burst of submits is
    # read in one pass (one decision) instead of one pass each.
    wake_delay_seconds: float = 0.025
    chore_seconds: float = 60.0  # between runs of the periodic chores (flaky-test sweep)
    # A queue whose git server failed waits 1, 2, 4, ... seconds, at most this, to be tried.
    git_retry_max_seconds: float = 30.0
    # Sharing its process with the API (`keepgreen serve`): after a pass during which the API
    # answered requests, the worker rests this many times the processor time the pass took,
    # at most `api_rest_max_seconds`, so that a busy API keeps at least r / (1 + r) of the
    # interpreter they share. 0: never rests. A worker of its own never sees a request.
    api_rest_ratio: float = 2.0
    api_rest_max_seconds: float = 5.0
    host: str = ""  # where this worker runs, for operators reading the `workers` table
    pid: int = 0


def api_rest_seconds(cpu_seconds: float, settings: WorkerSettings) -> float:
    """How long a worker rests after a pass that took `cpu_seconds` of processor time while
    the API in its process was busy (see `WorkerSettings.api_rest_ratio`).
    """
    return min(cpu_seconds * settings.api_rest_ratio, settings.api_rest_max_seconds)


class Worker:
    """Advances queues; safe to run in several processes against one database."""

    def __init__(
        self,
        uow: UnitOfWorkFactory,
        *,
        engine: QueueEngine,
        host: MergeHost,
        runner: CiRunner | None,
        clock: Clock,
        settings: WorkerSettings,
        chores: Sequence[Callable[[], object]] = (),
        recover: Callable[[], object] | None = None,
        telemetry: Telemetry | None = None,
        github: GithubDuties | None = None,
        wake_channel: WakeChannel | None = None,
    ) -> None:
        self._uow = uow
        # Wakes from other processes (their submits, statuses): heard while `serve` runs.
        self._wake_channel = wake_channel
        # The GitHub App's part of each pass (deliveries, PR feedback, required checks).
        self._github = github
        self._telemetry = telemetry or Telemetry()
        # Cleans up after dead workers' CI runs on this host (orphans, checkouts); run at start
        # and with each heartbeat.
        self._recover = recover
        self._stopping: threading.Event | None = None  # set: finish the effect under way, stop
        self._held: set[QueueId] = set()  # the queues whose lease this worker believes it has
        self._held_lock = threading.Lock()
        self._chores = tuple(chores)
        self._chores_due = 0.0
        self._engine = engine
        self._host = host
        self._runner = runner
        self._clock = clock
        self._settings = settings
        self.wakeup = threading.Event()
        # For log lines: each queue's name once a pass has read it, and the git hosts that
        # cannot be read (told once, then reminded with backoff) and the effects retried.
        self._names: dict[QueueId, str] = {}
        self._incidents = HostIncidents(
            uow,
            clock=clock,
            telemetry=self._telemetry,
            max_backoff=settings.git_retry_max_seconds,
        )
        self._attempts: dict[int, int] = {}
        # Per queue and PR: the head and target tip last asked about, and the answers.
        self._merge_seen: dict[tuple[QueueId, int], tuple[str, str, Mergeability, bool]] = {}
        # Queues that hold PRs and went without progress too long, told in the log.
        self._stalls = StallWatch(uow, clock=clock, telemetry=self._telemetry)

    # -- the loop ---------------------------------------------------------------------------

    def serve(self, stop: threading.Event) -> None:
        """Run passes until `stop` is set; sleep between them unless woken.

        On stop: this worker's CI commands are killed (they start again in the worker that
        takes their queue over, as `ci_lost`: waiting for a run of hours would hold a
        deployment up), then its leases are handed back and it leaves the `workers` table, so
        another worker takes over at its next pass instead of after the lease.
        """
        self.recover()
        log.info("worker started", holder=self._settings.holder)
        self._stopping = stop
        # The heartbeat outlives `stop` until the pass under way has ended: the leases it
        # renews are what keeps another worker out while that pass finishes its effect.
        passes_over = threading.Event()
        beating = threading.Thread(
            target=self._heartbeat_loop,
            args=(passes_over,),
            name="keepgreen-heartbeat",
            daemon=True,
        )
        beating.start()
        listening = None
        if self._wake_channel is not None:
            listening = threading.Thread(
                target=self._wake_channel.listen,
                args=(self.wake, stop),
                name="keepgreen-wake",
                daemon=True,
            )
            listening.start()
        try:
            while not stop.is_set():
                self.wakeup.clear()
                answered, cpu = self._telemetry.requests_answered, time.thread_time()
                try:
                    self.run_once()
                except Exception:  # a bad pass must not kill the worker; the next one retries
                    log.exception("worker pass failed")
                self.run_chores_when_due()
                if self._telemetry.requests_answered != answered:
                    self._rest_for_the_api(stop, time.thread_time() - cpu)
                if self.wakeup.wait(self._settings.poll_seconds):
                    stop.wait(self._settings.wake_delay_seconds)
        finally:
            passes_over.set()
            beating.join()
            if listening is not None:
                listening.join(timeout=5)  # it sees `stop` within a tick and leaves
            if self._runner is not None:
                self._runner.close(wait=False)
            self.release_all()
            log.info("worker stopped", holder=self._settings.holder)

    def _rest_for_the_api(self, stop: threading.Event, cpu_seconds: float) -> None:
        """Rest after a pass that took `cpu_seconds` of processor time while the API in this
        process answered requests: the interpreter is one, and a pass over a long queue holds
        it for most of its time, which a flood of requests would otherwise wait on. A wake
        that comes meanwhile is served once the rest is over; `stop` ends it at once.
        """
        rest = api_rest_seconds(cpu_seconds, self._settings)
        if rest > 0:
            self._telemetry.worker_rested(rest)
            stop.wait(rest)

    def _heartbeat_loop(self, stop: threading.Event) -> None:
        while not stop.wait(self._settings.heartbeat_seconds):
            try:
                self.beat()
            except Exception:  # the database may be away for a moment; the next beat retries
                log.exception("worker heartbeat failed")
            self.recover()

    def beat(self) -> None:
        """Say this worker is alive and renew the leases it holds; drop the ones it lost."""
        now = self._clock()
        until = now + timedelta(seconds=self._settings.lease_seconds)
        with self._held_lock:
            held = set(self._held)
        lost = set()
        with self._uow() as uow:
            uow.workers.beat(
                self._settings.holder, host=self._settings.host, pid=self._settings.pid, now=now
            )
            for queue_id in held:
                # A queue deleted meanwhile (deleteQueue, `repo remove`) is let go: renewing
                # would insert a lease row for a queue that no longer exists.
                if uow.queues.get(queue_id) is None or not uow.leases.acquire(
                    queue_id, self._settings.holder, now=now, until=until
                ):
                    lost.add(queue_id)
            uow.commit()
        if lost:
            with self._held_lock:
                dropped = lost & self._held
                self._held -= lost
            self._telemetry.lease("lost", len(dropped))
            for queue_id in dropped:
                log.warning("lease lost", queue=self._name(queue_id), holder=self._settings.holder)

    def recover(self) -> None:
        """Clean up the CI runs of workers on this host that died (see `BuiltInRunner`)."""
        if self._recover is None:
            return
        try:
            self._recover()
        except Exception:  # a cleanup that fails now is tried again at the next heartbeat
            log.exception("cleaning up dead workers' ci runs failed")

    def wake(self) -> None:
        self.wakeup.set()

    @property
    def chores(self) -> tuple[Callable[[], object], ...]:
        """The periodic chores this worker runs besides the queues."""
        return self._chores

    def run_chores_when_due(self) -> None:
        """Run the periodic chores once `chore_seconds` have passed since their last run."""
        if time.monotonic() < self._chores_due:
            return
        self._chores_due = time.monotonic() + self._settings.chore_seconds
        for chore in self._chores:
            try:
                chore()
            except Exception:  # a failing chore waits for its next turn; queues go on
                log.exception("worker chore failed", chore=getattr(chore, "__name__", None))

    def run_once(self) -> None:
        """One pass over every queue this worker can lease."""
        started = time.perf_counter()
        ok = False
        try:
            self.beat()
            self._act_on_github_deliveries()
            with self._uow(read_only=True) as uow:
                queue_ids = list(uow.queues.list_ids())
            for queue_id in queue_ids:
                if self._take_lease(queue_id):
                    self.reconcile(queue_id)
            ok = True
        finally:
            self._telemetry.worker_pass(time.perf_counter() - started, ok=ok)

    def _act_on_github_deliveries(self) -> None:
        if self._github is None:
            return
        try:
            self._github.act_on_deliveries()
        except Exception:  # deliveries wait for the next pass; the queues go on
            log.exception("acting on github deliveries failed")

    def release_all(self) -> None:
        """Hand back every lease and leave the `workers` table (this worker stops)."""
        with self._held_lock:
            handed_back = len(self._held)
            self._held.clear()
        log.info("leases handed back", holder=self._settings.holder, queues=handed_back)
        with self._uow() as uow:
            uow.leases.release_all(self._settings.holder)
            uow.workers.remove(self._settings.holder)
            uow.commit()
        self._telemetry.lease("released", handed_back)

    def _take_lease(self, queue_id: QueueId) -> bool:
        now = self._clock()
        until = now + timedelta(seconds=self._settings.lease_seconds)
        with self._uow() as uow:
            queue = uow.queues.get(queue_id)
            if queue is None:
                taken = False
            else:
                taken = uow.leases.acquire(queue_id, self._settings.holder, now=now, until=until)
                uow.commit()
                if taken and queue_id not in self._names:
                    repository = uow.repositories.get(queue.repository_id)
                    self._names[queue_id] = queue_name(repository, queue.branch)
        with self._held_lock:
            was_held = queue_id in self._held
            if taken:
                self._held.add(queue_id)
            else:
                self._held.discard(queue_id)
        if taken and not was_held:
            self._incidents.adopt(queue_id)
            self._telemetry.lease("acquired")
            log.info("lease taken", queue=self._name(queue_id), holder=self._settings.holder)
        elif was_held and not taken:
            self._incidents.forget(queue_id)
            self._stalls.forget(queue_id)
            self._telemetry.lease("lost")
            log.warning("lease lost", queue=self._name(queue_id), holder=self._settings.holder)
        return taken

    def _name(self, queue_id: QueueId) -> str:
        return self._names.get(queue_id, str(queue_id))

    # -- one queue --------------------------------------------------------------------------

    def reconcile(self, queue_id: QueueId) -> None:
        """Observe the code host, tick, and carry out the queue's outbox."""
        with self._uow(read_only=True) as uow:
            queue = uow.queues.get(queue_id)
            if queue is None:
                self._stalls.forget(queue_id)
                return
            repository = uow.repositories.get(queue.repository_id)
            entries = live_entries(uow, queue_id)
        name = self._names[queue_id] = queue_name(repository, queue.branch)
        self._watch_stall(queue, repository, entries, name)
        if not self._incidents.may_try(queue_id):
            return  # its git server failed a moment ago: the queue waits out its backoff
        try:
            tip = self._host.branch_tip(repository, queue.branch)
            if tip is None and queue.target_sha is not None:
                # The branch was deleted on the server: nothing may be tested or landed on
                # it; the queue waits (runs keep their results) until it is back.
                self._incidents.read_succeeded(queue_id, name)
                self._incidents.branch_missing(
                    queue_id, name, queue.branch, redact_url(repository.git_url)
                )
                return
            rewound = self._rewound(repository, queue, tip)
            observations = self._observe(repository, queue, entries, tip)
        except CodeHostError as error:
            self._incidents.read_failed(queue_id, name, error)
            return
        self._incidents.read_succeeded(queue_id, name)
        self._incidents.branch_present(queue_id, name)
        if not self._read_required_statuses(queue_id, repository, queue):
            return  # the lease was lost, or GitHub failed (the queue backs off)
        if rewound and tip is not None and queue.target_sha is not None:
            self._incidents.branch_rewound(
                queue_id, name, branch=queue.branch, old=queue.target_sha, new=tip
            )
        observations += self._lost_runs(queue_id, repository)
        for event in (*observations, Tick()):
            if not self._feed(queue_id, event):
                return  # the lease was lost; `_feed` said so
        self._carry_out_outbox(queue_id, repository)
        self._publish_to_github(queue_id, repository)

    def _watch_stall(
        self, queue: Queue, repository: Repository, entries: tuple[QueueEntry, ...], name: str
    ) -> None:
        """Tell a stall (or its end) from what this pass read at its start: a queue that
        waits out a git server's backoff is watched too, since that is when it stalls.
        """
        try:
            self._stalls.check(queue, repository, entries, name=name)
        except Exception:  # the report must not stop the queue it reports on
            log.exception("stall report failed", queue=name)

    def _read_required_statuses(
        self, queue_id: QueueId, repository: Repository, queue: Queue
    ) -> bool:
        """Store the checks GitHub's branch protection requires, when due to be read; False
        when the lease was lost or GitHub failed (then the queue backs off).
        """
        if self._github is None:
            return True
        try:
            required = self._github.required_statuses(repository, queue)
        except CodeHostError as error:
            self._incidents.read_failed(queue_id, self._name(queue_id), error)
            return False
        if required is None or required == queue.host_required_statuses:
            return True
        with self._uow() as uow:
            current = uow.queues.get(queue_id, lock=True)
            if current is None or not uow.leases.holds(queue_id, self._settings.holder):
                return False
            uow.queues.save(replace(current, host_required_statuses=required))
            uow.commit()
        log.info(
            "required checks read from github",
            queue=self._name(queue_id),
            required=list(required),
        )
        return True

    def _publish_to_github(self, queue_id: QueueId, repository: Repository) -> None:
        """Show each PR's place on GitHub; GitHub failing is an incident, not a failed pass."""
        if self._github is None or repository.github_installation_id is None:
            return
        try:
            self._github.publish(queue_id)
        except CodeHostError as error:
            self._incidents.effect_failed(queue_id, error)
            log.warning(
                "showing pull requests' places on github failed; tried again next pass",
                queue=self._name(queue_id),
                error=str(error),
            )

    def _rewound(self, repository: Repository, queue: Queue, tip: str | None) -> bool:
        """Whether the branch moved back to an ancestor of the tip the queue last saw."""
        if tip is None or queue.target_sha is None or tip == queue.target_sha:
            return False
        try:
            return self._host.is_up_to_date(
                repository, head_sha=queue.target_sha, target_branch=queue.branch
            )
        except CodeHostError:
            return False  # the old tip is gone from the mirror: it moved, that is all we know

    def _lost_runs(self, queue_id: QueueId, repository: Repository) -> list[Event]:
        """`CiLost` for each built-in CI run whose command no longer runs anywhere: started by
        a worker that is not alive, or by this one while its runner has no such run. (A run
        whose command reported before it ended is not lost: the scheduler checks the status.)
        """
        if self._runner is None or repository.ci_command is None:
            return []
        with self._uow(read_only=True) as uow:
            runs = [
                run.id
                for run in uow.test_runs.list_open(queue_id)
                if run.status is TestRunStatus.IN_PROGRESS and run.sha is not None
            ]
            if not runs:
                return []
            holders = uow.workers.ci_holders(runs)
            since = self._clock() - timedelta(seconds=self._settings.lease_seconds)
            alive = uow.workers.alive(set(holders.values()), since=since)
        lost: list[Event] = []
        for run_id in runs:
            holder = holders.get(run_id)
            if holder == self._settings.holder:
                gone = not self._runner.is_running(run_id)
                if gone:
                    self._runner.forget(run_id)
            else:
                gone = holder is None or holder not in alive
            if gone:
                lost.append(CiLost(run_id))
        return lost

    def _observe(
        self,
        repository: Repository,
        queue: Queue,
        entries: tuple[QueueEntry, ...],
        tip: str | None,
    ) -> list[Event]:
        events: list[Event] = []
        if tip is not None and tip != queue.target_sha:
            events.append(TargetBranchMoved(tip))
        read = [entry for entry in entries if entry.is_read]
        events += self._read_submitted(repository, queue, entries, tip)
        heads = self._host.pull_request_heads(repository, [entry.number for entry in read])
        for entry in read:
            head = heads.get(entry.number)
            if head is None:
                events.append(PrClosed(entry.number))
                continue
            if head != entry.head_sha:
                events.append(PrHeadMoved(entry.number, head))
                continue
            if entry.state in (PrState.NOT_READY, PrState.PENDING):
                mergeability, up_to_date = self._merge_facts(
                    repository, queue, entry.number, entry.head_sha, tip
                )
                readiness = replace(entry.readiness, mergeability=mergeability)
                if readiness != entry.readiness or up_to_date != entry.is_up_to_date:
                    events.append(ReadinessChanged(entry.number, readiness, up_to_date))
        return events

    def _read_submitted(
        self,
        repository: Repository,
        queue: Queue,
        entries: tuple[QueueEntry, ...],
        tip: str | None,
    ) -> list[Event]:
        """Read the PRs submitted since the last pass (the submit does not wait on the code
        host): head, title, author, branch and whether they merge, decided together
        (`PrsRead`); a PR the code host does not have leaves as `pr_not_found`. At most
        `READS_PER_PASS`, in the order they were submitted.
        """
        missing: list[Event] = []
        reads: list[PrRead] = []
        unread = sorted(
            (entry for entry in entries if not entry.is_read), key=lambda entry: entry.position
        )
        for entry in unread[:READS_PER_PASS]:
            info = self._host.pull_request(repository, entry.number)
            if info is None:
                missing.append(PrClosed(entry.number, StateReason.PR_NOT_FOUND))
                continue
            mergeability, up_to_date = self._merge_facts(
                repository, queue, entry.number, info.head_sha, tip
            )
            readiness = replace(entry.readiness, mergeability=mergeability)
            reads.append(PrRead(info, readiness, up_to_date))
        return [*missing, PrsRead(tuple(reads))] if reads else missing

    def _merge_facts(
        self, repository: Repository, queue: Queue, number: int, head_sha: str, tip: str | None
    ) -> tuple[Mergeability, bool]:
        """Whether PR `number`'s head merges cleanly onto the target branch, and whether it
        holds the branch's tip: asked of the code host once per head and tip (both follow from
        the two commits alone), then remembered, so that a queue of waiting PRs costs no git
        process per PR and pass.
        """
        key = (queue.id, number)
        seen = self._merge_seen.get(key)
        if seen is not None and tip is not None and seen[:2] == (head_sha, tip):
            return seen[2], seen[3]
        # The tip this pass read: not resolved again for each PR (two git processes a PR).
        mergeability = self._host.mergeability(
            repository, head_sha=head_sha, target_branch=queue.branch, target_sha=tip
        )
        up_to_date = self._host.is_up_to_date(
            repository, head_sha=head_sha, target_branch=queue.branch, target_sha=tip
        )
        # An answer still being worked out (a host computing it) is asked again next pass.
        if tip is not None and mergeability in _SETTLED:
            if len(self._merge_seen) >= _MERGE_FACTS_KEPT:
                self._merge_seen.clear()
            self._merge_seen[key] = (head_sha, tip, mergeability, up_to_date)
        return mergeability, up_to_date

    def _feed(self, queue_id: QueueId, event: Event, *, done: int | None = None) -> bool:
        """Decide one event and write the decision in its own transaction; `done` names the
        answered outbox row.

        The queue is loaded and decided in a read transaction first, which holds nothing: the
        transaction that writes holds the queue only to write, when nothing the decision was
        made on has changed since (the queue's `decision_version`; PRs entering unread, a
        flood of merge buttons, leave it where it is). Otherwise it decides again, holding the
        queue. False, writing nothing, when this worker no longer holds the queue's lease: the
        lease row is locked and checked in the very transaction that writes (fencing).
        """
        with self._uow(read_only=True) as uow:
            seen = uow.queues.decision_version(queue_id)
            queue = uow.queues.get(queue_id)
            planned = None if queue is None else self._engine.plan(uow, queue, event)
        with self._uow() as uow:
            queue = uow.queues.get(queue_id, lock=True)
            if queue is None:
                return True
            if uow.queues.decision_version(queue_id) != seen:
                planned = None  # decided on what has changed since: decide again, holding it
            if not uow.leases.holds(queue_id, self._settings.holder):
                with self._held_lock:
                    held_before = queue_id in self._held
                    self._held.discard(queue_id)
                if held_before:
                    self._telemetry.lease("lost")
                    log.warning(
                        "lease lost mid-pass",
                        queue=self._name(queue_id),
                        holder=self._settings.holder,
                    )
                return False
            if done is not None and not uow.effects.delete(done):
                return True  # another worker answered it already
            if planned is not None:
                self._engine.write(uow, planned)
            else:
                self._telemetry.decided_again()
                self._engine.advance(uow, queue, event)
            uow.commit()
        return True

    def _left_since_tested(self, repository: Repository, effect: Land) -> str | None:
        """Whether the PR about to land was closed (`pr_closed`) or pushed to (`pushed_to`)
        since a pass last read it, as the server has it now: a pass reads the PRs' refs as
        fetched up to an interval before, and a landing must not merge a PR that is no
        longer there, or an older head of it. None when it is as it was read.
        """
        head = self._host.pull_request_heads(repository, [effect.number], fresh=True).get(
            effect.number
        )
        if head is None:
            return LAND_PR_CLOSED
        with self._uow(read_only=True) as uow:
            entry = uow.entries.get(effect.entry_id)
        return LAND_PUSHED_TO if entry.is_read and head != entry.head_sha else None

    def _carry_out_outbox(self, queue_id: QueueId, repository: Repository) -> None:
        attempted: set[int] = set()
        for _ in range(_MAX_EFFECTS_PER_PASS):
            if self._stopping is not None and self._stopping.is_set():
                return  # stopping: what is left is the next holder's (effects are idempotent)
            with self._uow(read_only=True) as uow:
                pending = [(i, e) for i, e in uow.effects.list(queue_id) if i not in attempted]
            if not pending:
                return
            if not self._take_lease(queue_id):
                # A long pass outlived the lease and another worker took the queue over:
                # stop here rather than act beside it (renewing before each effect keeps the
                # overlap to at most the effect under way).
                return  # `_take_lease` said so
            effect_id, effect = pending[0]
            attempted.add(effect_id)
            kind = type(effect).__name__
            if effect_id in self._attempts:
                self._telemetry.effect_retried(kind)
            try:
                result = self._carry_out(queue_id, repository, effect)
            except (CodeHostError, KeepgreenError, OSError) as error:
                if self._effect_failed(queue_id, effect_id, effect, error):
                    return  # the queue waits out its backoff before trying the server again
                continue
            self._telemetry.effect(kind, ok=True)
            self._incidents.effect_succeeded(queue_id)
            if self._attempts.pop(effect_id, 0):
                log.info("effect succeeded after retries", queue=self._name(queue_id), effect=kind)
            if result is None:
                with self._uow() as uow:
                    if not uow.leases.holds(queue_id, self._settings.holder):
                        return  # the new holder repeats the effect (they are idempotent)
                    uow.effects.delete(effect_id)
                    uow.commit()
            elif not self._feed(queue_id, result, done=effect_id):
                return  # the lease was lost; `_feed` said so

    def _effect_failed(
        self, queue_id: QueueId, effect_id: int, effect: Effect, error: Exception
    ) -> bool:
        """Count and tell a failed effect, left in the outbox for the next pass to try again;
        True when the git server failed it (then the queue backs off).
        """
        kind = type(effect).__name__
        self._telemetry.effect(kind, ok=False)
        if isinstance(error, CodeHostError):
            number = effect.number if isinstance(effect, Land) else None
            self._incidents.effect_failed(queue_id, error, pr_number=number)
        if len(self._attempts) >= _MAX_REMEMBERED_FAILURES:
            self._attempts.clear()  # effects another worker finished meanwhile
        attempt = self._attempts[effect_id] = self._attempts.get(effect_id, 0) + 1
        log.warning(
            "effect failed; retried next pass",
            queue=self._name(queue_id),
            effect=kind,
            attempt=attempt,
            error=str(error),
            exc_info=not isinstance(error, CodeHostError),
        )
        return isinstance(error, CodeHostError)

    def _carry_out(self, queue_id: QueueId, repository: Repository, effect: Effect) -> Event | None:
        """Do one effect through the ports; the event that answers it, if any."""
        match effect:
            case BuildTestCommit():
                built = self._host.build_test_commit(
                    repository, base_sha=effect.base_sha, prs=effect.prs, branch=effect.branch
                )
                if isinstance(built, BuildConflict):
                    return TestCommitConflict(effect.run_id, built.number)
                base_tree = self._host.tree_of(repository, effect.base_sha)
                return TestCommitBuilt(effect.run_id, base_tree, built.links)
            case DeleteTestBranch():
                self._host.delete_branch(repository, effect.branch)
                return None
            case StartCi():
                if self._runner is not None and repository.ci_command is not None:
                    # Recorded before it starts: a crash right after still names its worker.
                    with self._uow() as uow:
                        uow.workers.record_ci(
                            effect.run_id, self._settings.holder, now=self._clock()
                        )
                        uow.commit()
                    self._runner.start(
                        repository,
                        run_id=effect.run_id,
                        sha=effect.sha,
                        timeout_seconds=effect.timeout_seconds,
                    )
                return None
            case CancelCi():
                if self._runner is not None:
                    self._runner.cancel(effect.run_id)
                return None
            case Land():
                return self._land(queue_id, repository, effect)
            case _:
                assert_never(effect)

    def _land(self, queue_id: QueueId, repository: Repository, effect: Land) -> Event:
        left = self._left_since_tested(repository, effect)
        if left is not None:
            log.warning(
                "landing refused",
                queue=queue_name(repository, effect.target_branch),
                pr=effect.number,
                problem=left,
            )
            return LandRefused(effect.number, left, None)
        link = effect.link
        if not link.tree:
            link = replace(link, tree=self._host.tree_of(repository, link.commit))
        parent_tree = effect.parent_tree or self._host.tree_of(repository, effect.parent_commit)
        result = self._host.land(
            repository,
            Landing(
                target_branch=effect.target_branch,
                expected_tip=effect.expected_tip,
                method=effect.method,
                link=link,
                parent_commit=effect.parent_commit,
                parent_tree=parent_tree,
                exact=effect.exact,
                title=effect.title,
                author=effect.author,
                token=effect.token,
            ),
        )
        if result.new_tip is not None:
            return Landed(effect.number, result.new_tip)
        problem = result.problem or "target_moved"
        if problem == "push_rejected":
            self._incidents.landing_rejected(
                queue_id, number=effect.number, detail=result.detail or problem
            )
        tip = None
        if problem == "target_moved":
            tip = self._host.branch_tip(repository, effect.target_branch)
        log.warning(
            "landing refused",
            queue=queue_name(repository, effect.target_branch),
            pr=effect.number,
            problem=problem,
            expected_tip=effect.expected_tip,
            tip=tip,
        )
        return LandRefused(effect.number, problem, tip)
