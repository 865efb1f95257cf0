"""Issue 56: the newest surfaces (``vtp plan``, ``vtp logs``, ``runs prune``, run locks, ``provenance.json``, the
precision cache, ``python -m jobs.cloud.apis.project``) under bad input and kills, one test per class on each surface, as
the user meets it (a subprocess where the user runs one). Each class's rule has one owner:

* nothing of the user's written over or deleted: ``jobs.commands.output_file`` (``--out``), ``jobs.local.history.prune``
  (``.X.removing`` only with its own record), ``jobs.local.run.lock`` + ``jobs.local.process.lifeline`` (a process
  stopped only by the run's token), ``jobs.local.run.folder.check_folder`` (no record: ``--fresh``);
* every record read by THE reader: ``trainers.record_reader``;
* a refused credential: ``jobs.cloud.apis.credentials`` (``_guarded``, ``refresh_refused``, ``endpoint_problem``);
* names by their forms: ``trainers.resource_names`` (and ``jobs.cloud.apis.job_logs.log_filter``'s quoting);
* bounded work: ``jobs.rules.validate.list_limit_problems``, ``regular_file.open_regular``;
* flag against file: ``jobs.commands.flag_file``.
The kill of a study is ``tests/test_lifeline.py``'s.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from jobs.commands import logs_cli, runs_cli
from jobs.local.process import lifeline
from jobs.local.run.folder import COPY_RECORD, NotThisJob, check_folder, making, write_making
from jobs.local.run.lock import LOCK_NAME, RunLock
from jobs.run_records import records
from tests.conftest import ROOT
from tests.standins.cloud_logging import LoggingStandIn
from trainers import precision, precision_auto, record_reader
from jobfile import config as config_lib

BOUND_S = 120


def vtp(*args: str, cwd: Path, env: dict | None = None, timeout: float = BOUND_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), *args], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=timeout)


def one_error(proc: subprocess.CompletedProcess, fragment: str, status: int = 2) -> str:
    """The run said one ``error:`` line holding ``fragment`` (and no traceback), with exit ``status``."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == status and any(fragment in e for e in errors), (proc.returncode, proc.stderr[-2000:])
    return next(e for e in errors if fragment in e)


@pytest.fixture
def job(tmp_path) -> Path:
    path = tmp_path / "job.yaml"
    shutil.copy(ROOT / "jobfile" / "presets" / "local.yaml", path)
    return path


# ---- vtp plan --out: nothing of the user's written over (jobs.commands.output_file) ------------------------------------
def test_plan_out_never_writes_over_the_users_files_and_each_refusal_is_one_line(tmp_path, job):
    before = job.read_bytes()
    other = tmp_path / "notes.json"
    other.write_text('{"mine": true}\n')
    (tmp_path / "link.json").symlink_to(other)
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "folder").mkdir()
    cases = {"job.yaml": "is this command's input (the job file", "notes.json": "exists and is not a file vtp plan wrote",
             "link.json": "is a symbolic link", "fifo.json": "is a named pipe (FIFO)", "folder": "is a folder",
             "a" * 300 + ".json": "more than the 255 a file name may have", "": "is empty",
             "no/such/plan.json": "does not exist"}
    for out, fragment in cases.items():
        assert fragment in one_error(vtp("plan", "--config", "job.yaml", "--out", out, cwd=tmp_path), "--out: ")
    assert job.read_bytes() == before and other.read_text() == '{"mine": true}\n'
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "fifo.json").is_fifo()
    # a plan it wrote is replaced, beside no temporary file (a plan with errors is not saved: a plan that fits)
    fits = ("--set", f"container.image_uri=us-central1-docker.pkg.dev/acme-ml/training/tf-trainer:v1@sha256:{'a' * 64}",
            "--set", "output.base_dir=gs://acme-runs/runs/x", "--set", "data.path=gs://acme-runs/flowers")
    assert vtp("plan", "--config", "job.yaml", *fits, "--out", "plan.json", cwd=tmp_path).returncode == 0
    first = json.loads((tmp_path / "plan.json").read_text())
    assert first["kind"] == "vtp-plan"
    proc = vtp("plan", "--config", "job.yaml", *fits, "--out", "plan.json", cwd=tmp_path)
    assert "plan saved to plan.json" in proc.stdout and not list(tmp_path.glob(".vtp-*.tmp"))
    assert json.loads((tmp_path / "plan.json").read_text())["job_id"] != first["job_id"]  # replaced by the new plan


