"""Nothing lost, nothing stale (issue 41 items 1-4, issue 44's data-loss and run-record classes), on a user's
trainer written here: a run folder records what made it, a run of another config or code is refused before its
first step and leaves the folder byte for byte as it was, ``--fresh`` keeps it, a ``gs://`` path is refused
before any folder is made, ``runs prune`` removes only what ``--fresh`` made, and history never shows a broken
record as something else. The fast tests build the folders by hand; one integration test runs the pipeline."""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.run_records import records
from jobs.commands import runs_cli
from jobs.local.history import prune
from jobs.local.history.reader import read_run
from jobs.local.run.folder import COPY_RECORD, archive, check_folder, making, write_making, write_record
from jobs.local.run.lock import LOCK_NAME, NotThisJob, RunLock
from tests.snapshots import tree_bytes
from jobfile import config as config_lib

ROOT = Path(__file__).resolve().parent.parent

TRAINER = textwrap.dedent('''\
    """A user's Keras 3 trainer: a linear regressor on 4 features, exported for serving."""
    import argparse, os
    import numpy as np
    import keras

    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    a = p.parse_args()
    x = np.random.RandomState(0).rand(64, 4).astype("float32")
    y = x.sum(1, keepdims=True)
    inp = keras.Input((4,), name="features")
    model = keras.Model(inp, keras.layers.Dense(1, name="value")(inp))
    model.compile("sgd", "mse")
    model.fit(x, y, epochs=a.epochs, verbose=2)
    model.export(os.environ["AIP_MODEL_DIR"])
''')
JOB = textwrap.dedent('''\
    name: keep-job
    trainer: {source_dir: ., module: trainer.task, args: ["--epochs", "1"]}
    data: {source: none}
    serving: {sample_request: sample.json}
    topology: {strategy: one_device, worker: {replica_count: 0}}
    output: {base_dir: runs/a}
''')


@pytest.fixture
def project(tmp_path) -> Path:
    """A user's project: ``trainer/task.py``, ``job.yaml``, ``sample.json``; runs go to ``runs/a`` in it."""
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "task.py").write_text(TRAINER)
    (tmp_path / "job.yaml").write_text(JOB)
    (tmp_path / "sample.json").write_text('{"instances": [[0.1, 0.2, 0.3, 0.4]]}')
    return tmp_path


