"""Run history that tells the truth (issue 35), on run folders made by hand (fast: no training): a tuned run's
row shows the metric of the model that went on and the wall time of every attempt; ``compare`` puts two runs on
the metrics they share; a record with a field of the wrong type is listed as unreadable with its path, never a
traceback, in ``list`` and ``compare``; no runs is one line; rows fit 120 columns. Also the command's name in
``--help`` and the summary's Model Registry request line."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


from jobs.commands import runs_cli
from jobs.local.run.summary import summary_lines
from tests.conftest import ROOT

FINISHED = "2026-11-24T10:15:40+00:00"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = runs_cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _log(folder: Path, started: dt.datetime, seconds: float) -> None:
    """A console log of one attempt: named by its start (local time), last written ``seconds`` later."""
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / started.astimezone().strftime("run-%Y%m%d-%H%M%S.log")
    path.write_text("...\n")
    os.utime(path, (started.timestamp() + seconds, started.timestamp() + seconds))


def _tuned(root: Path, name: str = "regressor-tune") -> Path:
    """A tuned user-trainer run that finished: its study (26 s) failed at the gate, then a rerun with other bars
    resumed the finished study, passed and wrote run.json (6 s)."""
    folder = root / name
    folder.mkdir(parents=True)
    finished = dt.datetime.fromisoformat(FINISHED)
    _log(folder, finished - dt.timedelta(seconds=100), 26.0)  # the study, refused by the gate
    _log(folder, finished - dt.timedelta(seconds=7), 6.5)     # the rerun that finished
    study = {"metric": "val_rmse", "goal": "minimize", "trials": [
        {"id": "1", "parameters": {"units": 4}, "metric": 1.2, "state": "SUCCEEDED", "model_dir": f"{folder}/1/model"},
        {"id": "2", "parameters": {"units": 32}, "metric": 0.98, "state": "SUCCEEDED", "model_dir": f"{folder}/2/model"}],
        "best_trial": {"id": "2", "parameters": {"units": 32}, "metric": 0.98, "model_dir": f"{folder}/2/model"}}
    verification = {"model_dir": f"{folder}/2/model", "eval": {"task": "regression", "examples": 256, "rmse": 0.97,
                                                               "mae": 0.8, "baseline_rmse": 2.7, "r2": 0.87}}
    summary = {"name": "tabular-regressor-tune", "elapsed_s": 6.0, "tuning": study, "verified_trial": "2",
               "verification": verification, "training": {}, "trainer": {},
               "model_scalars": {"validation/epoch_loss": 0.95, "train/epoch_loss": 0.9}}
    (folder / "run.json").write_text(json.dumps({
        "status": "succeeded", "finished": FINISHED, "config": {"name": "tabular-regressor-tune"}, "summary": summary,
        "steps": [], "verification": verification, "tuning": study, "gate": {}}))
    return folder


def _plain(root: Path, name: str = "regressor") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    _log(folder, dt.datetime.fromisoformat(FINISHED) - dt.timedelta(seconds=30), 20.0)
    verification = {"eval": {"task": "regression", "examples": 256, "rmse": 0.104, "mae": 0.083, "baseline_rmse": 2.7}}
    summary = {"name": "tabular-regressor", "elapsed_s": 19.2, "verification": verification,
               "trainer": {"scalars": {"validation/epoch_loss": 0.0276, "train/epoch_loss": 0.03}}}
    (folder / "run.json").write_text(json.dumps({
        "status": "succeeded", "finished": FINISHED, "config": {"name": "tabular-regressor"}, "summary": summary,
        "steps": [], "verification": verification, "tuning": {}, "gate": {}}))
    return folder


def test_a_tuned_run_shows_the_model_that_went_on_and_every_attempts_wall_time(tmp_path, capsys):
    _tuned(tmp_path / "runs")
    code, out, _ = _run(capsys, "list", "--root", str(tmp_path / "runs"), "--json")
    (run,) = json.loads(out)
    assert code == 0 and run["status"] == "finished"
    assert run["metrics"]["val_rmse"] == 0.98  # the study's tag, of the verified trial
    assert run["metrics"]["eval_rmse"] == 0.97 and run["metrics"]["eval_baseline_rmse"] == 2.7  # eval_data's verdict
    assert run["metrics"]["validation/epoch_loss"] == 0.95  # the verified trial's own scalars
    assert run["wall_s"] == pytest.approx(26.0 + 6.0)  # the study's attempt and the one that finished
    code, out, _ = _run(capsys, "list", "--root", str(tmp_path / "runs"))
    row = next(line for line in out.splitlines() if line.startswith("regressor-tune"))
    assert "eval_rmse 0.97" in row and " 32 s " in row, row


def test_an_unfinished_runs_wall_time_adds_its_attempts(tmp_path, capsys):
    folder = tmp_path / "runs" / "resumed"
    folder.mkdir(parents=True)
    start = dt.datetime.now().astimezone().replace(microsecond=0) - dt.timedelta(hours=1)
    _log(folder, start, 164.0)
    _log(folder, start + dt.timedelta(seconds=600), 40.0)
    (run,) = json.loads(_run(capsys, "list", "--root", str(tmp_path / "runs"), "--json")[1])
    assert run["status"] == "unfinished" and run["wall_s"] == pytest.approx(204.0)


def test_compare_puts_a_tuned_and_a_plain_run_on_their_shared_metrics(tmp_path, capsys):
    root = tmp_path / "runs"
    _tuned(root)
    _plain(root)
    code, out, _ = _run(capsys, "compare", "regressor", "regressor-tune", "--root", str(root))
    assert code == 0
    lines = out.splitlines()
    assert ("shared metrics: eval_rmse, eval_mae, eval_baseline_rmse, eval_examples, validation/epoch_loss, "
            "train/epoch_loss") in lines
    metric_rows = [line.split()[0] for line in lines if line.split() and line.split()[0].startswith(("eval_", "val",
                                                                                                     "train/"))]
    assert metric_rows[:6] == ["eval_rmse", "eval_mae", "eval_baseline_rmse", "eval_examples",
                               "validation/epoch_loss", "train/epoch_loss"], metric_rows  # the shared ones first
    assert any(line.split()[:3] == ["eval_rmse", "0.104", "0.97"] for line in lines), out
    result = json.loads(_run(capsys, "compare", "regressor", "regressor-tune", "--root", str(root), "--json")[1])
    assert result["shared_metrics"][0] == "eval_rmse"


CORRUPT = {
    "finished is not a time": ({"finished": "yesterday"}, 'run.json: finished is "yesterday", not a time (ISO 8601)'),
    "trials is a number": ({"tuning": {"metric": "m", "trials": 5}}, "run.json: tuning.trials is int 5, not list"),
    "bars is a number": ({"gate": {"passed": False, "bars": 5}}, "run.json: gate.bars is int 5, not list"),
    "summary is a list": ({"summary": [1]}, "run.json: summary is list [1], not dict"),
    "a trial is a string": ({"tuning": {"metric": "m", "trials": ["x"]}},
                            'run.json: tuning.trials holds str "x", not an object'),
}


@pytest.mark.parametrize("case", CORRUPT)
def test_a_record_with_a_field_of_the_wrong_type_is_unreadable_never_a_traceback(tmp_path, capsys, case):
    root = tmp_path / "runs"
    _plain(root)
    folder = root / "broken"
    folder.mkdir()
    fields, why = CORRUPT[case]
    record = {"status": "succeeded", "finished": FINISHED, "config": {"name": "x"}, "summary": {}, **fields}
    (folder / "run.json").write_text(json.dumps(record))
    code, out, err = _run(capsys, "list", "--root", str(root))
    assert code == 0 and err == "" and "Traceback" not in out
    assert f"  broken: unreadable: {folder}: {why}" in out.splitlines(), out
    assert next(line for line in out.splitlines() if line.startswith("broken")).split()[1:3] == ["-", "unreadable"]
    found = {r["name"]: r for r in json.loads(_run(capsys, "list", "--root", str(root), "--json")[1])}
    assert found["broken"]["status"] == "unreadable" and found["broken"]["note"] == f"{folder}: {why}"
    assert found["regressor"]["status"] == "finished"  # the others are listed as ever
    code, out, err = _run(capsys, "compare", "broken", "regressor", "--root", str(root))
    assert code == 0 and err == "" and f"A is unreadable: {folder}: {why}" in out
    assert "config: not compared (a run's record is unreadable)" in out


def test_a_gate_or_study_record_of_the_wrong_shape_beside_an_unfinished_run(tmp_path, capsys):
    root = tmp_path / "runs"
    folder = root / "half"
    folder.mkdir(parents=True)
    (folder / "tuning.json").write_text(json.dumps({"metric": "m", "trials": 5}))
    _log(folder, dt.datetime.now().astimezone().replace(microsecond=0) - dt.timedelta(minutes=5), 3)
    (run,) = json.loads(_run(capsys, "list", "--root", str(root), "--json")[1])
    assert run["status"] == "unreadable" and run["note"] == f"{folder}: tuning.json: trials is int 5, not list"


def test_no_runs_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, "list")
    assert code == 0 and err == "" and out.count("\n") == 1
    assert out.startswith(f"no runs here: no runs/ folder in {tmp_path} (a run writes to its output.base_dir")
    assert _run(capsys, "list", "--json")[1] == "[]\n"
    (tmp_path / "runs").mkdir()
    assert _run(capsys, "list")[1] == "no runs under runs\n"


def test_rows_fit_120_columns(tmp_path, capsys):
    root = tmp_path / "runs"
    _tuned(root, "regressor-tune-lr-sweep")
    _plain(root, "regressor.20261124-101500")
    for folder in root.iterdir():
        (folder / "report.html").write_text("<html></html>")
    code, out, _ = _run(capsys, "list", "--root", str(root))
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 120, out
    assert f"reports: {root}/<run>/report.html" in out.splitlines()
    row = next(line for line in out.splitlines() if line.startswith("regressor.2026"))
    assert row.split()[2:4] == ["finished", "-"] and row.split()[-1] == "yes" and "eval_rmse 0.104" in row


# -- the command's name; the summary's request line --------------------------------------------------------------
def _as_vtp(*argv: str) -> str:
    code = ("import sys; sys.argv[0] = '/usr/local/bin/vtp'; from pipelines.run import main; "
            f"sys.exit(main({list(argv)!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_help_names_the_command_as_it_was_typed():
    top = _as_vtp("--help")
    assert top.startswith("usage: vtp ") and "python pipelines/run.py" not in top
    assert "  vtp --config job.yaml --set training.steps=50" in top
    sub = _as_vtp("runs", "--help")
    assert sub.startswith("usage: vtp runs ") and "python pipelines/run.py" not in sub
    for command in ("build", "components", "upload-template", "register-model"):
        assert _as_vtp(command, "--help").startswith(f"usage: vtp {command} "), command


def test_the_summary_names_the_model_registry_request(tmp_path):
    lines = summary_lines({"upload_request": str(tmp_path / "model_upload_request.json"),
                                "trainer_version": {"text": "git abc123"}, "code_version": {"text": "git def456"}})
    assert f"  registry request    {tmp_path / 'model_upload_request.json'}    (the Model Registry models:upload " \
           "request)" in lines
    assert "  trainer code        git abc123" in lines and "  tool code           git def456" in lines
