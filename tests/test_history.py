"""Run history (jobs.local.history: ``python pipelines/run.py runs list|compare|prune``) on real run folders.

Two real runs of ``pipelines/run.py`` (the session's ``real_runs``: the default preset, then ``--fresh`` with
another config) plus folders made from them the way other endings leave them: Ctrl-C (run.py's
``interrupted ...`` line), a failed step (``error: ...``), a kill -9 (no last word), a live run (its lock
held by another process), and a folder that is no run at all; and a third real run whose gate refuses the
model (``gated``: the run fails at the gate step, leaving gate.json and no run.json). Also the report and the
console of the real runs (steps' wall times, validation series, new sections).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jobs.commands import runs_cli
from jobs.local.history import prune
from tests.tiers import tier
from jobs.local.history.reader import _ending

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.integration


def _strip_record(folder: Path, ending: str | None, running: list[str]) -> None:
    """``folder`` as a run that never wrote run.json: its log ends with ``ending`` (None: no last word)."""
    (folder / "run.json").unlink()
    (folder / "report.html").unlink()
    log = sorted((folder / "logs").glob("run-*.log"))[-1]
    text = log.read_text()
    text = text[:text.index("=" * 72)]  # the summary is printed after run.json is written: not there
    log.write_text(text + (ending + "\n" if ending else ""))
    steps = json.loads((folder / "steps.json").read_text())
    steps["steps"] = [s for s in steps["steps"] if s["name"] not in running and s["name"] not in ("verify-model",
                                                                                                  "upload-model", "report")]
    steps["running"] = running
    (folder / "steps.json").write_text(json.dumps(steps))


GATED_BAR = "accuracy > 1"  # no model passes it: the gate refuses whatever trained


@pytest.fixture(scope="module")
@tier("integration")
def gated(prepared_data, tmp_path_factory) -> dict:
    """A real run whose gate refuses the model (4 steps, one device): ``{"path", "console", "returncode"}``."""
    import os
    import uuid

    from tests.conftest import assert_no_processes_left

    base = tmp_path_factory.mktemp("gated") / "gated"
    marker = uuid.uuid4().hex
    proc = subprocess.run(
        [sys.executable, "pipelines/run.py", "--set", f"output.base_dir={base}", "--set", "data.source=tfrecord",
         "--set", f"data.path={prepared_data}", "--set", "training.steps=4", "--set", "checkpoint.every_steps=4",
         "--set", "topology.strategy=one_device", "--set", "topology.worker.replica_count=0",
         "--set", f"serving.gate.thresholds=[\"{GATED_BAR}\"]"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ, RUNS_TEST_MARKER=marker))
    assert_no_processes_left(marker)
    return {"path": base, "console": proc.stdout + proc.stderr, "returncode": proc.returncode}


@pytest.fixture(scope="module")
def root(real_runs, gated, tmp_path_factory) -> Path:
    """The real runs' root plus hand-made endings, copied from the real current run, and the refused run."""
    src = real_runs["root"]
    root = tmp_path_factory.mktemp("history") / "runs"
    shutil.copytree(src, root, symlinks=True)
    shutil.copytree(gated["path"], root / "gated", symlinks=True)
    current = root / "local"
    for name, ending, running in (
            ("ctrl-c", "interrupted at step 8; last checkpoint /x/ckpt-8; resume with: python pipelines/run.py", ["train"]),
            ("failed", "error: the pipeline failed: Task 'train' finished with status FAILURE", []),
            ("killed", None, ["train"])):
        shutil.copytree(current, root / name)
        _strip_record(root / name, ending, running)
    (root / "not-a-run").mkdir()
    (root / "not-a-run" / "notes.txt").write_text("hello")
    return root