def run_py(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def _finished_by_hand(project: Path, *overrides: str) -> Path:
    """``runs/a`` as a finished run of the job (with ``overrides``) leaves it: what made it, run.json, a model, a
    checkpoint and ``data/`` (which a run's prepare step would rewrite). Built, not trained: the refusals under test
    happen before any step."""
    cfg = config_lib.load(str(project / "job.yaml"), list(overrides))
    base = Path(config_lib.resolved_base_dir(cfg))
    for rel, data in (("model/saved_model.pb", b"the finished model"), ("checkpoints/ckpt-1.index", b"ckpt"),
                      ("data/train-00000.tfrecord", b"shard"), (".run.lock", b"")):
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_bytes(data)
    write_making(str(base), making(cfg))
    write_record(str(base), cfg.to_json(), {"name": cfg.name})
    return base


def _one_error(proc: subprocess.CompletedProcess) -> str:
    errors = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    return errors[0]


# -- what made a run, and the refusal -----------------------------------------------------------------------
def test_a_rerun_with_other_args_is_refused_and_the_finished_folder_is_untouched(project):
    base = _finished_by_hand(project)
    before = tree_bytes(base)
    proc = run_py("--config", "job.yaml", "--set", 'trainer.args=["--epochs","2"]', cwd=project)
    assert proc.returncode == 2
    assert _one_error(proc) == (
        f'error: output.base_dir: {base} holds a finished run of another job (trainer.args ["--epochs", "1"] -> '
        '["--epochs", "2"]); nothing in it was changed. Add --fresh to start from step 0 (that run is kept whole as '
        'a.<time>), or run elsewhere: --set output.base_dir=runs/a-2')
    assert tree_bytes(base) == before  # data/ and the model too: the check comes before the first step


def test_a_rerun_after_the_trainer_code_changed_is_refused(project):
    base = _finished_by_hand(project)
    before = tree_bytes(base)
    (project / "trainer" / "task.py").write_text(TRAINER + "# tuned\n")
    proc = run_py("--config", "job.yaml", cwd=project)
    assert proc.returncode == 2
    line = _one_error(proc)
    assert f"holds a finished run of another job (trainer code in {project}: trainer/task.py changed)" in line \
        and "--fresh" in line and "--set output.base_dir=runs/a-2" in line
    assert tree_bytes(base) == before


def test_the_same_job_is_complete_and_a_change_that_makes_nothing_else_is_too(project):
    _finished_by_hand(project)
    for extra in ([], ["--set", "scheduling.max_restarts=3"], ["--strict"]):
        proc = run_py("--config", "job.yaml", *extra, cwd=project)
        assert proc.returncode == 0 and "is already complete" in proc.stdout, proc.stdout + proc.stderr


def test_a_local_run_with_a_cloud_storage_path_is_refused_and_makes_no_folder(project):
    proc = run_py("--config", "job.yaml", "--set", "output.base_dir=gs://acme-ml-prod/runs/a", cwd=project)
    assert proc.returncode == 2
    assert _one_error(proc) == (
        "error: output.base_dir: gs://acme-ml-prod/runs/a is a Cloud Storage path, which a run on this machine cannot "
        "use; run here with --set output.base_dir=runs/keep-job, or submit to Vertex AI: python pipelines/run.py "
        "--config JOB --project P --region R --pipeline-root gs://BUCKET/root")
    assert sorted(p.name for p in project.iterdir()) == ["job.yaml", "sample.json", "trainer"]  # no gs:/, no runs/
    proc = run_py("--config", "job.yaml", "--set", "serving.eval_data=gs://acme/eval.jsonl", cwd=project)
    assert proc.returncode == 2 and "serving.eval_data: gs://acme/eval.jsonl is a Cloud Storage path" in proc.stderr
    assert not (project / "runs").exists()


def _made(config: dict, sha: str | None = "a" * 64) -> dict:
    return {"config": config, "image": None, "trainer_code": {"sha256": sha, "files": 2} if sha else None}


def test_check_folder_cases(tmp_path):
    base = tmp_path / "a"
    config = {"name": "j", "training": {"steps": 10}, "output": {"base_dir": str(base)}, "scheduling": {"timeout": "1s"}}
    assert check_folder(str(base), _made(config)) is None  # nothing there
    base.mkdir()
    assert check_folder(str(base), _made(config)) is None  # an empty folder
    write_making(str(base), _made(config))
    assert check_folder(str(base), _made(config)) is None  # unfinished, same making: resume
    other = {**config, "training": {"steps": 20}}
    assert check_folder(str(base), _made(other)) is None  # unfinished, nothing trained yet: nothing to mix
    (base / "checkpoints").mkdir()
    (base / "checkpoints" / "checkpoint").write_text("x")
    with pytest.raises(NotThisJob, match=r"holds an unfinished run of another job \(training.steps 10 -> 20\)"):
        check_folder(str(base), _made(other))
    builtin = {**config, "trainer": {"module": ""}, "container": {"command": ["python", "-m", "trainers.task"]}}
    write_making(str(base), _made(builtin, None))
    longer = {**builtin, "training": {"steps": 20}}
    assert check_folder(str(base), _made(longer, None)) is None  # the built-in trainer trains on to step 20
    with pytest.raises(NotThisJob, match=r"unfinished run of another job \(training.seed null -> 1\)"):
        check_folder(str(base), _made({**builtin, "training": {"steps": 10, "seed": 1}}, None))
    gated = {**builtin, "serving": {"gate": {"thresholds": ["eval_rmse < 0.5"]}}}
    assert check_folder(str(base), _made(gated, None)) is None  # the same model, judged by another bar
    write_making(str(base), _made(config))
    with pytest.raises(NotThisJob, match=r"unfinished run of another job \(serving.x null -> 1; training.steps 10 "):
        check_folder(str(base), _made({**config, "training": {"steps": 20}, "serving": {"x": 1}}))
    write_record(str(base), json.dumps(config), {"name": "j"})
    assert check_folder(str(base), _made(config))["status"] == "succeeded"
    assert check_folder(str(base), _made({**config, "scheduling": {"timeout": "9s"}}))  # not what it makes
    relative = {**config, "output": {"base_dir": os.path.relpath(base)}}
    assert check_folder(str(base), _made(relative))  # the same folder, written relative
    with pytest.raises(NotThisJob, match="trainer code sha256 aaaaaaaaaaaa -> bbbbbbbbbbbb"):
        check_folder(str(base), _made(config, "b" * 64))
    many = {**config, "name": "k", "training": {"steps": 1, "seed": 2, "epochs": 3}}
    with pytest.raises(NotThisJob, match=r"; and 1 more\)"):
        check_folder(str(base), _made(many))
    # a folder from before provenance.json: its run.json (config, and the trainer code's hash in its summary)
    (base / records.PROVENANCE_RECORD).unlink()
    write_record(str(base), json.dumps(config), {"trainer_version": {"content_sha256": "c" * 64}})
    with pytest.raises(NotThisJob, match="trainer code sha256 cccccccccccc -> aaaaaaaaaaaa"):
        check_folder(str(base), _made(config))
    (base / records.RUN_RECORD).write_text('{"status": "succ')  # cut short: never taken for "nothing finished"
    with pytest.raises(NotThisJob, match=r"holds a run record \(run.json\) that cannot be read"):
        check_folder(str(base), _made(config))


def test_a_lock_that_is_a_folder_is_one_line(tmp_path):
    (tmp_path / "a" / LOCK_NAME).mkdir(parents=True)
    with pytest.raises(NotThisJob) as exc:
        RunLock(str(tmp_path / "a")).acquire()
    assert str(exc.value) == (f"output.base_dir: {tmp_path / 'a' / LOCK_NAME} is a folder; the run lock is a plain "
                              f"file there: remove it (rmdir {tmp_path / 'a' / LOCK_NAME}), or run elsewhere with "
                              "--set output.base_dir=OTHER_DIR")


def test_fresh_copies_say_they_are_copies(tmp_path):
    base = tmp_path / "a"
    (base / "model").mkdir(parents=True)
    (base / "model" / "saved_model.pb").write_bytes(b"m")
    before = tree_bytes(base)
    kept = Path(archive(str(base)))
    record = json.loads((kept / COPY_RECORD).read_text())
    assert record["copy_of"] == "a" and record["copy"] == kept.name
    assert {k: v for k, v in tree_bytes(kept).items() if k != COPY_RECORD} == before


def test_each_attempt_of_a_replica_log_opens_with_its_separator(tmp_path):
    for _ in range(2):  # a run and its rerun in one folder: both attempt 1
        proc = subprocess.run([sys.executable, "-m", "jobs.local.launch", "--replicas", "1,0,0,0", "--base-output-dir",
                               str(tmp_path), "--", sys.executable, "-c", "print('trained')"], capture_output=True,
                              text=True, timeout=120, cwd=ROOT)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (tmp_path / "logs" / "replicas" / "attempt-1" / "chief-0.log").read_text().splitlines()
    assert [x.startswith("===== ") for x in lines] == [True, False, True, False], lines
    assert lines[1] == lines[3] == "trained" and "chief-0 attempt 1 started (launcher pid" in lines[0]
    assert lines[0] != lines[2]  # another launcher pid (and time)


# -- prune: only what --fresh made ---------------------------------------------------------------------------
def _run_folder(path: Path, ran_in: Path | None = None) -> Path:
    """A finished run's folder, recording the ``output.base_dir`` it ran in (default: where it is)."""
    (path / "model").mkdir(parents=True)
    (path / "model" / "saved_model.pb").write_bytes(os.urandom(64))
    write_record(str(path), json.dumps({"name": path.name, "output": {"base_dir": str(ran_in or path)}}),
                      {"name": path.name})
    return path


def _prune(capsys, *argv: str) -> tuple[int, str, str]:
    code = runs_cli.main(["prune", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_prune_never_removes_a_real_run_named_like_a_copy(tmp_path, capsys):
    root = tmp_path / "runs"
    exp = _run_folder(root / "exp")
    real = _run_folder(root / "exp.20200101-000000")          # the user's own run, named with a date
    lonely = _run_folder(root / "solo.20200101-000000")       # no original beside it
    not_a_date = _run_folder(root / "exp.20201399-999999", ran_in=root / "exp")
    renamed = _run_folder(root / "exp.20200103-000000")
    (renamed / COPY_RECORD).write_text(json.dumps({"copy_of": "exp", "copy": "exp.20190101-000000"}))
    legacy = _run_folder(root / "exp.20200102-000000", ran_in=root / "exp")  # a --fresh copy from before the record
    recorded = Path(archive(str(_run_folder(root / "exp2"))))  # made by --fresh: it says so (exp2 is gone)
    survivors = {p: tree_bytes(p) for p in (exp, real, lonely, not_a_date, renamed)}

    code, out, err = _prune(capsys, "--keep", "0", "--root", str(root))
    assert code == 0 and err == ""
    assert not legacy.exists() and not recorded.exists()
    assert {p: tree_bytes(p) for p in survivors} == survivors
    assert f"kept {real}: named like a --fresh copy of exp, but nothing says --fresh made it (no .fresh-copy.json; " \
           f"it ran in {real}): a run of yours?" in out
    assert f"kept {lonely}: named like a --fresh copy of solo, but nothing says --fresh made it" in out
    assert f"kept {not_a_date}: named like a --fresh copy, but 20201399-999999 is not a date and time" in out
    assert f"kept {renamed}: its .fresh-copy.json says it is 'exp.20190101-000000', a copy of 'exp'" in out
    assert "in 2 --fresh copies" in out and "Traceback" not in out


def test_prune_skips_a_copy_whose_lock_is_a_folder(tmp_path, capsys):
    root = tmp_path / "runs"
    _run_folder(root / "exp")
    copy = _run_folder(root / "exp.20200102-000000", ran_in=root / "exp")
    (copy / LOCK_NAME).mkdir()
    before = tree_bytes(copy)
    code, out, err = _prune(capsys, "--keep", "0", "--root", str(root))
    assert code == 0 and err == "" and tree_bytes(copy) == before
    assert f"skipped {copy}: output.base_dir: {copy / LOCK_NAME} is a folder" in out


@pytest.mark.parametrize("days", ["inf", "-inf", "nan", "Infinity", "1e400"])
def test_prune_refuses_an_older_than_that_is_not_a_finite_number(tmp_path, capsys, days):
    code, out, err = _prune(capsys, f"--older-than={days}", "--root", str(tmp_path))
    assert code == 2 and out == ""
    assert err.strip() == (f"error: python pipelines/run.py runs prune: argument --older-than: --older-than must be a "
                           f"finite number of days >= 0, got {days!r} (e.g. --older-than 7); see python pipelines/run.py "
                           "runs prune --help")


@pytest.mark.parametrize("days", ["1e308", "999999999999", "3650000"])
def test_prune_with_a_huge_older_than_removes_nothing(tmp_path, capsys, days):
    root = tmp_path / "runs"
    _run_folder(root / "exp")
    copy = _run_folder(root / "exp.20200102-000000", ran_in=root / "exp")
    code, out, err = _prune(capsys, "--older-than", days, "--root", str(root))
    assert code == 0 and err == "" and copy.exists()
    assert "in 0 --fresh copies; kept 1 copy (exp.20200102-000000)" in out


def test_ctrl_c_during_a_prune_is_one_line_and_the_next_prune_finishes(tmp_path, capsys, monkeypatch):
    root = tmp_path / "runs"
    exp = _run_folder(root / "exp")
    copies = [_run_folder(root / f"exp.2020010{i}-000000", ran_in=root / "exp") for i in (1, 2)]
    kept = tree_bytes(exp)
    real_rmtree = prune.shutil.rmtree

    def interrupted(path, *a, **k):  # Ctrl-C half-way through removing the first copy
        os.remove(os.path.join(path, "model", "saved_model.pb"))
        raise KeyboardInterrupt

    monkeypatch.setattr(prune.shutil, "rmtree", interrupted)
    code, out, err = _prune(capsys, "--keep", "0", "--root", str(root))
    assert code == 130
    aside = ".exp.20200102-000000.removing"  # the newest goes first
    assert err.strip() == (f"interrupted: removed 0 of 2 --fresh copies under {root}; {aside} was set aside "
                           "half-removed: the next runs prune removes it; every other folder is as it was")
    assert copies[0].exists() and tree_bytes(exp) == kept
    monkeypatch.setattr(prune.shutil, "rmtree", real_rmtree)
    code, out, err = _prune(capsys, "--keep", "0", "--root", str(root))
    assert code == 0 and not (root / aside).exists() and not copies[0].exists() and tree_bytes(exp) == kept


# -- records that lie --------------------------------------------------------------------------------------
GOOD = {"status": "succeeded", "finished": "2026-11-27T10:00:00+00:00", "config": {"name": "j"},
        "summary": {"name": "j", "elapsed_s": 3.0}}


def _write(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)


@pytest.mark.parametrize("text", [json.dumps(GOOD)[:n] for n in (1, 20, 60, len(json.dumps(GOOD)) - 1)]
                         + ["", "[]", "null", "\"succeeded\"", "{" * 5000 + "}" * 5000, "[" * 100 + "]" * 100])
def test_a_run_json_that_is_not_a_record_is_unreadable(tmp_path, text):
    _write(tmp_path / "r", records.RUN_RECORD, text)
    run = read_run(str(tmp_path / "r"))
    assert run.status == "unreadable" and run.note.startswith(f"{tmp_path / 'r'}: run.json: "), run.note
    assert "\n" not in run.note


WRONG = {"status": [None, 1, True, [], {}, "finished"], "finished": [None, 1, [], {}, "yesterday"],
         "config": [None, "x", 1, []], "summary": [None, "x", 1, []]}


@pytest.mark.parametrize("field,value", [(f, v) for f, vs in WRONG.items() for v in vs])
def test_a_field_of_the_wrong_type_is_unreadable_not_unfinished(tmp_path, field, value):
    _write(tmp_path / "r", records.RUN_RECORD, json.dumps({**GOOD, field: value}))
    run = read_run(str(tmp_path / "r"))
    assert run.status == "unreadable" and f"run.json: {field}" in run.note, run.note


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=5),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(max_size=5), children, max_size=3)),
    max_leaves=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(summary=st.dictionaries(st.sampled_from(["training", "verification", "evaluation", "trainer", "model_scalars",
                                                "extra"]), JSON_VALUES, max_size=4),
       loss=st.floats(allow_nan=True, allow_infinity=True))
