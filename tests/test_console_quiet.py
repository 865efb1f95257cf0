"""A step that shows nothing for a while gets one "still running" line (a big model's first steps on CPUs take
minutes here, and silence reads as a hang), naming the step, the last step seen and the full log."""
from __future__ import annotations

import io
import threading
import time

from jobs.local import console as console_lib


def test_a_quiet_step_gets_a_still_running_line_then_one_a_minute(monkeypatch):
    monkeypatch.setattr(console_lib, "QUIET_S", 0.3)
    monkeypatch.setattr(console_lib, "HEARTBEAT_EVERY_S", 0.9)
    c = console_lib.Console(tty=False)
    shown = io.StringIO()
    c.out = c._stream = shown
    c.log_path = "/runs/x/logs/run-1.log"
    for line in ("08:35:13.719 - INFO - Executing task \x1b[96m'train'\x1b[0m",
                 "    [chief-0] strategy=MirroredStrategy replicas=4 global_batch=128 steps=10 (from 0) classes=3",
                 "    [chief-0] step 1/10 loss=1.0000 accuracy=0.3000"):
        c._handle(line)
    beat = threading.Thread(target=c._heartbeat, kwargs={"check_s": 0.05}, daemon=True)
    beat.start()
    time.sleep(0.7)
    lines = [ln for ln in shown.getvalue().splitlines() if "still running" in ln]
    assert lines == [lines[0]] and lines[0].startswith("  train still running at step 1/10: nothing to show for ")
    assert lines[0].endswith("; full log: /runs/x/logs/run-1.log")
    time.sleep(0.9)  # the next one comes a HEARTBEAT_EVERY_S later, not every check
    assert len([ln for ln in shown.getvalue().splitlines() if "still running" in ln]) == 2
    c._handle("08:36:07.341 - INFO - Task \x1b[96m'train'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m")
    before = shown.getvalue()
    time.sleep(0.6)  # no step running: nothing more
    c._quiet.set()
    beat.join(timeout=2)
    assert shown.getvalue() == before


def test_a_quiet_study_names_its_runs_in_flight(monkeypatch):
    """A study's "still running" line says which trials (and the baseline) are going and for how long, not
    "nothing to show"; a run that ended leaves the list."""
    monkeypatch.setattr(console_lib, "QUIET_S", 0.3)
    monkeypatch.setattr(console_lib, "HEARTBEAT_EVERY_S", 5.0)
    c = console_lib.Console(tty=False)
    shown = io.StringIO()
    c.out = c._stream = shown
    for line in ("08:35:13.719 - INFO - Executing task \x1b[96m'tune'\x1b[0m",
                 "    baseline started: the job as it stands (its own arguments: --epochs 3, no tuning flags)",
                 "    trial 1 started: --batch_size=16 --learning_rate=0.01",
                 "    trial 2 started: --batch_size=8 --learning_rate=0.02",
                 "    [trial 1] [chief-0] epoch 1: val_rmse 0.5000",
                 "    trial 1 SUCCEEDED in 8.1 s (1/4 done): val_rmse 0.41 with batch_size=16 learning_rate=0.01; best "
                 "so far: trial 1 (0.41)"):
        c._handle(line)
    beat = threading.Thread(target=c._heartbeat, kwargs={"check_s": 0.05}, daemon=True)
    beat.start()
    time.sleep(0.7)
    c._quiet.set()
    beat.join(timeout=2)
    (line,) = [ln for ln in shown.getvalue().splitlines() if "still running" in ln]
    assert line.startswith("  tune still running: in flight baseline (") and ", trial 2 (" in line, line
    assert "trial 1 (" not in line and "nothing to show" not in line