@pytest.fixture
def live(root):
    """A folder whose run lock a live process holds (as a run in progress)."""
    folder = root / "live"
    if not folder.exists():
        shutil.copytree(root / "killed", folder)
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from jobs.local.run.lock import RunLock

        RunLock({str(folder)!r}).acquire()
        print("held", flush=True)
        time.sleep(60)
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield folder
    finally:
        holder.kill()
        holder.wait()


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = runs_cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- list ---------------------------------------------------------------------------------------------------
def test_list_names_every_run_with_its_status_steps_metrics_wall_time_and_report(root, real_runs, live, capsys):
    code, out, err = _run(capsys, "list", "--root", str(root))
    assert code == 0 and err == ""
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip() and not line.startswith(("  ", "─"))
            and not line.startswith(("reports: ", "cost: "))}
    archive = real_runs["archive"].name
    assert set(rows) == {"run", "local", archive, "ctrl-c", "failed", "killed", "live", "gated"}  # not "not-a-run"
    assert re.search(r"^local\s+flowers-local\s+finished\s+16/16\s+val acc \d\.\d{3}(, train loss \d\.\d{4})?\s+"
                     r"\d+ s\s+(~\$[\d.]+\s+)?\d{4}-\d\d-\d\d \d\d:\d\d\s+yes\s*$", rows["local"]), rows["local"]
    assert re.search(rf"^{re.escape(archive)}\s+flowers-local\s+finished\s+10/10\s+val acc", rows[archive])
    assert rows[archive].split()[-1] == "yes"  # the copy's own report, at the path the reports line names
    assert f"reports: {root}/<run>/report.html" in out.splitlines()
    assert max(len(line) for line in out.splitlines() if not line.startswith("  ")) <= 120  # notes aside
    for name, status in (("ctrl-c", "interrupted"), ("failed", "failed"), ("killed", "unfinished"), ("live", "running"),
                         ("gated", "failed")):
        assert rows[name].split()[2] == status, rows[name]
    notes = [line for line in out.splitlines() if line.startswith("  ")]
    assert any(n.startswith("  ctrl-c: interrupted: in step train: interrupted at step 8") for n in notes), notes
    assert any(n.startswith("  failed: failed: the pipeline failed: Task 'train'") for n in notes), notes
    assert any(n.startswith("  killed: unfinished: in step train: stopped without a word") for n in notes), notes
    assert any(re.fullmatch(r"  gated: failed: the gate refused the model: serving\.gate\.thresholds\[0\]: "
                            r"accuracy [\d.]+ > 1 missed", n) for n in notes), notes
    assert "Traceback" not in out


def test_list_json_for_scripts(root, real_runs, capsys):
    code, out, _ = _run(capsys, "list", "--root", str(root), "--json")
    assert code == 0
    found = {r["name"]: r for r in json.loads(out)}
    now, then = found["local"], found[real_runs["archive"].name]
    assert now["status"] == then["status"] == "finished" and now["archive_of"] is None and then["archive_of"] == "local"
    assert (now["steps"], now["total_steps"], then["steps"], then["total_steps"]) == (16, 16, 10, 10)
    for run in (now, then):
        assert 0 <= run["metrics"]["val_accuracy"] <= 1 and run["metrics"]["train_loss"] > 0
        assert run["metrics"]["examples_per_second"] > 0 and run["wall_s"] > 0
        assert [s["name"] for s in run["step_times"]][:2] == ["validate-config", "prepare-data"]
        assert run["code_version"] and Path(run["report"]).exists()
    killed = found["killed"]
    assert killed["steps"] == 16 and killed["total_steps"] == 16 and killed["config"]["training"]["steps"] == 16
    assert killed["metrics"]["train_loss"] > 0  # metrics.json was written before the end
    assert [r["name"] for r in json.loads(out)][0] in ("local", "ctrl-c", "failed", "killed", "gated")  # newest first


