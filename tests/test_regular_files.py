"""Every file a user names is read only when it is a regular file of bounded size (``jobfile.regular_file.open_regular``
/ ``read_regular``, the one check): a named pipe would block ``open()`` until a writer came, a device never
ends, a huge file exhausts memory. Each reader says one line naming its field, or (a record, a log) treats the
path as unreadable; none waits. Every case runs under a time bound far above its cost: a hang fails, a slow
machine does not."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from trainers import record_reader
from jobfile import regular_file

BOUND_S = 120

KINDS = ["fifo", "char-device", "socket", "folder", "link-to-fifo", "huge"]


@pytest.fixture
def make_path(tmp_path):
    """``make_path(kind, name)``: a path of that kind under tmp_path (a huge file is sparse: no disk used)."""
    made = []

    def make(kind: str, name: str = "x") -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "char-device":
            path.symlink_to("/dev/zero")  # a device node needs root to create; a link to one is as good a trap
        elif kind == "socket":
            s = socket.socket(socket.AF_UNIX)
            s.bind(str(path))
            made.append(s)
        elif kind == "folder":
            path.mkdir()
        elif kind == "link-to-fifo":
            os.mkfifo(tmp_path / f"{name}.real")
            path.symlink_to(tmp_path / f"{name}.real")
        elif kind == "huge":
            with open(path, "wb") as f:
                f.truncate(regular_file.READ_LIMIT_BYTES + 1)
        return str(path)

    yield make
    for s in made:
        s.close()


EXPECTED = {"fifo": "is a named pipe (FIFO), not a regular file", "char-device": "is a character device, not a regular",
            "socket": "is a socket, not a regular file", "folder": "is a folder, not a regular file",
            "link-to-fifo": "is a named pipe (FIFO), not a regular file", "huge": "bytes, more than the"}


@pytest.mark.timeout(BOUND_S)
@pytest.mark.parametrize("kind", KINDS)
def test_the_one_check_names_the_field_and_the_kind(make_path, kind):
    path = make_path(kind)
    with pytest.raises(regular_file.NotARegularFile) as refused:
        regular_file.read_regular(path, "serving.eval_data")
    (problem,) = refused.value.problems
    assert problem.field == "serving.eval_data" and EXPECTED[kind] in problem.message, problem
    assert record_reader.read_or_none(path) is None  # a record reader: unreadable, not a hang


def test_a_regular_file_within_the_bound_is_read_whole(tmp_path):
    path = tmp_path / "ok.json"
    path.write_bytes(b'{"a": 1}')
    assert regular_file.read_regular(str(path), "f") == b'{"a": 1}' and record_reader.read_or_none(str(path)) == {"a": 1}
    assert regular_file.read_regular(str(path), "f", limit=8) == b'{"a": 1}'
    with pytest.raises(regular_file.NotARegularFile):
        regular_file.read_regular(str(path), "f", limit=7)
    with pytest.raises(FileNotFoundError):
        regular_file.read_regular(str(tmp_path / "missing"), "f")


@pytest.mark.timeout(BOUND_S)
@pytest.mark.parametrize("kind", ["fifo", "char-device", "link-to-fifo"])
def test_serving_eval_data_and_sample_request(make_path, kind):
    from jobs.evaluation import examples_file
    from jobs.rules import validate

    path = make_path(kind, "eval.jsonl")
    problems = examples_file.eval_data_problems(path)
    assert [p.field for p in problems] == ["serving.eval_data"] and EXPECTED[kind] in problems[0].message
    with pytest.raises(examples_file.EvalError, match=r"^serving\.eval_data: .*not a regular file"):
        examples_file.read_examples(path)
    request = make_path(kind, "request.json")
    problems = validate.sample_request_problems(request)
    assert [p.field for p in problems] == ["serving.sample_request"] and EXPECTED[kind] in problems[0].message
    assert examples_file.eval_data_problems(make_path("folder", "good")) != []  # a folder keeps its own line


@pytest.mark.timeout(BOUND_S)
@pytest.mark.parametrize("kind", ["fifo", "char-device", "socket"])
def test_files_under_the_trainers_source_dir_are_never_read_unless_regular(make_path, tmp_path, kind):
    """A pipe, device or socket (or a link to one) among a user's trainer files: left out of the image as "not a
    regular file", never sniffed for credentials nor hashed, nor read for a did-you-mean."""
    from pathlib import Path

    from jobs.rules import trainer_section as trainer_spec
    from jobs.images.user_code import collect_code

    src = tmp_path / "src"
    (src / "trainer").mkdir(parents=True)
    (src / "trainer" / "task.py").write_text("if __name__ == '__main__':\n    pass\n")
    make_path(kind, "src/trainer/credentials.json" if kind != "socket" else "src/trainer/s.py")
    make_path("fifo", "src/trainer/other.py")
    included, excluded = collect_code(src)
    # a link is archived as the link itself (as docker does), never followed; a pipe or socket is left out
    assert included == (["trainer/credentials.json", "trainer/task.py"] if kind == "char-device"
                        else ["trainer/task.py"]), included
    assert ("trainer/other.py", "not a regular file") in excluded
    assert trainer_spec._modules_in(Path(src)) == ["trainer.task"]


@pytest.mark.timeout(BOUND_S)
@pytest.mark.parametrize("kind", ["fifo", "char-device"])
@pytest.mark.process
def test_a_run_record_a_log_and_a_lock_that_are_not_files(make_path, tmp_path, kind):
    from jobs.local.history.reader import _tail
    from jobs.local.run.lock import LOCK_NAME, RunLock

    run = tmp_path / "runs" / "flowers"
    (run / "logs").mkdir(parents=True)
    make_path(kind, "runs/flowers/run.json")
    make_path(kind, "runs/flowers/logs/run-1.log")
    make_path(kind, f"runs/flowers/{LOCK_NAME}")
    assert _tail(str(run / "logs" / "run-1.log")) == []
    assert RunLock(str(run)).holder() == {}
    done = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "runs", "list", "--root",
                           str(tmp_path / "runs")], capture_output=True, text=True, timeout=BOUND_S)
    assert "Traceback" not in done.stderr and "flowers" in done.stdout, (done.stdout, done.stderr)


@pytest.mark.parametrize("command", [["validate"], ["--compile-only", "out.yaml", "--config"], ["ci-local", "--config"]])
@pytest.mark.parametrize("kind", ["fifo", "char-device", "huge"])
@pytest.mark.process
def test_a_job_file_or_build_file_that_is_not_a_file_is_one_line(make_path, tmp_path, command, kind):
    path = make_path(kind, "job.yaml")
    done = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), *command, path,
                           *(["--as", "submit"] if command[0] == "ci-local" else [])],
                          capture_output=True, text=True, timeout=BOUND_S, cwd=tmp_path)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1 and err[0].startswith("error: "), (done.returncode, done.stderr)
    assert EXPECTED[kind] in err[0] and (path in err[0] or os.path.realpath(path) in err[0]), err