def test_the_output_rule_names_each_kind(tmp_path):
    from jobs.commands.output_file import output_problem

    os.mkfifo(tmp_path / "p")
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to("/proc/self/fd/1")
    (tmp_path / "j.yaml").write_text("name: x\n")
    for name, fragment in (("p", "a named pipe"), ("d", "a folder"), ("l", "a symbolic link"),
                           ("j.yaml", "exists and is not a file vtp plan wrote")):
        assert fragment in str(output_problem(str(tmp_path / name), "--out", "vtp plan"))
    assert "is this command's input" in str(output_problem(str(tmp_path / "j.yaml"), "--out", "vtp plan",
                                                           inputs=[str(tmp_path / "j.yaml")]))
    assert output_problem(str(tmp_path / "new.json"), "--out", "vtp plan") is None


# ---- vtp plan: flags by their forms, flag against file, bounded work, the unclear -------------------------------
def test_plan_flags_by_their_forms_are_one_line_each(tmp_path, job):
    for args, fragment in (
            (["--api-endpoint", "http://[::1", "--project", "my-proj"], "--api-endpoint: 'http://[::1' is not an endpoint"),
            (["--max-cost=0"], "--max-cost: 0 would refuse every plan"),
            (["--project", "my-proj\n"], "--project: 'my-proj\\n' is not a project id"),
            (["--service-account", "serviceAccount:runner@my-proj.iam.gserviceaccount.com"],
             "drop the 'serviceAccount:' prefix"),
            (["--service-account", "runner@example.com"], "is not a service account's email"),
            (["--network", "default"], "--network: 'default' is not a VPC network's full name"),
            (["--network", ""], "--network: is empty")):
        one_error(vtp("plan", "--config", "job.yaml", *args, cwd=tmp_path), fragment)


def test_plan_says_which_wins_when_a_flag_and_the_file_both_give_a_value(tmp_path, job):
    doc = yaml.safe_load(job.read_text())
    doc["placement"] = {"regions": ["europe-west4", "us-central1"]}
    doc["budget"] = {"max_total": 50}
    job.write_text(yaml.safe_dump(doc))
    err = vtp("plan", "--config", "job.yaml", "--region", "us-central1", "--max-cost", "20", cwd=tmp_path).stderr
    assert ("warning: placement.regions: the job file's europe-west4, us-central1 win over --region us-central1 for "
            "the training job") in err
    assert "warning: --max-cost: $20.00 wins over the job file's budget.max_total ($50.00)" in err


def test_a_thousand_placement_regions_is_one_line_at_once(tmp_path, job):
    doc = yaml.safe_load(job.read_text())
    doc["placement"] = {"regions": ["us-central1"] + [f"xx-north{i}" for i in range(999)]}
    job.write_text(yaml.safe_dump(doc))
    proc = vtp("plan", "--config", "job.yaml", cwd=tmp_path, timeout=60)  # printed nothing for 300 s before
    line = one_error(proc, "placement.regions: lists 1,000 entries, more than the")
    assert len([x for x in proc.stderr.splitlines() if x.startswith("error:")]) == 1 and "at most" in line


def test_the_unclear_three_say_what_is_wrong(tmp_path, job):
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    one_error(vtp("plan", "--config", "empty.yaml", cwd=tmp_path), "--config: empty.yaml is empty")
    doc = yaml.safe_load(job.read_text())
    (tmp_path / "mars.yaml").write_text(yaml.safe_dump({**doc, "placement": {"regions": ["mars-north1"]}}))
    err = vtp("plan", "--config", "mars.yaml", "--region", "us-central1", cwd=tmp_path).stderr
    assert "warning: placement.regions[0]: region mars-north1 is not in the hardware catalog" in err
    assert "topology.region: region mars-north1" not in err and "--region: " not in err
    (tmp_path / "long.yaml").write_text(yaml.safe_dump({**doc, "name": "Bad" + "x" * 2_000_000}, width=10**9))
    proc = vtp("plan", "--config", "long.yaml", cwd=tmp_path)
    line = one_error(proc, "name: 'Badxxx")
    assert len(line) < 5000 and "characters]..." in line


