"""Dynamic batching: concurrent requests share the model's forward passes.

Requests wait in an asyncio queue for up to ``max_wait_ms``; what has arrived by then (at
most ``max_batch``) is answered in one call in a single worker thread, so the model is
never called concurrently. A request whose client disconnects leaves the queue, or is
marked cancelled for the model code to stop at its next step (:func:`answer_unless_gone`).
A request whose deadline the work queued ahead of it cannot meet is refused (:class:`Late`,
see :class:`DynamicBatcher`) rather than answered late.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from starlette.types import Receive

from rlcd_lab.decide.deadlines import PassCosts
from rlcd_lab.server.hardening import ApiError, ClientGone, check_number


class Overloaded(ApiError):
    """The batcher's queue is full: a 503 whose ``Retry-After`` is ``retry_after`` seconds
    rounded up (at least 1)."""

    MSG, KIND = "the server is busy; retry shortly", "overloaded"

    def __init__(self, retry_after: float = 1.0) -> None:
        self.retry_after = retry_after
        wait = str(max(1, math.ceil(retry_after)))
        super().__init__(503, self.MSG.format(wait=wait), self.KIND, [], {"Retry-After": wait})


class Late(Overloaded):
    """The work ahead of a job would end past its deadline (see :class:`DynamicBatcher`),
    estimated at ``retry_after`` seconds: a 503 with ``Retry-After``."""

    MSG = (
        "the server cannot answer before this request's deadline: about {wait} s of queued "
        "work is ahead of it; retry after Retry-After seconds"
    )
    KIND = "deadline_unmeetable"


@dataclass
class _Entry:
    """A queued job: its future, its work units and when it arrived (on the clock)."""

    job: Any
    future: asyncio.Future
    units: float
    arrived: float


@dataclass
class _Worker:
    """One event loop's queue and collecting task, and the work units queued in it."""

    queue: asyncio.Queue
    task: asyncio.Task = field(init=False)
    units: float = 0.0


