"""`loom bench --executor ray`: each (problem, lane) unit runs on a Ray worker; the driver alone writes.

The caller prepares the run directory (manifest.json) and the protocol is audited on the driver
before any worker starts. The driver lists
the units not yet in results.jsonl and hands them to worker actors; a worker builds its backend
once and runs a unit with `runner.run_one`, as a local run does (search lanes through the run
layer). Each finished unit comes back to the driver, which appends its record to the run
directory, so a killed driver resumes like a local run: written units are skipped, units in
flight run again.

Model limit: a model the whole cluster shares (a remote server) is guarded by one `LimitKeeper`
actor that every worker asks before each call; the embedded model is loaded once per node (one
worker per node) and limited there, as a local run limits it.

A unit whose worker dies (a killed process, a lost node) runs again, at most `retries` times,
and its record says how many re-runs it took; after that it is recorded as `lane_crashed` and
the sweep goes on. Search lanes recording runs (`--store`) record them in memory on the worker;
their blocks and refs come back with the record and the driver puts them in its store, so the
runs replay like local ones.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

from ..llm.limits import SharedSlots
from ..llm.slots import Slots
from ..store.blocks import CID
from ..store.memory import MemoryStore
from .datasets import Dataset, Problem
from .lanes import LaneOutcome, LaneSpend, LaneStop
from .protocol import LanePlan, Protocol, audit
from .results import Record, ResultsStore
from .runner import RunStats, progress_line, record_of, run_one, work_items

RAY_MISSING = "--executor ray needs Ray, which is not installed: pip install 'thoughtloom[ray]'"
LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024
#: How long a --ray-address may take to accept a connection.
CONNECT_TIMEOUT_S = 5.0
#: Re-runs of a unit whose worker died, before it is recorded as lane_crashed.
DEFAULT_RETRIES = 2
#: How long a feeder waits for Ray to restart its dead worker before handing it the next unit.
RESTART_WAIT_S = 60.0


class ExecutorError(ValueError):
    """Ray is missing or unreachable (one line, exit 2)."""


def import_ray() -> Any:
    """The ray module, or ExecutorError with the install line (ray is an optional extra)."""
    try:
        import ray
    except ImportError:
        raise ExecutorError(RAY_MISSING) from None
    return ray


@dataclass(frozen=True, slots=True)
class RaySettings:
    """Where and how wide a sweep runs on Ray."""

    #: a running cluster ("HOST:PORT", "auto"); None: the cluster RAY_ADDRESS names, else a local one
    address: str | None = None
    #: worker actors; None: one per CPU of the cluster (the embedded model: always one per node)
    workers: int | None = None
    #: units in flight on each worker
    jobs: int = 1
    #: model calls in flight at once over the whole cluster (None: the backend's own limit)
    model_concurrency: int | None = None
    retries: int = DEFAULT_RETRIES


class LimitKeeper:
    """The body of the cluster-wide model limit actor: FIFO slots, each held by a unit's token."""

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._slots: Slots | None = None
        self._held: dict[str, int] = {}
        #: Tokens of units that ended: a slot granted to one later goes straight back.
        self._closed: set[str] = set()

    async def acquire(self, token: str, default: int) -> None:
        """Wait for a slot for the unit `token` (the first caller's `default` sizes an unset limit)."""
        if self._slots is None:
            self._slots = Slots(self._limit or max(1, default))
        await self._slots.acquire()
        if token in self._closed:
            self._slots.release()
            return
        self._held[token] = self._held.get(token, 0) + 1

    async def release(self, token: str) -> None:
        """Give back one slot the unit holds."""
        if self._slots is not None and self._held.get(token, 0) > 0:
            self._held[token] -= 1
            self._slots.release()

    async def close(self, token: str) -> int:
        """The unit ended (done or its worker died): free every slot it still holds; how many."""
        self._closed.add(token)
        count = self._held.pop(token, 0)
        for _ in range(count):
            assert self._slots is not None
            self._slots.release()
        return count


class ClusterSlots:
    """A ModelLimit held through the LimitKeeper actor: one slot per model call of one unit."""

    def __init__(self, keeper: Any, limit: int, token: str) -> None:
        self.limit = limit
        self._keeper = keeper
        self._token = token

    async def __aenter__(self) -> None:
        await self._keeper.acquire.remote(self._token, self.limit)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._keeper.release.remote(self._token)