# -- a run the gate refused ---------------------------------------------------------------------------------
def test_a_refused_model_fails_the_run_and_its_gate_record_is_read_back(root, gated, capsys):
    console = gated["console"]
    assert gated["returncode"] == 1, console[-3000:]
    folder = root / "gated"
    assert not (folder / "run.json").exists() and not (folder / "model_upload_request.json").exists()
    record = json.loads((folder / "gate.json").read_text())  # what the run leaves: the gate's record
    assert record["passed"] is False and re.fullmatch(r"accuracy [\d.]+ > 1: missed", record["lines"][0])
    assert re.search(r"^error: the pipeline failed at step gate: serving\.gate\.thresholds\[0\]: accuracy [\d.]+ > 1 "
                     r"missed, so the model is not registered", console, re.M), console[-3000:]
    steps = json.loads((folder / "steps.json").read_text())["steps"]
    assert steps[-1]["name"] == "gate" and steps[-1]["status"] == "FAILURE"
    # the report step runs before the gate (a refused model's run has its report too) and checks the bars itself
    page = (folder / "report.html").read_text()
    assert re.search(r"<p id='gate-verdict' class='missed'>missed: serving\.gate\.thresholds\[0\]: accuracy [\d.]+ "
                     r"&gt; 1 missed", page), page
    assert "The gate refused this model" in page and "checked here on the figures above" in page
    # run.py's own last line names the step and the bar missed
    status, note, _cause = _ending(str(sorted((folder / "logs").glob("run-*.log"))[-1]))
    assert status == "failed" and note.startswith("the pipeline failed at step gate: serving.gate.thresholds[0]: "
                                                  "accuracy "), note

    code, out, _ = _run(capsys, "list", "--root", str(root), "--json")
    run = {r["name"]: r for r in json.loads(out)}["gated"]
    assert run["status"] == "failed" and run["note"].startswith("the gate refused the model: serving.gate.thresholds[0]")
    assert run["gate"] == {"passed": False, "missed": record["missed"].split(", so the model")[0],
                           "lines": record["lines"]}
    assert run["steps"] == 4 and run["total_steps"] == 4 and run["study"] is None
    assert run["report"] == str(folder / "report.html")
    assert run["metrics"]["val_accuracy"] == pytest.approx(json.loads((folder / "verification.json").read_text())["accuracy"])

    code, out, _ = _run(capsys, "compare", "gated", "local", "--root", str(root))
    assert code == 0
    assert re.search(r"^\s*status\s+failed\s+finished\s*$", out, re.M), out
    assert re.search(r"^\s*gate\s+missed: serving\.gate\.thresholds\[0\]: accuracy [\d.]+ > 1 missed\s+-\s*$", out,
                     re.M), out
    assert re.search(r"^\s*step gate \(s\)\s+[\d.]+\s+-\s*$", out, re.M), out
    assert re.search(r"^\s*serving\.gate\.thresholds\s+\[\"accuracy > 1\"\]\s+\[\]\s*$", out, re.M), out


def test_a_tuned_runs_study_and_gate_are_listed_and_compared(root, tmp_path, capsys):
    """run.json's ``tuning`` and ``gate`` (jobs.local.run.folder.write_record) as list --json and compare show them."""
    from jobs.local.run.folder import write_record

    work = tmp_path / "runs"
    shutil.copytree(root / "local", work / "tuned")
    record = json.loads((work / "tuned" / "run.json").read_text())
    study = {"metric": "val_accuracy", "goal": "maximize", "trials": [
        {"id": "1", "parameters": {"training.optimizer": "sgd"}, "metric": 0.5, "state": "SUCCEEDED"},
        {"id": "2", "parameters": {"training.optimizer": "adam"}, "metric": None, "state": "FAILED"}],
        "best_trial": {"id": "1", "parameters": {"training.optimizer": "sgd"}, "metric": 0.5}}
    gate = {"passed": True, "lines": ["accuracy 0.5 >= 0.1: passed"], "missed": "", "notes": []}
    write_record(str(work / "tuned"), json.dumps(record["config"]), {**record["summary"], "tuning": study,
                                                                          "gate": gate})
    shutil.copytree(root / "gated", work / "gated")
    code, out, _ = _run(capsys, "list", "--root", str(work), "--json")
    tuned = {r["name"]: r for r in json.loads(out)}["tuned"]
    assert tuned["status"] == "finished" and tuned["gate"] == {"passed": True, "missed": "", "lines": gate["lines"]}
    assert tuned["study"] == {"metric": "val_accuracy", "goal": "maximize", "trials": 2, "succeeded": 1, "failed": 1,
                              "other": 0, "best_trial": study["best_trial"],
                              "baseline": None, "handed_on": None}  # a study recorded before baselines were run
    code, out, _ = _run(capsys, "compare", "tuned", "gated", "--root", str(work))
    assert re.search(r"^\s*study\s+2 trials, 1 succeeded, 1 failed\s+-\s*$", out, re.M), out
    assert re.search(r"^\s*best trial\s+1: val_accuracy 0\.5 with training\.optimizer=sgd\s+-\s*$", out, re.M), out
    assert re.search(r"^\s*gate\s+passed\s+missed: serving", out, re.M), out


