"""The step runner: the order of the steps (Cloud Build's ``waitFor`` rule), each step's script run in its own
process group, several at once where Cloud Build would; a step stopped (its timeout, the build's, another
step failed, Ctrl-C) gets SIGINT, then SIGTERM, then SIGKILL; what a step leaves running, its own sessions
included, is swept when it ends (found by :data:`STEP_MARKER` in its environment); each step's
:class:`Outcome` (SUCCESS, FAILURE, TIMEOUT, CANCELLED, not run) and its line in the table."""
from __future__ import annotations

import dataclasses
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

from jobs.commands.ci_local.build_file import Step
from jobs.local.process import lifeline
from jobs.local.process.faults import pids_with_env


def dependencies(steps: list[Step]) -> dict[int, set[int]]:
    """Step index -> the indices it waits for: none for ``waitFor: ['-']`` (and the first step), the named
    ids, or every earlier step when ``waitFor`` is empty (Cloud Build's rule)."""
    by_id = {s.id: s.index for s in steps if s.id}
    deps = {}
    for s in steps:
        if not s.wait_for:
            deps[s.index] = set(range(s.index))
        else:
            deps[s.index] = {by_id[w] for w in s.wait_for if w != "-"}
    return deps


@dataclasses.dataclass
class Outcome:
    step: Step
    status: str = "QUEUED"  # QUEUED (never started), WORKING, SUCCESS, FAILURE, TIMEOUT, CANCELLED
    seconds: float = 0.0
    exit_code: int | None = None
    log: Path | None = None

    @property
    def ok(self) -> bool:
        return self.status == "SUCCESS" or (self.status == "FAILURE" and (
            self.step.allow_failure or self.exit_code in self.step.allow_exit_codes))


STEP_MARKER = "VTP_CI_LOCAL_STEP"  # in every step's environment: <build id>:<step index>