class DynamicBatcher:
    """Collects submitted jobs for up to ``max_wait_ms`` (at most ``max_batch``), then runs
    ``fn(jobs, cancelled) -> results`` once for all of them in a single worker thread;
    ``cancelled(i)`` tells ``fn`` (from its thread) that job ``i``'s caller stopped waiting.

    ``enabled=False`` runs every job on its own (one ``fn([job], ...)`` call each, in
    arrival order): the unbatched baseline. ``submit`` (and :meth:`put`) raise
    :class:`Overloaded` when ``max_pending`` jobs are already waiting; cancelling the task
    awaiting ``submit`` drops its job if it has not reached ``fn`` yet, else marks it
    cancelled. Each running event loop gets its own queue and collecting task (created on
    first use); all of them share the one worker thread, so the model is never called
    concurrently.

    The window costs a lone request its ``max_wait_ms``; it is unconditional, since
    waiting only while another request is being read makes smaller batches and costs
    throughput under many clients.

    ``deadline``: a job's deadline (an instant on ``clock``, or None). A batch then runs in
    deadline order, one ``fn`` call per group of jobs whose deadlines lie within
    ``deadline_slack`` seconds of the group's first (jobs without one last), each group
    answered as soon as its call returns: a job never waits for work done for a later
    deadline than its own plus ``deadline_slack``.

    Admission (with ``deadline``): each job comes with its work ``units`` (the server: the
    characters of its prompts), and every ``fn`` call is measured, so that ``costs``
    (:class:`rlcd_lab.decide.deadlines.PassCosts`, kind ``"call"``: a least-squares fit
    ``a + b units`` of the last 32 calls, at least the quickest) times their spread (the
    largest ratio of a call's seconds to the fit's: wide on a busy machine, near 1 on an
    idle one) estimates the seconds of a call over ``units`` (:meth:`estimate`; 0 before
    the first call). A job
    whose deadline cannot be met behind the work ahead of it is refused with :class:`Late`
    (``retry_after``: the estimated seconds of that work) instead of answered late: at
    :meth:`put`, when a call is running or jobs are queued and the rest of the running
    call plus one call over the queued jobs and itself would end past its deadline; and
    when its group is about to run, when it is not among the deadline-ordered jobs of the
    group that one call can answer in time. A job that arrives at an idle server is
    always taken, and one that could not be answered in time even there (its own
    estimate exceeds its whole budget) runs first in its group, at best effort (the model
    code may still answer it more cheaply, as ``DecisionModel`` cuts reasoning at the
    deadline). ``admission=False`` admits every job (the calls are still measured).

    In the server one batch is one ``DecisionModel.decide_batch`` call: direct answers do not
    depend on the batch; sampled rationales (``reason``, escalated ``auto``) are seeded per
    batch, so they do.
    """

    def __init__(
        self,
        fn: Callable[[list[Any], Callable[[int], bool]], list[Any]],
        *,
        enabled: bool = True,
        max_batch: int = 32,
        max_wait_ms: float = 5.0,
        max_pending: int = 256,
        deadline: Callable[[Any], float | None] | None = None,
        deadline_slack: float = 0.25,
        admission: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ):
        check_number("max_batch", max_batch, 1, 4096, integer=True)
        check_number("max_wait_ms", max_wait_ms, 0, 1000)
        check_number("max_pending", max_pending, 1, 1 << 20, integer=True)
        check_number("deadline_slack", deadline_slack, 0, 3600)
        self.fn, self.enabled = fn, enabled
        self.max_batch = max_batch if enabled else 1
        self.max_wait = max_wait_ms / 1000.0
        self.max_pending = max_pending
        self.deadline, self.deadline_slack = deadline, deadline_slack
        self.admission, self.clock = admission, clock
        self.costs = PassCosts(safety=1.0)  # measured seconds of the fn calls, by work units
        self.batches = self.jobs = 0  # batches run and jobs answered in them, so far
        self.refused = 0  # jobs refused as Late, so far
        self._busy_until: float | None = None  # when the running call should end
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlcd-decide")
        self._workers: dict[asyncio.AbstractEventLoop, _Worker] = {}

    def _worker(self) -> _Worker:
        loop = asyncio.get_running_loop()
        for old in [lp for lp in self._workers if lp.is_closed()]:
            del self._workers[old]
        worker = self._workers.get(loop)
        if worker is None or worker.task.done():
            worker = self._workers[loop] = _Worker(asyncio.Queue())
            worker.task = loop.create_task(self._run(worker))
        return worker

    def estimate(self, units: float) -> float:
        """Seconds one ``fn`` call over ``units`` work units may take: the fit of the
        measured calls (at least the quickest) times their spread, the largest ratio of a
        call's measured seconds to the fit's (at least 1); 0 before the first call."""
        calls = list(self.costs.passes.get("call", ()))
        a, b = self.costs.fit("call")
        spread = max([1.0] + [t / (a + b * n) for n, t in calls if a + b * n > 0])
        return spread * self.costs.estimate("call", round(units))

    def put(self, job: Any, units: float = 0.0) -> asyncio.Future:
        """Queue ``job`` (its work ``units``) now; the future of its result (or its
        exception). :class:`Overloaded` when the queue is full, :class:`Late` when the work
        ahead of it would end past its deadline (see the class docstring). Cancelling the
        future drops the job if it has not reached ``fn`` yet, else marks it cancelled."""
        worker = self._worker()
        if worker.queue.qsize() >= self.max_pending:
            raise Overloaded
        now = self.clock()
        deadline = self.deadline(job) if self.deadline is not None else None
        if self.admission and deadline is not None:
            busy = self._busy_until is not None or not worker.queue.empty()
            rest = max(0.0, self._busy_until - now) if self._busy_until is not None else 0.0
            queued = self.estimate(worker.units) if worker.units else 0.0
            if busy and now + rest + self.estimate(worker.units + units) > deadline:
                self.refused += 1
                raise Late(max(rest + queued, self.estimate(units)))
        future = asyncio.get_running_loop().create_future()
        worker.units += units
        worker.queue.put_nowait(_Entry(job, future, units, now))
        return future

    async def submit(self, job: Any, units: float = 0.0) -> Any:
        """Queue ``job`` and wait for its result (or its exception)."""
        return await self.put(job, units)  # cancelling the caller cancels the future

    async def _collect(self, worker: _Worker) -> list[_Entry]:
        """The next batch: the first job, then what arrives within ``max_wait`` (at most
        ``max_batch``), less the jobs whose callers already left."""
        queue = worker.queue
        batch = [await queue.get()]
        if self.enabled and self.max_batch > 1 and queue.qsize() < self.max_batch - 1:
            await asyncio.sleep(self.max_wait)  # let concurrent requests join
        while len(batch) < self.max_batch and not queue.empty():
            batch.append(queue.get_nowait())
        worker.units = max(0.0, worker.units - sum(e.units for e in batch))
        return [e for e in batch if not e.future.done()]  # client gone

    def _groups(self, batch: list[_Entry]) -> list[list[_Entry]]:
        """``batch`` split by deadline (see the class docstring), earliest first."""
        if self.deadline is None or len(batch) < 2:
            return [batch]
        timed = sorted(
            ((d, i) for i, e in enumerate(batch) if (d := self.deadline(e.job)) is not None)
        )
        groups: list[list[_Entry]] = []
        first = None
        for d, i in timed:
            if first is None or d - first > self.deadline_slack:
                groups.append([])
                first = d
            groups[-1].append(batch[i])
        untimed = [e for e in batch if self.deadline(e.job) is None]
        return groups + ([untimed] if untimed else [])

    def _admit(self, group: list[_Entry]) -> list[_Entry]:
        """The jobs of ``group`` (deadline-ordered) that one call answers in time, the first
        of them also when it never could have been; the others are refused with
        :class:`Late` (the estimated seconds of that call)."""
        if not self.admission or self.deadline is None:
            return group
        now, kept, late = self.clock(), [], []
        for e in group:
            d = self.deadline(e.job)
            trial = [*kept, e]
            first = self.deadline(trial[0].job)
            fits = first is None or now + self.estimate(sum(k.units for k in trial)) <= first
            hopeless = d is not None and self.estimate(e.units) > d - e.arrived
            (kept if fits or (not kept and hopeless) else late).append(e)
        wait = Late(self.estimate(sum(k.units for k in kept)))
        for e in late:
            if not e.future.done():
                self.refused += 1
                e.future.set_exception(wait)
        return kept

    async def _run(self, worker: _Worker) -> None:
        while True:
            batch = await self._collect(worker)
            if not batch:
                continue
            self.batches, self.jobs = self.batches + 1, self.jobs + len(batch)
            for group in self._groups(batch):
                group = self._admit(group)
                if group:
                    await self._answer(group)

    async def _answer(self, batch: list[_Entry]) -> None:
        """One ``fn`` call for ``batch``, measured; its results (or its exception) to the
        futures."""
        loop = asyncio.get_running_loop()
        futures = [e.future for e in batch]

        def cancelled(i: int, futures: list = futures) -> bool:
            return futures[i].done()  # read from the worker thread: a flag, no callbacks

        units = sum(e.units for e in batch)
        start = self.clock()
        self._busy_until = start + self.estimate(units)
        try:
            results = await loop.run_in_executor(
                self._executor, self.fn, [e.job for e in batch], cancelled
            )
        except Exception as err:  # a bug in the model code: every caller gets a 500
            for fut in futures:
                if not fut.done():
                    fut.set_exception(err)
            return
        finally:
            self._busy_until = None
        self.costs.add("call", round(units), self.clock() - start)
        for fut, result in zip(futures, results, strict=True):
            if not fut.done():
                fut.set_result(result)

    async def aclose(self) -> None:
        """Stop the running loop's collecting task (the worker thread stays for others)."""
        worker = self._workers.pop(asyncio.get_running_loop(), None)
        if worker is not None:
            worker.task.cancel()
            with suppress(asyncio.CancelledError):
                await worker.task


async def _until_disconnect(receive: Receive) -> None:
    """Return when the client disconnects (call only after the body was read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def answer_unless_gone(request: Request, answer: Awaitable[Any]) -> Any:
    """``await answer``, unless the client disconnects first: then ``answer`` is cancelled
    (its job leaves the queue, or stops at the model's next step) and ``ClientGone``."""
    task = asyncio.ensure_future(answer)
    gone = asyncio.ensure_future(_until_disconnect(request.receive))
    try:
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
    if task not in done:
        raise ClientGone("while its request waited for the model")
    return task.result()