def test_list_imports_neither_tensorflow_nor_kfp(root):
    """What keeps ``runs list`` fast (importing TensorFlow costs 2-9 s): it never imports it nor kfp. Its time is
    printed, never asserted: it depends on the machine (house rule: figures live in benchmarks)."""
    code = ("import sys, time; t = time.monotonic(); from jobs.commands import runs_cli; "
            f"rc = runs_cli.main(['list', '--root', {str(root)!r}]); "
            "print('took', time.monotonic() - t); print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'kfp', 'keras')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("[]"), proc.stdout
    assert re.search(r"^took [\d.]+$", proc.stdout, re.M), proc.stdout


def test_list_of_an_empty_or_missing_root(tmp_path, capsys):
    assert _run(capsys, "list", "--root", str(tmp_path))[1] == f"no runs under {tmp_path}\n"
    code, out, err = _run(capsys, "list", "--root", str(tmp_path / "nope"))
    assert code == 2 and out == ""
    assert err.startswith("error: --root: ") and err.count("\n") == 1 and "valid choices: runs" in err


def test_a_run_folder_given_as_root_is_named(real_runs, capsys):
    code, _, err = _run(capsys, "list", "--root", str(real_runs["current"]))
    assert code == 2 and "is a run folder itself" in err and f"valid choices: {real_runs['root']}" in err


# -- compare ------------------------------------------------------------------------------------------------
def test_compare_the_fresh_run_with_the_one_it_kept(root, real_runs, capsys):
    archive = real_runs["archive"].name
    code, out, err = _run(capsys, "compare", archive, "local", "--root", str(root))
    assert code == 0 and err == ""
    assert re.search(r"^\s*steps\s+10/10\s+16/16\s*$", out, re.M), out
    assert re.search(r"^\s*val_accuracy\s+[\d.]+\s+[\d.]+\s*$", out, re.M), out
    assert re.search(r"^\s*step train \(s\)\s+[\d.]+\s+[\d.]+\s*$", out, re.M), out
    assert "config: 4 key(s) differ" in out, out
    for key, a, b in (("training.steps", "10", "16"), ("checkpoint.every_steps", "5", "8"),
                      ("topology.strategy", "multi_worker", "one_device"), ("topology.worker.replica_count", "1", "0")):
        assert re.search(rf"^\s*{re.escape(key)}\s+{a}\s+{b}\s*$", out, re.M), key

    code, out, _ = _run(capsys, "compare", str(real_runs["archive"]), str(root / "local"), "--json")  # paths work too
    assert code == 0
    result = json.loads(out)
    assert {d["key"] for d in result["config_diff"]} == {"training.steps", "checkpoint.every_steps", "topology.strategy",
                                                         "topology.worker.replica_count"}
    fields = {r["field"]: r for r in result["side_by_side"]}
    assert fields["val_accuracy"]["a"] is not None and fields["train_loss"]["b"] is not None


def test_compare_an_unfinished_run_uses_the_validated_config(root, real_runs, capsys):
    code, out, _ = _run(capsys, "compare", "killed", "local", "--root", str(root))
    assert code == 0 and "config: identical" in out
    assert re.search(r"^\s*status\s+unfinished\s+finished\s*$", out, re.M), out


@pytest.mark.parametrize("argv, needle", [
    (["compare", "nope", "local"], "error: A: no run named 'nope' under "),
    (["compare", "local", "not-a-run"], "error: B: "),
    (["compare", "local"], "error: python pipelines/run.py runs compare: the following arguments are required: B"),
    (["frobnicate"], "error: python pipelines/run.py runs: argument command: invalid choice: 'frobnicate'"),
    (["prune", "--keep", "-1"], "error: python pipelines/run.py runs prune: argument --keep: --keep must be a whole number"),
    (["prune", "--older-than", "soon"],
     "error: python pipelines/run.py runs prune: argument --older-than: --older-than must be a finite number of days >= 0"),
])
def test_bad_input_is_one_error_line(root, capsys, argv, needle):
    code, out, err = _run(capsys, *argv, "--root", str(root))
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(needle), err
    if argv[0] == "compare" and argv[-1] == "not-a-run":
        assert "is not a run folder" in err and "valid choices: " in err and "local" in err
    if argv[:2] == ["compare", "nope"]:
        assert "valid choices: " in err and "ctrl-c" in err


# -- prune --------------------------------------------------------------------------------------------------
def _copies(work: Path, stamps: list[str], source: Path) -> list[Path]:
    """--fresh copies of ``source`` under ``work``, made at ``stamps``."""
    made = []
    for stamp in stamps:
        target = work / f"local.{stamp}"
        shutil.copytree(source, target)
        made.append(target)
    return made


def test_prune_keeps_the_newest_copies_and_never_a_live_or_current_folder(tmp_path, root, real_runs, capsys):
    work = tmp_path / "runs"
    shutil.copytree(root, work, symlinks=True)
    shutil.rmtree(work / real_runs["archive"].name)
    old = _copies(work, ["20200101-000000", "20200102-000000", "20200102-000000-2", "20200103-000000"], root / "killed")
    before = {p.name for p in work.iterdir()}

    code, out, err = _run(capsys, "prune", "--keep", "2", "--dry-run", "--root", str(work))
    assert code == 0 and err == ""
    assert {p.name for p in work.iterdir()} == before  # a dry run removes nothing
    would = re.findall(r"^would remove (\S+) \(", out, re.M)
    assert sorted(Path(w).name for w in would) == ["local.20200101-000000", "local.20200102-000000"]
    expected = sum(prune.folder_bytes(str(work / Path(w).name)) for w in would)
    assert f"would free {expected:,} bytes" in out and "kept 2 copies" in out

    # a run started in one of the copies meanwhile: its lock is respected
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from jobs.local.run.lock import RunLock

        RunLock({str(old[0])!r}).acquire()
        print("held", flush=True)
        time.sleep(60)
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        rc, out, err = _run(capsys, "prune", "--keep", "2", "--root", str(work))
    finally:
        holder.kill()
        holder.wait()
    assert rc == 0
    assert f"skipped {old[0]}: output.base_dir: {old[0]} is in use by run pid {holder.pid}" in out
    assert re.search(rf"^removed {re.escape(str(old[1]))} \([\d.]+ [kMG]?B\)$", out, re.M), out
    assert old[0].exists() and not old[1].exists() and old[2].exists() and old[3].exists()
    assert (work / "local").exists() and (work / "killed").exists()  # run folders are never copies
    assert not [p for p in work.iterdir() if p.name.endswith(".removing")]

    # --older-than alone: every copy made more than N days ago (all of these), the current folder stays; what an
    # interrupted prune had set aside goes too
    aside = work / ".local.19990101-000000.removing"  # as a prune sets a copy aside: its record names that copy
    shutil.copytree(old[0], aside)
    record = json.loads((aside / prune.COPY_RECORD).read_text()) if (aside / prune.COPY_RECORD).exists() else {}
    (aside / prune.COPY_RECORD).write_text(json.dumps({**record, "copy_of": "local", "copy": "local.19990101-000000"}))
    rc, out, _ = _run(capsys, "prune", "--older-than", "30", "--root", str(work))
    assert rc == 0 and not any(p.exists() for p in old) and (work / "local").exists()
    assert not (work / ".local.19990101-000000.removing").exists() and "left by an interrupted prune" in out
    assert re.search(r"^freed [\d,]+ bytes \([\d.]+ [kMG]?B\) in 3 --fresh copies; kept 0 copies", out, re.M), out


def test_prune_by_default_keeps_three_and_older_than_spares_recent_copies(tmp_path, root, capsys):
    work = tmp_path / "runs"
    work.mkdir()
    shutil.copytree(root / "killed", work / "local")
    recent = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() - 3600))
    made = _copies(work, ["20200101-000000", "20200102-000000", "20200103-000000", "20200104-000000", recent],
                   root / "killed")
    rc, out, _ = _run(capsys, "prune", "--root", str(work))
    assert rc == 0 and [p.exists() for p in made] == [False, False, True, True, True]
    rc, out, _ = _run(capsys, "prune", "--keep", "0", "--older-than", "1", "--root", str(work))
    assert rc == 0 and [p.exists() for p in made] == [False, False, False, False, True]
    assert "kept 1 copy (local." + recent + ")" in out


