"""The one scheduler of the log engine and the remote tier's tasks (``local.scheduler``): workers sharing a queue,
fixed-delay periodic tasks, a stop that waits for the runs in progress, and the mock clock's schedulers.
Synchronised on events; time is only a failure bound."""

from __future__ import annotations

import threading

from local.scheduler import SYSTEM_TIME, MockScheduler, MockTime, Scheduler

LIMIT = 30.0


def test_a_periodic_task_never_runs_twice_at_once_however_many_workers() -> None:
    scheduler = SYSTEM_TIME.new_scheduler("sched-test", threads=3)
    assert type(scheduler) is Scheduler
    scheduler.startup()
    gate, entered, other_ran, three_runs = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    lock = threading.Lock()
    runs, active, most_active = [0], [0], [0]

    def periodic() -> None:
        with lock:
            active[0] += 1
            most_active[0] = max(most_active[0], active[0])
            runs[0] += 1
            if runs[0] >= 3:
                three_runs.set()
        entered.set()
        gate.wait(LIMIT)
        with lock:
            active[0] -= 1

    try:
        scheduler.schedule("periodic", periodic, period_ms=1)
        assert entered.wait(LIMIT)
        scheduler.schedule_once("other", other_ran.set)
        assert other_ran.wait(LIMIT)  # another worker is free, and still the periodic task is not run again...
        assert runs[0] == 1  # ...its next run is due only once this one ends (fixed delay)
        gate.set()
        assert three_runs.wait(LIMIT)
    finally:
        gate.set()
        scheduler.shutdown()
    assert most_active[0] == 1
    assert not [t for t in threading.enumerate() if t.name.startswith("sched-test")]


def test_shutdown_waits_for_the_run_in_progress() -> None:
    scheduler = Scheduler("sched-stop", threads=2)
    scheduler.startup()
    entered, gate = threading.Event(), threading.Event()
    order: list[str] = []

    def task() -> None:
        entered.set()
        gate.wait(LIMIT)
        order.append("run ended")

    scheduler.schedule("held", task, period_ms=1000)
    assert entered.wait(LIMIT)

    def stop() -> None:
        scheduler.shutdown()
        order.append("shutdown returned")

    stopper = threading.Thread(target=stop)
    stopper.start()
    while scheduler.is_started:  # the stop has begun (it takes no new run)...
        threading.Event().wait(0.001)
    gate.set()  # ...and returns only once the run in progress has ended
    stopper.join(LIMIT)
    assert order == ["run ended", "shutdown returned"]


def test_a_mock_clocks_schedulers_run_when_it_advances_even_across_schedulers() -> None:
    clock = MockTime()
    first, second = clock.new_scheduler("a", threads=4), clock.new_scheduler("b")
    assert isinstance(first, MockScheduler) and isinstance(second, MockScheduler)
    ran: list[str] = []

    def on_first() -> None:
        ran.append("first")
        second.schedule_once("chained", lambda: ran.append("second"))  # due at once, on the other scheduler

    first.schedule("periodic", on_first, delay_ms=100, period_ms=100)
    clock.sleep(99)
    assert ran == []
    clock.sleep(1)
    assert ran == ["first", "second"]  # one advance runs what the run made due, on any scheduler of the clock
    clock.sleep(200)
    assert ran.count("first") == 3
    first.shutdown()
    clock.sleep(1000)
    assert ran.count("first") == 3