def test_python_m_jobs_cloud_project_checks_its_flags_first(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "jobs.cloud.apis.project", "--project", "Bad Project!", "--region",
                           "US-CENTRAL1"], cwd=str(ROOT), capture_output=True, text=True, timeout=BOUND_S)
    assert proc.returncode == 2 and proc.stdout == ""  # nothing was checked with those values
    assert [line.split(":")[1].strip() for line in proc.stderr.splitlines()] == ["--project", "--region"]


# ---- vtp logs: records read by THE reader, names by their forms, nothing waited on --------------------------------
@pytest.mark.parametrize("attempts, fragment", [
    (5, "attempts is int 5, not list"), (True, "attempts is bool true, not list"),
    ([{"job": 'projects/my-proj/locations/us-central1/customJobs/1" OR resource.type="gce_instance'}],
     "attempts[0].job"),
    ([{"job": "projects/my-proj/locations/US-CENTRAL1/customJobs/1"}], "attempts[0].job"),
    ([{"job": "projects/My Project/locations/us-central1/customJobs/1"}], "attempts[0].job"),
    ([{"job": "projects/my-proj/locations/us-central1/customJobs/1 "}], "attempts[0].job"),
    ([{"job": "abc; rm -rf ~"}], "attempts[0].job"),
])
def test_vtp_logs_refuses_a_damaged_attempts_record_and_names_not_of_their_form(tmp_path, capsys, attempts, fragment):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / records.VERTEX_JOBS_RECORD).write_text(json.dumps({"attempts": attempts}))
    with LoggingStandIn() as logging:
        status = logs_cli.main([str(tmp_path / "run"), "--logging-endpoint", logging.url], out=lambda line: None)
        assert logging.requests == []  # nothing read from the file reached a filter
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("error: unreadable: ") and fragment in err[0]


def test_vtp_logs_over_a_deep_record_a_quoted_gcp_resources_and_a_bad_name(tmp_path, capsys):
    from jobs.cloud.apis.job_logs import log_filter

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / records.VERTEX_JOBS_RECORD).write_text('{"attempts": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (tmp_path / "gcp_resources").write_text(json.dumps({"resources": [{"resourceType": "CustomJob", "resourceUri":
        'https://us-central1-aiplatform.googleapis.com/v1/projects/my-proj/locations/us-central1/customJobs/1" OR x'}]}))
    with LoggingStandIn() as logging:
        for target, status in ((tmp_path / "run", 2), (tmp_path / "gcp_resources", 1),
                               ("projects/My Project/locations/us-central1/customJobs/1", 2)):
            assert logs_cli.main([str(target), "--logging-endpoint", logging.url], out=lambda line: None) == status
        assert logging.requests == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "nested deeper than 64 levels" in err[0] and "names no single CustomJob" in err[1]
    assert "is not a Vertex job's resource name" in err[2]
    # the filter's values are quoted as the logging query language writes a string
    assert log_filter("projects/my-proj/locations/us-central1/customJobs/12", "workerpool0-0") == (
        'resource.type="ml_job" AND resource.labels.job_id="12" AND resource.labels.task_name="workerpool0-0"')


@pytest.mark.timeout(120)
@pytest.mark.parametrize("follow", [False, True])
def test_vtp_logs_never_waits_on_a_replica_log_that_is_a_named_pipe(tmp_path, follow):
    replicas = tmp_path / "run" / "logs" / "replicas" / "attempt-1"
    replicas.mkdir(parents=True)
    (replicas / "worker-0.log").write_text("worker says\n")
    os.mkfifo(replicas / "chief-0.log")
    proc = vtp("logs", str(tmp_path / "run"), *(["--follow"] if follow else []), cwd=tmp_path, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert f"(skipped {replicas / 'chief-0.log'}: not a regular file, so not a replica's log)" in proc.stdout
    assert "attempt 1\tworker-0\tworker says" in proc.stdout


# ---- runs prune and the run lock: nothing deleted or stopped that is not provably ours ----------------------------
def _copy(root: Path, name: str, lock: str | None = None) -> Path:
    folder = root / name
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "saved_model.pb").write_bytes(b"m")
    base = name.rsplit(".", 1)[0]
    (folder / COPY_RECORD).write_text(json.dumps({"copy_of": base, "copy": name, "made": "2020-01-01T00:00:00"}))
    if lock is not None:
        (folder / LOCK_NAME).write_text(lock)
    return folder