@dataclass(frozen=True, slots=True)
class UnitOutput:
    """What a worker sends back for one unit: its record, and the blocks and refs of its stored run."""

    record: Record
    blocks: list[tuple[CID, bytes]]
    refs: dict[str, CID]


class UnitWorker:
    """The body of a worker actor: one backend for its lifetime, one unit per `run` call."""

    def __init__(self, model: str, keeper: Any, model_concurrency: int | None) -> None:
        from ..llm.registry import make_backend

        # Built at start, so a model this node cannot use (a key not set here) fails the worker's
        # creation, which the driver reports in one line, instead of every unit.
        self._backend = make_backend(model)
        self._keeper = keeper
        self._model_concurrency = model_concurrency
        # The embedded model: this node's copy is limited here, as a local run limits it.
        self._local_slots = SharedSlots(model_concurrency or self._backend.max_concurrency) if keeper is None else None

    async def run(self, protocol: Protocol, dataset: Dataset, problem: Problem, index: int, plan: LanePlan,
                  token: str, stored: bool) -> UnitOutput:
        """Run one unit as a local run does; its stored run (if any) comes back as blocks."""
        backend = self._backend
        slots = self._local_slots if self._keeper is None else ClusterSlots(
            self._keeper, self._model_concurrency or backend.max_concurrency, token)
        store = MemoryStore() if stored else None
        record, _ = await run_one(dataset, problem, index, plan, backend, protocol, slots, store)
        if store is None:
            return UnitOutput(record, [], {})
        return UnitOutput(record, list(store.blocks.items()), store.refs())

    def ping(self) -> bool:
        """Answer once the worker is up (after Ray restarted it, say)."""
        return True


def is_embedded(model: str) -> bool:
    """Whether the protocol's model is loaded in-process (one copy per node) rather than served."""
    from ..llm.registry import parse_model_spec

    return parse_model_spec(model).is_local


def connect(ray: Any, address: str | None) -> bool:
    """Join the cluster at `address` (or start a local one); True when this call started Ray."""
    _check_reachable(address)
    if ray.is_initialized():
        return False
    try:
        if address or os.environ.get("RAY_ADDRESS"):
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        else:
            # A Ray of our own on this machine: its object store only carries data sets, records and blocks.
            ray.init(include_dashboard=False, log_to_driver=False, object_store_memory=LOCAL_OBJECT_STORE_BYTES)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExecutorError(f"cannot reach the Ray cluster at {address or 'RAY_ADDRESS or a new local one'}: "
                            f"{first}") from None
    return True


def _check_reachable(address: str | None) -> None:
    """Refuse a HOST:PORT nothing listens on: ray.init would wait on it for many minutes."""
    text = address or ""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or "://" in text:  # "auto", ray://...: Ray's own lookup
        return
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ExecutorError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}; "
                            "start it with 'ray start --head' or give its GCS address (HOST:PORT)") from None


