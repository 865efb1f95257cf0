"""A step that shows nothing for a while gets one "still running" line (a big model's first steps on CPUs take
minutes here, and silence reads as a hang), naming the step, the last step seen and the full log.

The heartbeat's check (``Console.beat``) runs on the console's module clock, which these tests replace: what
they check does not depend on how soon a thread of a busy machine gets to run. One test runs the real thread,
asserting only what no scheduling delay can change."""
from __future__ import annotations

import io
import threading

import pytest

from jobs.local.run import console as console_lib


class Clock:
    def __init__(self):
        self.t = 5000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(console_lib, "monotonic", c)
    return c


def still_running(shown: io.StringIO) -> list[str]:
    return [ln for ln in shown.getvalue().splitlines() if "still running" in ln]


def quiet_console(lines) -> tuple[console_lib.Console, io.StringIO]:
    c = console_lib.Console(tty=False)
    shown = io.StringIO()
    c.out = c._stream = shown
    c.log_path = "/runs/x/logs/run-1.log"
    for line in lines:
        c._handle(line)
    return c, shown


TRAIN = ("08:35:13.719 - INFO - Executing task \x1b[96m'train'\x1b[0m",
         "    [chief-0] strategy=MirroredStrategy replicas=4 global_batch=128 steps=10 (from 0) classes=3",
         "    [chief-0] step 1/10 loss=1.0000 accuracy=0.3000")


def test_a_quiet_step_gets_a_still_running_line_then_one_a_minute(clock):
    c, shown = quiet_console(TRAIN)
    for t in (1, 10, 29.9):  # quiet, but not yet QUIET_S (30 s)
        clock.t = 5000 + t
        c.beat()
    assert still_running(shown) == []
    clock.t = 5030.0
    c.beat()
    (line,) = still_running(shown)
    assert line == "  train still running at step 1/10: nothing to show for 30 s; full log: /runs/x/logs/run-1.log"
    for t in (31, 60, 89.9):  # not every check: the next one a HEARTBEAT_EVERY_S (60 s) later
        clock.t = 5000 + t
        c.beat()
    assert len(still_running(shown)) == 1
    clock.t = 5090.0
    c.beat()
    assert still_running(shown)[1] == "  train still running at step 1/10: nothing to show for 90 s; full log: " \
                                      "/runs/x/logs/run-1.log"
    c._handle("08:36:07.341 - INFO - Task \x1b[96m'train'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m")
    before = shown.getvalue()
    for t in (200, 1000, 5000):  # no step running: nothing more, however long
        clock.t = 5000 + t
        c.beat()
    assert shown.getvalue() == before


def test_a_line_shown_restarts_the_quiet_time(clock):
    c, shown = quiet_console(TRAIN)
    clock.t = 5025.0
    c._handle("    warning: the input pipeline is slow")  # a line the console shows
    shown_before = shown.getvalue()
    clock.t = 5050.0  # 50 s since the step started, 25 s since it last showed a line
    c.beat()
    assert still_running(shown) == [] and shown.getvalue() == shown_before
    clock.t = 5055.0  # now 30 s quiet
    c.beat()
    assert still_running(shown) == ["  train still running at step 1/10: nothing to show for 30 s; full log: "
                                    "/runs/x/logs/run-1.log"]


def test_a_quiet_study_names_its_runs_in_flight(clock):
    """A study's "still running" line says which trials (and the baseline) are going and for how long, not
    "nothing to show"; a run that ended leaves the list."""
    c, shown = quiet_console(["08:35:13.719 - INFO - Executing task \x1b[96m'tune'\x1b[0m",
                              "    baseline started: the job as it stands (its own arguments: --epochs 3, no tuning "
                              "flags)"])
    clock.t = 5010.0
    for line in ("    trial 1 started: --batch_size=16 --learning_rate=0.01",
                 "    trial 2 started: --batch_size=8 --learning_rate=0.02",
                 "    [trial 1] [chief-0] epoch 1: val_rmse 0.5000",
                 "    trial 1 SUCCEEDED in 8.1 s (1/4 done): val_rmse 0.41 with batch_size=16 learning_rate=0.01; best "
                 "so far: trial 1 (0.41)"):
        c._handle(line)
    clock.t = 5045.0
    c.beat()
    (line,) = still_running(shown)
    assert line == "  tune still running: in flight baseline (45 s), trial 2 (35 s); full log: /runs/x/logs/run-1.log"


def test_the_heartbeat_thread_beats_and_stops(monkeypatch):
    """The real thread, real time: a quiet step gets its line within the test's bound (however slow the machine,
    the line comes; the test waits for it rather than for a fixed time), and nothing after ``_quiet`` is set."""
    monkeypatch.setattr(console_lib, "QUIET_S", 0.05)
    c, shown = quiet_console(TRAIN)
    beat = threading.Thread(target=c._heartbeat, kwargs={"check_s": 0.01}, daemon=True)
    beat.start()
    seen = threading.Event()
    for _ in range(6000):  # up to 60 s
        if still_running(shown):
            seen.set()
            break
        seen.wait(0.01)
    c._quiet.set()
    beat.join(timeout=30)
    assert seen.is_set() and not beat.is_alive()
    assert still_running(shown)[0].startswith("  train still running at step 1/10: nothing to show for ")