def test_prune_keeps_a_users_dot_removing_folder_and_stops_no_process_a_stale_lock_names(tmp_path):
    root = tmp_path / "runs"
    (root / "exp").mkdir(parents=True)
    (root / "exp" / records.RUN_RECORD).write_text("{}")
    notes = root / ".notes.removing"
    notes.mkdir()
    (notes / "mine.txt").write_text("keep me")
    named_like = root / ".exp.20200101-000000.removing"  # named like what a prune sets aside, no record of it
    named_like.mkdir()
    users = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        from jobs.rules.command_line import start_ticks

        time.sleep(0.2)
        stale = json.dumps({"pid": users.pid, "children": [{"pid": users.pid, "start": start_ticks(users.pid)}]})
        _copy(root, "exp.20200102-000000", lock=stale)
        _copy(root, "exp.20200103-000000", lock="[1, 2]")
        _copy(root, "exp.20200104-000000", lock='{"children": 5}')
        _copy(root, "exp.20200105-000000", lock="[" * 100_000 + "]" * 100_000)
        fifo = _copy(root, "exp.20200106-000000")
        os.mkfifo(fifo / LOCK_NAME)
        proc = vtp("runs", "prune", "--keep", "0", "--root", str(root), cwd=tmp_path)
        assert users.poll() is None, "prune stopped a process of the user's"
    finally:
        users.kill()
        users.wait()
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert (notes / "mine.txt").read_text() == "keep me" and named_like.is_dir()
    assert f"kept {named_like}: named like a copy an interrupted prune set aside, but its own record" in proc.stdout
    assert f"skipped {fifo}: output.base_dir: {fifo / LOCK_NAME} is not a regular file" in proc.stdout
    assert sorted(p.name for p in root.iterdir()) == sorted([".exp.20200101-000000.removing", ".notes.removing", "exp",
                                                             "exp.20200106-000000"])


def test_prune_root_empty_is_refused(tmp_path):
    one_error(vtp("runs", "prune", "--root", "", cwd=tmp_path), "--root is empty")
    assert runs_cli.main(["list", "--root", " "]) == 2


def test_a_rerun_stops_no_process_a_stale_lock_names_and_a_lock_that_is_a_pipe_is_one_line(tmp_path):
    users = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        from jobs.rules.command_line import start_ticks

        time.sleep(0.2)
        base = tmp_path / "a"
        base.mkdir()
        (base / LOCK_NAME).write_text(json.dumps({"pid": users.pid, "token": "0" * 32, "children": [
            {"pid": users.pid, "start": start_ticks(users.pid)}]}))
        RunLock(str(base)).acquire(log=lambda line: None).release()
        assert users.poll() is None
    finally:
        users.kill()
        users.wait()
    fifo = tmp_path / "b"
    fifo.mkdir()
    os.mkfifo(fifo / LOCK_NAME)
    with pytest.raises(NotThisJob, match="is not a regular file"):
        RunLock(str(fifo)).acquire()
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotThisJob, match=r"output.base_dir: .*file is a file, not a folder"):
        RunLock(str(tmp_path / "file")).acquire()


def test_vtp_with_output_base_dir_a_file_or_a_finished_model_without_a_record_is_one_line(tmp_path, job):
    (tmp_path / "afile").write_text("mine")
    one_error(vtp("--config", "job.yaml", "--set", f"output.base_dir={tmp_path / 'afile'}", cwd=tmp_path),
              "is a file, not a folder")
    assert (tmp_path / "afile").read_text() == "mine"
    done = tmp_path / "done"
    (done / "model").mkdir(parents=True)
    (done / "model" / "saved_model.pb").write_bytes(b"trained")
    (done / records.METRICS_RECORD).write_text('{"steps": 30}')
    (done / records.RUN_RECORD).write_text(json.dumps({"status": "succeeded", "finished": "2026-11-27T10:00:00+00:00",
                                                       "summary": {}}))
    before = {p: p.read_bytes() for p in done.rglob("*") if p.is_file()}
    line = one_error(vtp("--config", "job.yaml", "--set", f"output.base_dir={done}", cwd=tmp_path),
                     "holds a finished run whose config no record says")
    assert "--fresh" in line
    assert {p: p.read_bytes() for p in done.rglob("*") if p.is_file() and p.name != LOCK_NAME} == before