def ray_workers(ray: Any, protocol: Protocol, settings: RaySettings) -> tuple[list[Any], Any]:
    """The worker actors and the limit actor (None for the embedded model, limited per node)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # A dead worker is restarted by Ray; the unit it held is re-run by the driver, not by Ray.
    worker_cls = ray.remote(max_restarts=-1, max_task_retries=0)(UnitWorker)
    if is_embedded(protocol.model):
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        if not nodes:
            raise ExecutorError("no node of the Ray cluster has a CPU to load the embedded model on")
        return [worker_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                .remote(protocol.model, None, settings.model_concurrency) for node in nodes], None
    # The limit lives on the driver's node: it shares the driver's fate, not a worker node's.
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    keeper = ray.remote(num_cpus=0)(LimitKeeper).options(scheduling_strategy=here).remote(settings.model_concurrency)
    count = settings.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    # Spread over the nodes: a sweep's workers should not pile onto the head node.
    return [worker_cls.options(scheduling_strategy="SPREAD").remote(protocol.model, keeper, settings.model_concurrency)
            for _ in range(count)], keeper


async def run_protocol_on_ray(
    protocol: Protocol,
    store: ResultsStore,
    datasets: dict[str, Dataset],
    settings: RaySettings,
    *,
    run_store: Any = None,
    progress: Callable[[str], None] | None = None,
) -> RunStats:
    """Run every unfinished unit of an audited protocol on Ray; records stream into `store`.

    run_store: a BlockStore or SQLite path the search lanes' runs are shipped into (None: not stored).
    """
    ray = import_ray()
    from ..run.session import open_block_store

    audit(protocol)  # cheap, and before any worker starts: an unfair protocol costs nothing
    done = store.load()
    stats = RunStats()
    queue: deque[tuple[Dataset, Problem, int, LanePlan]] = deque()
    for dataset, problem, index in work_items(protocol, datasets):
        for plan in protocol.lanes:
            if not protocol.runs(dataset.name, plan.lane):
                continue
            if (dataset.name, plan.lane, problem.id) in done:
                stats.skipped += 1
            else:
                queue.append((dataset, problem, index, plan))
    total = stats.skipped + len(queue)
    if not queue:
        return stats
    started_ray = connect(ray, settings.address)
    blocks, _, owns_blocks = open_block_store(run_store) if run_store is not None else (None, None, False)
    workers: list[Any] = []
    keeper: Any = None
    try:
        workers, keeper = ray_workers(ray, protocol, settings)
        refs = {name: ray.put(d) for name, d in datasets.items()}
        reruns: dict[tuple[str, str, str], int] = {}
        # A worker lost under the unit: killed, out of memory, its node gone (a node-pinned worker then
        # cannot be placed again). An exception the unit itself raised is not among them: it is a bug.
        errors = ray.exceptions
        lost = (errors.RayActorError, errors.WorkerCrashedError, errors.NodeDiedError, errors.OutOfMemoryError,
                errors.ActorUnschedulableError)
        started = time.monotonic()

        async def finish(output: UnitOutput) -> None:
            if blocks is not None and output.blocks:
                blocks.put_many(output.blocks)
                for name, cid in output.refs.items():
                    blocks.set_ref(name, cid)
            store.append(output.record)  # after its run's blocks: a written record's run is always there
            stats.records.append(output.record)
            stats.done += 1
            if progress:
                progress(progress_line(output.record, stats, total, time.monotonic() - started))

        async def restarted(worker: Any) -> None:
            # Ray turns away calls to a worker it is still restarting: units fed to it meanwhile
            # would fail without running and use up their retries (a loaded machine restarts slowly).
            deadline = time.monotonic() + RESTART_WAIT_S
            while (left := deadline - time.monotonic()) > 0:
                try:
                    await asyncio.wait_for(worker.ping.remote(), left)
                    return
                except (errors.ActorUnavailableError, TimeoutError):
                    await asyncio.sleep(0.2)
                except lost:
                    return  # gone for good (no restarts left, its node lost): the next unit finds out

        async def feed(worker: Any) -> None:
            while queue:
                dataset, problem, index, plan = queue.popleft()
                key = (dataset.name, plan.lane, problem.id)
                tries = reruns.get(key, 0)
                token = f"{'/'.join(key)}#{tries}"
                try:
                    output: UnitOutput = await worker.run.remote(
                        protocol, refs[dataset.name], problem, index, plan, token, blocks is not None)
                except lost as exc:
                    if getattr(exc, "actor_init_failed", False):  # not a lost worker: one that cannot start
                        raise ExecutorError(f"a Ray worker could not start: {_last_line(exc)}") from None
                    if tries < settings.retries:
                        reruns[key] = tries + 1
                        queue.append((dataset, problem, index, plan))
                        if progress:
                            progress(f"{dataset.name} #{problem.id} {plan.lane}: its worker died; running it again")
                        await restarted(worker)
                        continue
                    cause = " ".join(str(exc).split())[:400]  # Ray's own account, on one line
                    why = f"the Ray worker died {tries + 1} times running it ({type(exc).__name__}: {cause})"
                    crashed = LaneOutcome(None, stop_reason=LaneStop.CRASHED, error=why)
                    output = UnitOutput(await record_of(dataset, problem, index, plan, protocol, crashed,
                                                        LaneSpend(), 0.0), [], {})
                    # The next unit goes to the same worker: not before it is back, or it dies unrun too.
                    await restarted(worker)
                finally:
                    if keeper is not None:
                        keeper.close.remote(token)  # slots a dead worker held go back
                await finish(UnitOutput(replace(output.record, retries=tries), output.blocks, output.refs))

        await asyncio.gather(*(feed(w) for w in workers for _ in range(max(1, settings.jobs))))
    finally:
        for actor in [*workers, *([keeper] if keeper is not None else [])]:
            ray.kill(actor)
        if owns_blocks and blocks is not None:
            blocks.close()
        if started_ray:
            ray.shutdown()
    return stats


def _last_line(exc: BaseException) -> str:
    """The exception line at the end of a Ray error (its traceback and colours dropped)."""
    import re

    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