def test_runs_list_and_compare_json_is_json_whatever_a_record_holds(tmp_path_factory, summary, loss):
    root = tmp_path_factory.mktemp("runs")
    summary = {**summary, "training": {"train_loss": loss, "examples_per_second": -loss}}
    for name in ("a", "b"):
        _write(root / name, records.RUN_RECORD, json.dumps({**GOOD, "summary": summary, "config": {"x": loss}}))
    for argv in (["list", "--root", str(root), "--json"], ["compare", "a", "b", "--root", str(root), "--json"]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            assert runs_cli.main(argv) == 0, err.getvalue()
        doc = _strict(out.getvalue())  # no NaN, Infinity or -Infinity anywhere
        if argv[0] == "list":
            assert {r["status"] for r in doc} <= {"finished", "unreadable"}
            loss_shown = [r["metrics"].get("train_loss") for r in doc if r["status"] == "finished"]
            assert all(v is None if not math.isfinite(loss) else v == loss for v in loss_shown)


# -- the whole chain, for real ------------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_users_finished_model_is_never_overwritten_and_fresh_keeps_it(project):
    first = run_py("--config", "job.yaml", cwd=project, timeout=500)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    base = project / "runs" / "a"
    made = json.loads((base / records.PROVENANCE_RECORD).read_text())
    assert made["config"]["trainer"]["args"] == ["--epochs", "1"] and len(made["trainer_code"]["sha256"]) == 64
    finished = tree_bytes(base)
    assert finished["model/saved_model.pb"]

    again = run_py("--config", "job.yaml", "--set", 'trainer.args=["--epochs","2"]', cwd=project)
    assert again.returncode == 2 and 'trainer.args ["--epochs", "1"] -> ["--epochs", "2"]' in _one_error(again)
    (project / "trainer" / "task.py").write_text(TRAINER.replace("sgd", "adam"))
    again = run_py("--config", "job.yaml", cwd=project)
    assert again.returncode == 2 and f"(trainer code in {project}: trainer/task.py changed)" in _one_error(again)
    assert tree_bytes(base) == finished  # byte for byte: the model, the records, the logs

    fresh = run_py("--config", "job.yaml", "--fresh", cwd=project, timeout=500)
    assert fresh.returncode == 0, fresh.stdout[-3000:] + fresh.stderr[-3000:]
    [copy] = [p for p in (project / "runs").iterdir() if p.name.startswith("a.")]
    assert f"--fresh: kept the previous run in {copy}" in fresh.stdout
    assert {k: v for k, v in tree_bytes(copy).items() if k != COPY_RECORD} == finished
    assert (base / "model" / "saved_model.pb").exists() and tree_bytes(base) != finished
    # prune: the copy --fresh made goes; the run itself stays
    now = tree_bytes(base)
    pruned = run_py("runs", "prune", "--keep", "0", "--root", "runs", cwd=project)
    assert pruned.returncode == 0 and f"removed {Path('runs') / copy.name}" in pruned.stdout, pruned.stdout
    assert not copy.exists() and tree_bytes(base) == now
