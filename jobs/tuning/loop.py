"""The loop of a local study: up to ``parallel_trials`` trials at once, each in a worker thread, the baseline in a
slot of its own; the main thread asks the search, records and says each run as it starts and ends, and decides
when the study stops (too many failed trials, a metric never reported, a tuning flag the trainer refuses, Ctrl-C).
:mod:`jobs.tuning.local` tells the rules and runs it (:class:`StudyLoop`).
"""
from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any, Callable

from jobs.rules import tuning_rules
from jobs.run_records import records, trial_files
from jobs.tuning import record as record_lib, trial as trial_lib
from jobs.tuning.failures import OWN, flag_refused
from jobs.tuning.search import Search
from jobs.rules.tuning_rules import ACTIVE, FAILED, INFEASIBLE, STOPPED, SUCCEEDED
from jobs.rules.tuning_section import Study
from jobfile import config as config_lib
from jobfile.paths import join

#: the states of a trial that has ended and counts as done (n/N in its line)
ENDED = (SUCCEEDED, FAILED, INFEASIBLE)


class StudyLoop:
    """One run of a study (a first run, or a rerun resuming it) from its record in ``base``: the trials kept,
    to run again and new, the baseline, the failures so far, the events that stop the runs. Used from the main
    thread only; :meth:`say` is the one log the worker threads share."""

    def __init__(self, cfg: config_lib.JobConfig, study: Study, base: str, log: Callable[[str], None]):
        self.cfg, self.study, self.base, self._log, self._lock = cfg, study, base, log, threading.Lock()
        self.record = record_lib.resumed(cfg, study, base)
        self.search = Search(study, cfg.training.seed)
        self.kept = {tr["id"] for tr in self.record["trials"] if tr["state"] == SUCCEEDED}
        handles = self.search.replay(self.record["trials"], self.kept)
        self.queue = [tr for tr in sorted(self.record["trials"], key=lambda x: int(x["id"]))
                      if tr["id"] not in self.kept]
        for trial in self.queue:
            trial["handle"] = handles[trial["id"]]
        self.next_id = max([int(tr["id"]) for tr in self.record["trials"]] + [0]) + 1
        self.baseline = None  # the baseline to run (None: off, or kept from an earlier run of the study)
        if study.baseline:
            earlier = tuning_rules.baseline_of(self.record)
            if earlier is None or earlier.get("state") != SUCCEEDED:
                self.baseline = self.record[tuning_rules.BASELINE] = {"id": tuning_rules.BASELINE}
        self.stop = threading.Event()
        self.baseline_stop = threading.Event()  # the baseline is stopped with the trials, and when the study fails
        self.failures: list[dict[str, Any]] = []
        self.refused: list = []  # the problem when the first trials all failed on argparse's refusal of a tuning flag
        self.suspects: list[dict[str, Any]] = []  # exit 0 without the metric while no trial has reported it
        self.seen_metric = bool(self.kept)
        self.hold = False  # no new trial starts: a suspected configuration error waits for the running trials
        self.running: dict[concurrent.futures.Future, dict[str, Any]] = {}
        self.allowed = study.max_failed_trials or 1
        self.public: dict[str, Any] = {}  # the record as last written

    def say(self, line: str) -> None:
        with self._lock:
            self._log(line)

    def say_resumed(self) -> None:
        """One line when the record held trials: which are kept, which run again, and the baseline."""
        if not (self.kept or self.queue):
            return
        again = f", trial(s) {', '.join(tr['id'] for tr in self.queue)} run again" if self.queue else ""
        baseline = ("" if not self.study.baseline else "; the baseline runs again" if self.baseline is not None
                    else "; the baseline's result kept")
        self.say(f"resuming the study in {join(self.base, records.TUNING_RECORD)}: {len(self.kept)} finished "
                 f"trial(s) kept{again}{baseline}")

    def write(self) -> dict[str, Any]:
        return record_lib.write(self.base, self.record)

    def trials_running(self) -> int:
        return sum(1 for run in self.running.values() if run["id"] != tuning_rules.BASELINE)

    # -- a run starts and ends --------------------------------------------------------------------------------
    def start(self, pool, trial: dict[str, Any]) -> None:
        trial.update(state=ACTIVE, model_dir=join(trial_files.trial_base(self.base, trial["id"]), "model"))
        for key in ("metric", "seconds", "reported_tags", "error", "exit_status", OWN):
            trial.pop(key, None)
        if trial["id"] == tuning_rules.BASELINE:
            self.say(f"baseline started: the job as it stands ({trial_lib.as_it_stands(self.cfg)})")
            prefix, stop = "[baseline] ", self.baseline_stop
        else:
            self.say(f"trial {trial['id']} started: {' '.join(self.study.flags(trial['parameters']))}")
            prefix, stop = f"[trial {trial['id']}] ", self.stop
        self.running[pool.submit(trial_lib.run_trial, self.cfg, self.study, trial, self.base,
                                 lambda line: self.say(prefix + line), stop)] = trial
        self.write()

    def ended_line(self, trial: dict[str, Any]) -> str:
        """The trial's line (``jobs.rules.tuning_rules.trial_line``: the same as a Vertex study's)."""
        ended = sum(1 for tr in self.record["trials"] if tr.get("state") in ENDED)
        return tuning_rules.trial_line(trial, self.study.metric, ended, self.study.trial_limit,
                                       self.study.best(self.record["trials"]),
                                       tuning_rules.baseline_metric(tuning_rules.baseline_of(self.record)))

    def finish(self, trial: dict[str, Any], outcome: dict[str, Any]) -> None:
        trial.update(outcome)
        if trial["id"] == tuning_rules.BASELINE:
            self._baseline_ended(trial)
        elif trial["state"] == SUCCEEDED:
            self.search.tell(trial["handle"], trial.get("metric"))
            self.seen_metric, self.hold = True, False
            self.say(self.ended_line(trial))
            for s in self.suspects:  # another trial reports the metric: theirs were failed trials, not the config
                s["state"] = INFEASIBLE
                self.failures.append(s)
            self.suspects.clear()
        elif trial["state"] == INFEASIBLE and not self.seen_metric:
            self.search.tell(trial["handle"], None)
            self.suspects.append(trial)
            self.hold = True
            self.say(f"trial {trial['id']} ended without a finite {self.study.metric} (reported: "
                     f"{', '.join(trial.get('reported_tags') or []) or 'nothing'}); no new trial starts until the "
                     "running ones end")
        elif trial["state"] in (FAILED, INFEASIBLE):
            self._failed(trial)
        elif trial["state"] == STOPPED:
            self.say(f"trial {trial['id']} stopped")

    def _baseline_ended(self, trial: dict[str, Any]) -> None:
        state, metric = trial["state"], self.study.metric
        if state == SUCCEEDED:
            best = self.study.best(self.record["trials"])
            so_far = (f"best trial so far: trial {best['id']} ({tuning_rules.format_value(best['metric'])})" if best
                      else "no trial has succeeded yet")
            self.say(f"baseline SUCCEEDED in {trial['seconds']:.1f} s: {metric} "
                     f"{tuning_rules.format_value(trial.get('metric'))} (the job as it stands); {so_far}")
        elif state == STOPPED:
            self.say("baseline stopped")
        else:
            self.say(f"baseline {state} in {trial.get('seconds', 0):.1f} s: "
                     + (trial.get("error") or f"no finite {metric} reported")
                     + "; the best trial goes on without a comparison")

    def _failed(self, trial: dict[str, Any]) -> None:
        """A FAILED or INFEASIBLE trial: counted, said; when every trial so far failed on the trainer's refusal of
        one tuning flag, the study stops at once."""
        self.search.tell(trial["handle"], None)
        self.failures.append(trial)
        self.say(self.ended_line(trial))
        ended = [tr for tr in self.record["trials"] if tr.get("state") in ENDED]
        all_failed = not self.seen_metric and all(tr["state"] == FAILED for tr in ended)
        flag = flag_refused(self.study, ended) if all_failed else None
        if flag is not None and not self.refused:
            self.refused.append(flag)
            self.hold = True
            self.say(f"the study stops: every trial so far failed on the trainer's refusal of a tuning flag "
                     f"({flag.field}); stopping the running trials")
            self.stop.set()
            self.baseline_stop.set()

    # -- the loop ---------------------------------------------------------------------------------------------
    def _fill(self, pool) -> None:
        """Start trials (again, then new ones from the search) while a slot is free and nothing holds them."""
        while (self.trials_running() < self.study.parallel_trials and not self.hold and not self.stop.is_set()
               and len(self.failures) < self.allowed):
            if self.queue:
                self.start(pool, self.queue.pop(0))
            elif len(self.record["trials"]) < self.study.trial_limit:
                handle, params = self.search.ask()
                trial = {"id": str(self.next_id), "parameters": params, "handle": handle}
                self.next_id += 1
                self.record["trials"].append(trial)
                self.start(pool, trial)
            else:
                break

    def run(self) -> bool:
        """Run the study to its end; returns whether it was interrupted (Ctrl-C: every run stopped and recorded
        first). The record's ``seconds`` add this run's time to the earlier runs'."""
        started, prior = time.monotonic(), self.record.get("seconds") or 0.0  # a resumed study's time adds up
        slots = self.study.parallel_trials + (self.baseline is not None)  # the baseline's slot is its own
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=slots, thread_name_prefix="trial")
        try:
            if self.baseline is not None:
                self.start(pool, self.baseline)
            while True:
                self._fill(pool)
                if (not self.trials_running() and (self.suspects or len(self.failures) >= self.allowed)
                        and not self.baseline_stop.is_set() and self.running):
                    self.say("the study stops: stopping the baseline")  # nothing left to compare it with
                    self.baseline_stop.set()
                if not self.running:
                    return False
                self._wait()
        except KeyboardInterrupt:
            self._stop_all()
            self.say("interrupted: stopping every trial (SIGTERM, checkpoint, then SIGKILL)")
            self._drain()
            return True
        except BaseException:
            self._stop_all()
            self._drain()
            raise
        finally:
            pool.shutdown(wait=True)
            self.record["seconds"] = round(prior + time.monotonic() - started, 1)
            self.public = self.write()

    def _wait(self) -> None:
        done, _ = concurrent.futures.wait(list(self.running), timeout=0.2,
                                          return_when=concurrent.futures.FIRST_COMPLETED)
        for future in done:
            trial = self.running.pop(future)
            self.finish(trial, future.result())
            self.write()
            if len(self.failures) >= self.allowed and not self.stop.is_set() and self.trials_running():
                self.say(f"{len(self.failures)} failed trial(s) reach tuning.max_failed_trials: stopping the running "
                         "trials")
                self.stop.set()

    def _stop_all(self) -> None:
        self.stop.set()
        self.baseline_stop.set()

    def _drain(self) -> None:
        """Wait for every running trial to stop (their launchers saw ``stop``: SIGTERM, grace, SIGKILL); a second
        Ctrl-C does not cut this short: the trials' processes must not be left behind."""
        while self.running:
            try:
                done, _ = concurrent.futures.wait(list(self.running), timeout=0.2,
                                                  return_when=concurrent.futures.FIRST_COMPLETED)
            except KeyboardInterrupt:
                self.say("still stopping the trials; they are killed after the grace period")
                continue
            for future in done:
                trial = self.running.pop(future)
                try:
                    self.finish(trial, future.result())
                except Exception as exc:  # the trial's thread failed: record it, keep stopping the others
                    trial.update(state=FAILED, error=" ".join(str(exc).split()))