def _stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Stop a step's process group: SIGINT (pytest and Python steps run their clean-ups: a test's dockerd is
    stopped and its files removed), SIGTERM after ``grace_s``, SIGKILL 5 s later."""
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _sweep(marker: str, grace_s: float = 10.0) -> list[int]:
    """Stop whatever a step left running, its own sessions included (a test's dockerd, a registry: they call
    setsid and escape the step's process group, never its environment): SIGTERM, SIGKILL after ``grace_s``.
    As a step's container ends with it. Returns the pids found.

    Each look is two scans 0.1 s apart: a process in the middle of an ``execve`` (``setsid sleep &`` just
    started) can show an empty environment for a moment, and a single scan then missed it (seen here under
    load: the daemon was killed by the next scan but never counted)."""
    found: set[int] = set()

    def look() -> set[int]:
        pids = set(pids_with_env(marker))
        time.sleep(0.1)
        pids |= set(pids_with_env(marker))
        found.update(pids)
        return pids

    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in look():
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while look() and time.monotonic() < deadline:
            time.sleep(0.1)
        if not look():
            break
    return sorted(found)


class Runner:
    """Runs the steps by their waits, several at once where Cloud Build would."""

    def __init__(self, steps: list[Step], workspace: Path, rundir: Path, env_for, deadline: float,
                 verbose: bool, out=print):
        self.steps, self.workspace, self.rundir = steps, workspace, rundir
        self.env_for, self.deadline, self.verbose, self.out = env_for, deadline, verbose, out
        self.outcomes = {s.index: Outcome(s) for s in steps}
        self.procs: dict[int, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self.done: queue.Queue[int] = queue.Queue()
        self.stopping: set[int] = set()  # steps to stop because another failed (or the build timed out)
        self.cancelled: set[int] = set()  # of those, the ones whose process was running and was stopped

    def _run_one(self, step: Step) -> None:
        outcome = self.outcomes[step.index]
        script = self._script(step)
        outcome.log = self.rundir / "logs" / f"{script.stem}.log"
        outcome.log.parent.mkdir(parents=True, exist_ok=True)
        cwd = self.workspace / step.dir if step.dir else self.workspace
        started = time.monotonic()
        limit = self.deadline - started
        if step.timeout_s:
            limit = min(limit, step.timeout_s)
        try:
            cwd.mkdir(parents=True, exist_ok=True)
            env = self.env_for(step)
            with open(outcome.log, "wb") as log:
                with self.lock:  # started and registered at once: stop_all either sees it or it never starts
                    if step.index in self.stopping:
                        outcome.status = "CANCELLED"
                        return
                    # under the supervisor (jobs.local.process.lifeline): kill -9 of this command stops the step's whole
                    # group, not only its bash script
                    proc = subprocess.Popen(lifeline.supervised([str(script)]), cwd=cwd, env=env,
                                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            start_new_session=True, preexec_fn=lifeline.preexec(signal.SIGTERM))
                    self.procs[step.index] = proc
                reader = threading.Thread(target=self._copy, args=(proc.stdout, log, step.label), daemon=True)
                reader.start()
                try:
                    outcome.exit_code = proc.wait(max(limit, 0.01))
                    outcome.status = "SUCCESS" if outcome.exit_code == 0 else "FAILURE"
                except subprocess.TimeoutExpired:
                    outcome.status = "TIMEOUT"
                    _stop_group(proc)
                    outcome.exit_code = proc.returncode
                left = _sweep(f"{STEP_MARKER}={env[STEP_MARKER]}\0")  # the whole entry: step 1 is not step 10
                if left:
                    log.write(f"ci-local: stopped {len(left)} process(es) the step left running\n".encode())
                reader.join(10)
                with self.lock:
                    if step.index in self.cancelled and outcome.status == "FAILURE":
                        outcome.status = "CANCELLED"
        except OSError as exc:
            outcome.status, outcome.exit_code = "FAILURE", None
            outcome.log.write_text(f"could not start {script}: {exc}\n")
        finally:
            outcome.seconds = time.monotonic() - started
            with self.lock:
                self.procs.pop(step.index, None)
            self.done.put(step.index)

    def _script(self, step: Step) -> Path:
        return self.rundir / "scripts" / f"{step.index:02d}-{step.label.replace(' ', '_').replace('#', '')}.sh"

    def write_scripts(self) -> None:
        """Every step's script, written before any step starts: a file still open for writing when another
        thread forks cannot be executed (ETXTBSY)."""
        for step in self.steps:
            script = self._script(step)
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(step.script if step.script.startswith("#!") else "#!/bin/sh\n" + step.script)
            script.chmod(0o755)

    def _copy(self, pipe, log, label: str) -> None:
        for line in iter(pipe.readline, b""):
            log.write(line)
            log.flush()
            if self.verbose:
                self.out(f"{label} | {line.decode(errors='replace').rstrip()}")
        pipe.close()

    def stop_all(self, running: set[int]) -> None:
        with self.lock:
            self.stopping |= running
            procs = [p for i, p in self.procs.items() if i in running and p.poll() is None]
            self.cancelled |= {i for i, p in self.procs.items() if p in procs}
        threads = [threading.Thread(target=_stop_group, args=(proc,), daemon=True) for proc in procs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def run(self) -> bool:
        self.write_scripts()
        deps = dependencies(self.steps)
        running: set[int] = set()
        finished: set[int] = set()  # steps whose end this loop has taken in (and said)
        failed = False
        try:
            while True:
                if not failed:
                    for s in self.steps:
                        o = self.outcomes[s.index]
                        if o.status == "QUEUED" and all(d in finished and self.outcomes[d].ok for d in deps[s.index]):
                            o.status = "WORKING"
                            running.add(s.index)
                            self.out(f"--> {s.label} ({s.name})")
                            threading.Thread(target=self._run_one, args=(s,), daemon=True).start()
                if not running:
                    break
                try:
                    index = self.done.get(timeout=max(0.05, min(1.0, self.deadline - time.monotonic())))
                except queue.Empty:
                    if time.monotonic() >= self.deadline and not failed:
                        failed = True  # the build's timeout: every running step is stopped
                        self.out(f"build timeout reached: stopping {len(running)} running step(s)")
                        self.stop_all(running)
                    continue
                running.discard(index)
                finished.add(index)
                o = self.outcomes[index]
                self.out(f"<-- {self.line(o)}")
                if not o.ok and not failed:
                    failed = True
                    self._tail(o)
                    if running:
                        self.stop_all(running)
        except KeyboardInterrupt:
            self.stop_all(running)
            deadline = time.monotonic() + 20  # their ends, so that the table says CANCELLED
            while running and time.monotonic() < deadline:
                try:
                    running.discard(self.done.get(timeout=0.5))
                except queue.Empty:
                    pass
            raise
        return not failed and all(o.ok for o in self.outcomes.values())

    @staticmethod
    def line(o: Outcome) -> str:
        status = o.status
        if o.status == "FAILURE":
            status += f" (exit {o.exit_code}{', allowed' if o.ok else ''})"
        elif o.status == "QUEUED":
            status = "NOT RUN"
        return f"{o.step.label:<20} {status:<22} {o.seconds:8.1f} s" if o.status != "QUEUED" \
            else f"{o.step.label:<20} {status:<22} {'-':>8}"

    def _tail(self, o: Outcome, lines: int = 40) -> None:
        if o.log and o.log.is_file() and not self.verbose:
            tail = o.log.read_text(errors="replace").splitlines()[-lines:]
            self.out(f"    last {len(tail)} lines of {o.log}:")
            for line in tail:
                self.out(f"    | {line}")
