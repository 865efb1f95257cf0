"""Every command's output survives a closed pipe (``vtp validate FILE | head -1``): one rule at the entry point
(``jobs.rules.command_line.survives_closed_pipe`` around ``pipelines/run.py``'s ``main``): exit status 141 (128 + SIGPIPE, as
``cat``/``git log`` under ``pipefail``), nothing on stderr, no traceback; and the local run's console, whose
reader went away, goes on reading what the run writes (a dead reader thread would hang the run).

The pipe is closed before the command starts (its read end closed at once), so that every write fails: the
strictest case of ``| head``, where the reader leaves after its first line, and independent of timing."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from jobs.rules import command_line as cli
from tests.conftest import ROOT

BOUND_S = 120  # a hang is a failure, not a slow machine: every command here takes seconds


def closed_pipe_run(argv: list[str], *, stderr_too: bool = False, cwd=ROOT) -> subprocess.CompletedProcess:
    """``python pipelines/run.py ARGV`` with stdout (and stderr with ``stderr_too``) a pipe nobody reads."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), *argv], stdout=write,
                              stderr=write if stderr_too else subprocess.PIPE, text=True, timeout=BOUND_S, cwd=cwd)
    finally:
        os.close(write)


def _a_run_folder(tmp_path):
    """An output root holding one (unfinished) run, for ``runs list``."""
    run = tmp_path / "runs" / "flowers"
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"name": "flowers"}')
    return tmp_path / "runs"


COMMANDS = {
    "hardware": ["hardware"],
    "hardware-filtered": ["hardware", "--region", "us-central1", "--sources"],
    "validate": ["validate", str(ROOT / "examples" / "tabular-regressor" / "job.yaml")],
    "validate-help": ["validate", "--help"],
    "runs-help": ["runs", "list", "--help"],
    "ci-local-help": ["ci-local", "--help"],
    "runs-list": None,  # filled with a folder per test
}


@pytest.mark.parametrize("stderr_too", [False, True], ids=["stdout", "stdout+stderr"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
@pytest.mark.process
def test_a_command_whose_reader_went_away_exits_141_quietly(name, stderr_too, tmp_path):
    argv = COMMANDS[name] or ["runs", "list", "--root", str(_a_run_folder(tmp_path))]
    done = closed_pipe_run(argv, stderr_too=stderr_too)
    # argparse's own --help swallows the failed write (``_print_message`` ignores OSError) and exits 0
    statuses = (cli.CLOSED_PIPE, 0) if argv[-1] == "--help" else (cli.CLOSED_PIPE,)
    assert done.returncode in statuses, (done.returncode, done.stderr)
    if not stderr_too:
        assert done.stderr == "", done.stderr  # no traceback, no "Exception ignored", no error line


def test_an_open_pipe_still_gets_everything_and_the_command_status():
    """The guard changes nothing while the reader reads: the whole output, status 0 (and 2 for bad input)."""
    done = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "hardware"], capture_output=True,
                          text=True, timeout=BOUND_S)
    assert done.returncode == 0 and done.stdout.count("\n") > 5 and done.stderr == ""
    bad = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "hardware", "--nope"],
                         capture_output=True, text=True, timeout=BOUND_S)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


@pytest.mark.parametrize("raised, expected", [(BrokenPipeError, cli.CLOSED_PIPE), (None, 7), (SystemExit, 3)])
def test_the_guard_turns_only_a_closed_pipe_into_141(raised, expected):
    def command(argv):
        if raised is SystemExit:
            raise SystemExit(3)
        if raised is not None:
            raise raised(32, "Broken pipe")
        return 7

    guarded = cli.survives_closed_pipe(command)
    if raised is SystemExit:
        with pytest.raises(SystemExit) as ended:
            guarded([])
        assert ended.value.code == expected
    else:
        assert guarded([]) == expected


def test_a_console_whose_reader_went_away_lets_the_run_finish(tmp_path):
    """A local run's console (fd 1 and 2 captured, lines shown on the original stdout) with that stdout a closed
    pipe: the run writes far more than a pipe holds and still ends, with its own status, every line in its log."""
    script = textwrap.dedent(f"""
        import sys
        from jobs.local.run.console import Console

        with Console() as console:
            console.set_log_file({str(tmp_path / 'run.log')!r})
            for i in range(20000):
                print(f"warning: line {{i}} " + "x" * 40, flush=True)
            console.drain()
        sys.exit(5)
    """)
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-c", script], stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=BOUND_S, cwd=ROOT)
    finally:
        os.close(write)
    assert done.returncode == 5, done.stderr
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr, done.stderr
    log = (tmp_path / "run.log").read_text().splitlines()
    assert log[-1].startswith("warning: line 19999 ") and len(log) == 20000