def test_a_deep_or_damaged_provenance_is_refused_not_a_traceback(tmp_path):
    cfg = config_lib.load("local", [f"output.base_dir={tmp_path / 'a'}"])
    base = tmp_path / "a"
    base.mkdir()
    for text, fragment in (("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
                           ('{"config": 5}', "config is int 5, not dict"), ("[]", "a JSON list, not an object")):
        (base / records.PROVENANCE_RECORD).write_text(text)
        with pytest.raises(NotThisJob, match=f"unreadable: .*{records.PROVENANCE_RECORD}: {fragment}"):
            check_folder(str(base), making(cfg))
    write_making(str(base), making(cfg))
    assert check_folder(str(base), making(cfg)) is None  # a whole record: the run resumes


@pytest.mark.parametrize("name", [records.RUN_RECORD, records.PROVENANCE_RECORD, COPY_RECORD])
def test_runs_list_shows_a_deep_record_as_unreadable(tmp_path, name):
    root = tmp_path / "runs"
    (root / "exp").mkdir(parents=True)
    (root / "exp" / records.STEPS_RECORD).write_text('{"steps": []}')
    (root / "exp" / name).write_text("{\"a\": " + "[" * 100_000 + "]" * 100_000 + "}")
    proc = vtp("runs", "list", "--root", str(root), "--json", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (row,) = json.loads(proc.stdout)
    if name == records.RUN_RECORD:
        assert row["status"] == "unreadable" and "nested deeper than 64 levels" in row["note"]


@pytest.mark.parametrize("doc, fragment", [
    ({"gate": {"passed": "false", "lines": []}}, "gate.passed is str \"false\", not bool"),
    ({"tuning": {"metric": "val_rmse", "trials": [{"id": "1", "metric": "abc", "state": "SUCCEEDED"}],
                 "best_trial": {"id": "1", "metric": "abc"}}}, "tuning.trials[0].metric is str \"abc\""),
])
def test_runs_list_trusts_no_figure_a_record_holds_of_the_wrong_type(tmp_path, doc, fragment):
    root = tmp_path / "runs"
    (root / "exp").mkdir(parents=True)
    record = {"status": "succeeded", "finished": "2026-11-27T10:00:00+00:00", "config": {"name": "j"},
              "summary": {"name": "j"}, **doc}
    (root / "exp" / records.RUN_RECORD).write_text(json.dumps(record))
    from jobs.local.history.reader import read_run

    run = read_run(str(root / "exp"))
    assert run.status == "unreadable" and fragment in run.note


# ---- the precision cache: a damaged entry is measured again, never a failed train step ----------------------------
@pytest.mark.parametrize("text", ['{"policy": "float32", "rates": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                  '{"policy": "float32", "rates": {"float32": 1' + "0" * 400
                                  + ', "mixed_bfloat16": 2}}', "fifo", '{"policy": "float32", "rates": {"float32": '
                                  'true, "mixed_bfloat16": 2.0}}'])
def test_a_damaged_precision_cache_entry_is_measured_again(tmp_path, text, capsys):
    device = precision.Device("cpu", cpu_flags=frozenset({"avx2", "avx512f", "avx512_bf16"}), name="AMD EPYC", cores=2)
    fields = {"model": "small_cnn", "batch": 32}
    measured = []

    def measure(policy):
        measured.append(policy)
        return {"float32": 200.0, "mixed_bfloat16": 300.0}[policy]

    cands = precision.candidates(device)
    key = precision.cache_key({**precision.machine_fields(device), **fields, "candidates": list(cands)})
    (tmp_path / "cache").mkdir()
    entry = tmp_path / "cache" / f"{key}.json"
    if text == "fifo":
        os.mkfifo(entry)
    else:
        entry.write_text(text)
    choice = precision_auto.decide_auto(device, 10_000, measure, fields, str(tmp_path / "cache"))
    assert sorted(measured) == sorted(cands) and choice.policy in cands


def test_the_reader_refuses_what_no_record_holds(tmp_path):
    for text, why in (("[" * 70 + "]" * 70, "nested deeper than 64 levels"), ('{"a": NaN}', "NaN is not a number"),
                      ('{"a": 1e400}', "out of range"), ('{"a": ' + "9" * 40 + "}", "an integer of 40 digits"),
                      ('{"a": 1', "cut short"), (b"\xff\xfe", "not UTF-8")):
        path = tmp_path / "r.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(record_reader.Unreadable, match=why):
            record_reader.read(str(path))
    assert record_reader.read(str(tmp_path / "none.json")) is None
    (tmp_path / "t.json").write_text('{"pid": true, "token": "x"}')
    with pytest.raises(record_reader.Unreadable, match="pid is bool true, not int"):
        record_reader.read(str(tmp_path / "t.json"), types={"pid": int})
    assert lifeline.carrying("x; rm -rf ~") == [] and lifeline.carrying(5) == []


# ---- a refused credential: one line wherever it is used (jobs.cloud.apis.credentials) ----------------------------------
@pytest.mark.parametrize("command", ["submit", "upload-template"])
def test_a_revoked_service_account_key_is_one_line_naming_it_and_how_to_renew(tmp_path, command):
    """A service-account key whose refresh Google's token endpoint (a stand-in behind the TLS proxy, at its real
    name) answers ``400 invalid_grant``: the plan's bucket check and every later use say it in one line; before,
    the bucket check ended in a ``RefreshError`` traceback."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests.standins.base import StandIn
    from tests.standins.tls_proxy import TlsProxy
    from tests.test_submit import clean_env

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"type": "service_account", "project_id": "my-proj", "private_key_id": "k1",
                               "private_key": pem, "client_email": "runner@my-proj.iam.gserviceaccount.com",
                               "client_id": "1", "token_uri": "https://oauth2.googleapis.com/token"}))
    google = StandIn().start()
    google.route("POST", r"/token", lambda req, m: (400, {"error": "invalid_grant",
                                                          "error_description": "Invalid JWT Signature."}))
    hosts = ["oauth2.googleapis.com", "storage.googleapis.com", "cloudquotas.googleapis.com",
             "serviceusage.googleapis.com", "us-central1-aiplatform.googleapis.com", "iam.googleapis.com",
             "compute.googleapis.com", "artifactregistry.googleapis.com", "us-central1-docker.pkg.dev",
             "us-central1-kfp.pkg.dev"]
    proxy = TlsProxy(google, hosts, tmp_path).start()
    sets = ["--config", "local", "--set", "output.base_dir=gs://acme-ml-bucket/runs/x", "--set",
            "container.image_uri=us-central1-docker.pkg.dev/my-proj/r/t@sha256:" + "a" * 64]
    args = (["upload-template", "--host", "https://us-central1-kfp.pkg.dev/my-proj/pipelines", *sets]
            if command == "upload-template" else
            ["--project", "my-proj", "--region", "us-central1", "--pipeline-root", "gs://acme-ml-bucket/root", *sets,
             "--no-wait"])
    try:
        proc = vtp(*args, cwd=tmp_path, env=clean_env(tmp_path, GOOGLE_APPLICATION_CREDENTIALS=str(key), **proxy.env()))
    finally:
        proxy.stop()
        google.stop()
    assert "Traceback" not in proc.stderr and proc.returncode in (1, 2), proc.stderr[-3000:]
    bucket = [line for line in proc.stderr.splitlines() if "bucket not checked" in line]
    assert len(bucket) == 1 and (
        "the credentials for Cloud Storage were refused by Google's token endpoint (invalid_grant: Invalid JWT "
        f"Signature.): the service-account key GOOGLE_APPLICATION_CREDENTIALS={key} "
        "(runner@my-proj.iam.gserviceaccount.com) is revoked, disabled or expired; create a new key") in bucket[0]
