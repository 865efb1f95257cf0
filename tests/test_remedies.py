"""Every remedy one that works, and nothing accepted that does nothing (issue 51 items 3, 4, 6), each as a user
meets it: the command typed as ``vtp`` (a console script named so, on this checkout), the line read, the remedy it
gives followed exactly as written, and the result checked. No TensorFlow is trained here: the runs that would only
repeat a finished one are folders built by hand (the checks under test come before the first step)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from jobs.local.run.lock import RunLock
from jobs.moved import COMMANDS, EXIT_MOVED, moved_on
from jobs.rules import validate
from tests.conftest import finished_run

ROOT = Path(__file__).resolve().parent.parent

TRAINER = textwrap.dedent('''\
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.1)
    a = p.parse_args()
    if a.lr <= 0:
        raise RuntimeError(f"on purpose: lr must be > 0, got {a.lr:g}")
    print("trained", a.epochs, "epochs", flush=True)
''')
JOB = textwrap.dedent('''\
    name: myclf
    trainer: {source_dir: ., module: trainer.task, args: ["--epochs", "2"]}
    topology: {strategy: one_device, worker: {replica_count: 0}}
    output: {base_dir: runs/myclf}
''')


@pytest.fixture
def project(tmp_path) -> Path:
    folder = tmp_path / "proj"
    (folder / "trainer").mkdir(parents=True)
    (folder / "trainer" / "__init__.py").write_text("")
    (folder / "trainer" / "task.py").write_text(TRAINER)
    (folder / "job.yaml").write_text(JOB)
    return folder


@pytest.fixture
def vtp(tmp_path):
    """``vtp ARGS`` run as the console script (argv[0] named vtp) on this checkout, in the project folder."""
    script = tmp_path / "bin" / "vtp"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom pipelines.run import main\nsys.exit(main())\n")
    script.chmod(0o755)

    def run(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    return run


def _errors(proc: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in proc.stdout + proc.stderr
    return [x for x in proc.stderr.splitlines() if x.startswith("error: ")]


def _choices(line: str) -> list[str]:
    return line.split("; valid choices: ", 1)[1].split(", ")


# -- 3: nothing accepted that does nothing ------------------------------------------------------------------
def test_a_field_only_the_builtin_trainer_reads_is_a_warning_and_its_remedy_reaches_the_trainer(project, vtp):
    finished_run(project / "job.yaml")
    proc = vtp("--config", "job.yaml", "--set", "training.epochs=10", cwd=project)
    warnings = [x for x in proc.stderr.splitlines() if x.startswith("warning: ")]
    assert warnings == [
        "warning: training.epochs: only the built-in trainer reads it, and this job runs your trainer (python -m "
        "trainer.task): it changes nothing; your trainer's own flags go in trainer.args; valid choices: --set "
        "'trainer.args=[\"--epochs\",\"10\"]'"], proc.stderr
    # and the folder's finished run is not "another job" for a field that makes nothing
    assert proc.returncode == 0 and "is already complete" in proc.stdout, proc.stdout + proc.stderr
    remedy = shlex.split(_choices(warnings[0])[0])  # exactly as written: --set 'trainer.args=[...]'
    cfg = validate.load(str(project / "job.yaml"), [remedy[1]])
    assert cfg.trainer.args == ["--epochs", "10"]  # what every replica now gets: python -m trainer.task --epochs 10
    proc = vtp("validate", "job.yaml", *remedy, cwd=project)
    assert proc.returncode == 0 and "warning:" not in proc.stderr, proc.stderr


def test_an_unknown_replica_is_an_error_naming_the_runs_replicas_and_the_one_named_works(project, vtp):
    base = finished_run(project / "job.yaml")
    (base / "logs" / "replicas" / "attempt-1").mkdir(parents=True)
    (base / "logs" / "replicas" / "attempt-1" / "chief-0.log").write_text("epoch 1/2 loss 0.5\n")
    proc = vtp("logs", "runs/myclf", "--replica", "worker-0", cwd=project)
    assert proc.returncode == 2 and _errors(proc) == [
        "error: --replica worker-0: runs/myclf has no replica worker-0 (its replicas: chief-0); e.g. --replica chief-0"]
    proc = vtp("logs", "runs/myclf", *_errors(proc)[0].rsplit("e.g. ", 1)[1].split(), cwd=project)
    assert proc.returncode == 0 and proc.stdout == "attempt 1\tchief-0\tepoch 1/2 loss 0.5\n"


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_failed_run_keeps_its_cause_in_history_and_a_rerun_says_it_starts_over(project, vtp):
    """The trainer raises before anything is trained (no TensorFlow): the console's exception line is in runs list and
    runs show; the rerun of that unfinished run, whose trainer left no checkpoint, says it starts from the beginning."""
    proc = vtp("--config", "job.yaml", "--set", 'trainer.args=["--lr", "-1"]', cwd=project)
    assert proc.returncode == 1
    said = "chief-0's error: RuntimeError: on purpose: lr must be > 0, got -1"
    assert said in proc.stderr
    listed = vtp("runs", "list", cwd=project)
    assert listed.returncode == 0 and f"exited with status 1. {said}" in listed.stdout, listed.stdout
    shown = vtp("runs", "show", "myclf", cwd=project)
    assert shown.returncode == 0 and f"cause         {said}\n" in shown.stdout, shown.stdout
    assert "logs          vtp logs runs/myclf\n" in shown.stdout
    data = json.loads(vtp("runs", "show", "myclf", "--json", cwd=project).stdout)
    assert data["status"] == "failed" and data["cause"] == [said]
    proc = vtp("--config", "job.yaml", "--set", 'trainer.args=["--lr", "-1"]', cwd=project)  # the resume
    base = project / "runs" / "myclf"
    assert (f"note: the unfinished run in {base} left no checkpoint in {base}/checkpoints: your trainer left none "
            "there (AIP_CHECKPOINT_DIR), so this run starts from the beginning") in proc.stdout, proc.stdout


# -- 4: every remedy one that works ----------------------------------------------------------------------------
def test_the_plans_image_remedy_works_and_its_image_flag_is_said_not_to(project, vtp):
    proc = vtp("plan", "job.yaml", "--image", f"us-central1-docker.pkg.dev/acme/c/comp@sha256:{'a' * 64}", cwd=project)
    (line,) = [x for x in _errors(proc) if x.startswith("error: container.image_uri")]
    assert "plan's --image is the pipeline components' image, not the one the replicas run" in line
    first = _choices(line)[0].split(" (")[0]  # --set container.image_repository=us-central1-docker.pkg.dev/PROJECT/...
    proc = vtp("plan", "job.yaml", *first.replace("PROJECT", "acme-ml").split(" ", 1), cwd=project)
    assert not [x for x in _errors(proc) if x.startswith("error: container.image_uri")], proc.stderr
    assert "acme-ml/training/tf-trainer:<content tag>@sha256:<digest>" in proc.stdout


def test_a_missing_eval_file_suggests_the_local_one_beside_the_job_and_it_works(project, vtp):
    (project / "eval.jsonl").write_text('{"instance": [0.1], "label": 1.0}\n{"instance": [0.2], "label": 2.0}\n')
    proc = vtp("validate", "job.yaml", "--set", "serving.eval_data=evaluation.jsonl", cwd=project)
    (line,) = _errors(proc)
    assert _choices(line) == [str(project / "eval.jsonl")] and "gs://" not in line
    proc = vtp("validate", "job.yaml", "--set", f"serving.eval_data={_choices(line)[0]}", cwd=project)
    assert proc.returncode == 0, proc.stderr


def test_a_number_in_args_says_to_quote_it_and_quoted_it_validates(project, vtp):
    (project / "job.yaml").write_text(JOB.replace('"2"', "2"))
    proc = vtp("validate", "job.yaml", cwd=project)
    (line,) = _errors(proc)
    assert line == ('error: trainer.args[1]: expected a string, got int 2 (YAML reads an unquoted 2 as a number: quote '
                    'it, "2"); valid choices: "2"')
    (project / "job.yaml").write_text(JOB.replace('"2"', "2").replace("2]", _choices(line)[0] + "]"))
    assert vtp("validate", "job.yaml", cwd=project).returncode == 0


def test_the_wait_running_out_says_how_to_wait_longer_and_that_works(project, vtp):
    base = finished_run(project / "job.yaml")
    lock = RunLock(str(base)).acquire()
    try:
        proc = vtp("--config", "job.yaml", "--wait", "1", cwd=project)
        assert proc.returncode == 75
        (line,) = _errors(proc)
        assert "; waited 1 s; wait longer (--wait with no number waits up to a day; or --wait 3600), or run " \
               "elsewhere" in line and "python -m" not in line
        threading.Timer(3.0, lock.release).start()  # the other run ends a little later
        started = time.monotonic()
        proc = vtp("--config", "job.yaml", "--wait", "3600", cwd=project)  # as said
        assert proc.returncode == 0 and "is already complete" in proc.stdout, proc.stdout + proc.stderr
        assert time.monotonic() - started >= 2.5
    finally:
        lock.release()


def test_a_mistyped_run_name_gets_a_did_you_mean_that_works(project, vtp):
    finished_run(project / "job.yaml")
    finished_run(project / "job.yaml", f"output.base_dir={project / 'runs' / 'other'}")
    for command in (["compare", "other", "mycfl"], ["show", "mycfl"]):
        proc = vtp("runs", *command, cwd=project)
        (line,) = _errors(proc)
        assert "no run named 'mycfl' under runs (did you mean 'myclf'?)" in line
        proc = vtp("runs", *command[:-1], "myclf", cwd=project)
        assert proc.returncode == 0 and "error" not in proc.stderr, proc.stderr


def test_the_commands_a_user_guesses_point_at_the_one_that_works_or_work(project, vtp):
    finished_run(project / "job.yaml")
    for guess in (["job.yaml"], ["run", "--config", "job.yaml"]):
        proc = vtp(*guess, cwd=project)
        (line,) = _errors(proc)
        assert proc.returncode == 2 and line.endswith(": vtp --config job.yaml (see vtp --help)"), line
        meant = line.split(": vtp ", 1)[1].split(" (see")[0].split()
        proc = vtp(*meant, cwd=project)
        assert proc.returncode == 0 and "is already complete" in proc.stdout, proc.stderr
    proc = vtp("plan", "job.yaml", cwd=project)  # as validate takes it
    assert "unrecognized arguments" not in proc.stderr and proc.stdout.startswith("plan: myclf in project PROJECT")
    assert "given twice" in vtp("plan", "job.yaml", "--config", "other.yaml", cwd=project).stderr


COMMANDS_OF_VTP = ["validate", "plan", "hardware", "build", "upload-template", "register-model", "components", "runs",
                   "logs", "ci-local"]


def test_help_opens_with_what_a_user_can_do_in_plain_text_as_typed(project, vtp):
    proc = vtp("--help", cwd=project)
    head = proc.stdout.split("\noptions:")[0]
    assert head.startswith("usage: vtp [--config JOB] [--set KEY=VALUE] [options]\n       vtp COMMAND")
    assert "vtp --config job.yaml " in head and "commands:\n  validate JOB" in head
    for text in [proc.stdout, *(vtp(c, "--help", cwd=project).stdout for c in COMMANDS_OF_VTP)]:
        for mark in ("``", ":func:`", ":data:`", "Wiring", "python pipelines/run.py", "run.py "):
            assert mark not in text, (mark, text[:400])
    checkout = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "--help"], capture_output=True,
                              text=True, cwd=project, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert "  python pipelines/run.py --config job.yaml " in checkout.stdout  # typed from a checkout: said so


def test_the_docker_runner_names_the_build_command_as_typed(project, vtp, tmp_path):
    proc = vtp("--config", "job.yaml", "--runner", "docker", "--image", "127.0.0.1:5999/my-trainer", cwd=project,
               env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert proc.returncode == 1 and proc.stdout.startswith("runner docker: building the job's image (as vtp build)")


# -- 6: an old command, one line -------------------------------------------------------------------------------
@pytest.mark.parametrize("old", sorted(COMMANDS))
def test_an_old_command_says_the_new_one_in_one_line(old):
    module = old[:-len(".__main__")] if old.endswith(".__main__") else old
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == EXIT_MOVED and proc.stdout == ""
    assert proc.stderr == f"error: python -m {module} moved: run {COMMANDS[old]} (CHANGELOG.md, {moved_on(old)})\n"
    new = COMMANDS[old].split("(")[-1].rstrip(")") if "(" in COMMANDS[old] else COMMANDS[old]
    assert new.startswith("python -m ")
    works = subprocess.run([sys.executable, *new.split()[1:], "--help"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "Traceback" not in works.stderr and "moved" not in works.stderr, works.stderr