# -- the real runs' console, run.json, report ---------------------------------------------------------------
def test_the_console_and_run_json_show_the_same_step_times(real_runs):
    for console, base in zip(real_runs["consoles"], (real_runs["archive"], real_runs["current"])):
        record = json.loads((base / "run.json").read_text())
        shown = dict(re.findall(r"^✓ (\S+) \(([\d.]+) s\)$", console, re.M))
        recorded = {s["name"]: f"{s['seconds']:.1f}" for s in record["steps"]}
        assert shown and shown == recorded, (shown, recorded)
        summary_line = next(line for line in console.splitlines() if line.startswith("  steps "))
        for name, seconds in recorded.items():
            assert f"{name} {seconds} s" in summary_line
        assert json.loads((base / "steps.json").read_text())["steps"] == record["steps"]
        assert record["summary"]["code_version"]["text"] and record["summary"]["started"]
        assert re.search(r"^  code {16}(git [0-9a-f]{12}|vertex-tf-pipelines )", console, re.M), console


def test_the_real_report_answers_is_this_model_any_good(real_runs):
    page = (real_runs["current"] / "report.html").read_text()
    for needle in ("Is this model any good?", "held-out images right", "most common class", "id='hyperparameters'",
                   "<th>learning rate</th><td>0.002</td>", "<th>optimizer</th><td>adam</td>",
                   "<th>training length</th><td>16 steps</td>", "<th>image size</th><td>32×32</td>",
                   "id='data'", "id='per-class'", "id='model'", "(the variables its serving signature reads)",
                   "id='steps'", "<td>validate-config</td>", "<td>train</td>", "<td>upload-model</td>", "<tr><td>report</td><td>",
                   "id='provenance'", "<th>code version</th>", "<th>run started</th>",
                   "validation series: validation/accuracy, validation/loss",
                   "this run started from step 0 (there was no checkpoint to resume from)",
                   "<td>validation/loss</td>", "<td>train/loss</td>"):
        assert needle in page, needle
    assert "resumed from step —" not in page
    assert "running" not in page.split("<!-- pipeline-steps -->")[1].split("<!-- /pipeline-steps -->")[0], \
        "the run completes the page's step table once every step has ended"
    config = json.loads((real_runs["current"] / "run.json").read_text())["config"]
    manifest = json.loads((Path(config["data"]["path"]) / "manifest.json").read_text())
    for c in manifest["classes"]:  # examples per split and class, from the prepared data's manifest
        assert f"<td>{c}</td><td>{manifest['counts']['train'][c]}</td><td>{manifest['counts']['validation'][c]}</td>" \
            in page, c
    samples = re.findall(r"<figure class='(?:ok|wrong)' data-class='([^']+)'", page)
    assert set(samples) == set(manifest["classes"]) and len(samples) == 12, samples  # every class, 4 each
    # one throughput figure: the job table's is the last train/examples_per_second point
    figure = re.search(r"<th>training throughput</th><td>([\d.]+) examples/s", page).group(1)
    row = re.search(r"<td>train/examples_per_second</td><td>\d+</td><td>[\d.]+</td><td>([\d.e+]+)</td>", page)
    assert abs(float(row.group(1)) - float(figure)) < 0.05, (row.group(1), figure)
