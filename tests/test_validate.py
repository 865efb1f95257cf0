"""jobs.rules.validate: schema + values + data folder + hardware rules, every problem at once."""
import pytest

from jobfile import config as config_lib
from jobfile.config_files import PRESET_DIR, load_document, presets
from jobs.rules.validate import data_problems, validate, validate_document


def fields(report):
    return [p.field for p in report.errors]


def test_every_preset_is_valid_without_data_checks():
    for preset in presets():
        report = validate(config_lib.load(preset), check_data=False)
        assert report.errors == [], (preset, [str(e) for e in report.errors])


def test_shape_and_hardware_problems_come_back_together():
    doc = load_document("local", [
        "training.stepz=3",                                   # shape
        "topology.chief.machine_type=n1-standard-32",         # hardware: V100 count
        "topology.chief.accelerator_type=NVIDIA_TESLA_V100", "topology.chief.accelerator_count=2",
        "topology.region=us-west2",                           # hardware: a region without that GPU
    ])
    cfg, report = validate_document(doc)
    assert cfg is None
    got = fields(report)
    assert got[0] == "training.stepz"
    assert "topology.chief.accelerator_count" in got and "topology.region" in got
    assert len(got) == len(set(map(str, report.errors)))  # no duplicates


def test_value_rules_name_the_field():
    cfg = config_lib.load("local", ["name=My Job!", "training.steps=0", "training.epochs=0",
                                    "training.learning_rate=0", "checkpoint.keep=0", "scheduling.timeout=1h",
                                    "model.name=resnet50", "data.image_size=16", "data.validation_fraction=0.95"])
    report = validate(cfg, check_data=False)
    got = {p.field: str(p) for p in report.errors}
    assert "valid choices: my-job" in got["name"]
    assert set(got) >= {"name", "training.steps", "training.learning_rate", "checkpoint.keep",
                        "scheduling.timeout", "data.image_size", "data.validation_fraction"}
    assert "resnet50 needs images of at least 32x32" in got["data.image_size"]


def test_data_folder_problems(tmp_path):
    def problems(path, source="images"):
        cfg = config_lib.load("local", [f"data.source={source}", f"data.path={path}"])
        return [str(p) for p in data_problems(cfg)]

    assert "does not exist here; expected <path>/<class>/*.jpg" in problems(tmp_path / "missing")[0]
    assert "--set data.source=synthetic" in problems(tmp_path / "missing")[0]
    (tmp_path / "file.txt").write_text("x")
    assert "is not a folder" in problems(tmp_path / "file.txt")[0]
    flowers = tmp_path / "flowers"
    (flowers / "roses").mkdir(parents=True)
    assert "at least 2 classes; found 1" in problems(flowers)[0]
    (flowers / "tulips").mkdir()
    (flowers / "roses" / "a.jpg").write_bytes(b"x")
    (flowers / "tulips" / "notes.txt").write_text("x")
    (msg,) = problems(flowers)
    assert msg.startswith("data.path: class folder") and "tulips has no .jpg/.jpeg/.png images" in msg
    assert "has no manifest.json; prepare it with python -m trainers.prepare" in problems(flowers, "tfrecord")[0]
    assert problems("gs://bucket/flowers") == []  # checked by the job itself: no credentials here


def test_source_needs_a_path():
    report = validate(config_lib.load("local", ["data.source=images"]))
    assert "data.path: data.source=images needs a path" in str(report.errors[0])


@pytest.mark.parametrize("strategy,extra,field", [
    ("mirrored", [], "topology.worker.replica_count"),
    ("multi_worker", ["topology.worker.replica_count=0"], "topology.strategy"),
    ("tpu", [], "topology.strategy"),
])
def test_a_topology_the_strategy_cannot_run(strategy, extra, field):
    report = validate(config_lib.load("local", [f"topology.strategy={strategy}", *extra]), check_data=False)
    assert field in fields(report), [str(p) for p in report.errors]


@pytest.mark.parametrize("value, expected", [
    ("tb-1", "output.tensorboard: 'tb-1' is not a Vertex TensorBoard resource name; valid choices: "
             "projects/PROJECT/locations/us-central1/tensorboards/1234567890"),
    ("projects/p/locations/europe-west4/tensorboards/7",
     "output.tensorboard: TensorBoard 'projects/p/locations/europe-west4/tensorboards/7' is in europe-west4, the job "
     "runs in us-central1: Vertex needs both in one region; valid choices: projects/p/locations/us-central1/tensorboards/ID"),
])
def test_vertex_tensorboard_must_be_a_resource_of_the_jobs_region(value, expected):
    from jobfile import config as config_lib

    report = validate(config_lib.load("local", [f"output.tensorboard={value}"]), check_data=False)
    assert expected in [str(e) for e in report.errors]
    ok = validate(config_lib.load("local", ["output.tensorboard=projects/p/locations/us-central1/tensorboards/7"]),
                  check_data=False)
    assert not [e for e in ok.errors if e.field == "output.tensorboard"]


def test_the_validate_command_honours_set_and_refuses_unknown_flags(capsys, tmp_path):
    from jobs.commands.validate_cli import validate_main
    from tests.conftest import ROOT

    job = str(ROOT / "examples" / "tabular-regressor" / "job.yaml")
    assert validate_main([job, "--set", "topology.worker.replica_count=3"]) == 0
    assert "4 replica(s) in sync" in capsys.readouterr().out
    assert validate_main([job, "--set=topology.worker.machine_type=n1-bogus-1"]) == 2
    assert "topology.worker.machine_type" in capsys.readouterr().err
    assert validate_main([job, "--wroker-count", "3"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --wroker-count: unknown flag;") and "--set KEY=VALUE" in line
    legacy = tmp_path / "legacy.yaml"
    legacy.write_text("trainingInput: {scaleTier: CUSTOM, masterType: n1-standard-4, workerType: n1-standard-4, "
                      "workerCount: 1}\n")
    # a pasted gcloud command keeps working: its flags without hardware meaning are accepted
    assert validate_main([str(legacy), "--package-path", "trainer/", "--staging-bucket", "gs://b", "--worker-count", "2"]) == 0
    capsys.readouterr()
    assert validate_main([str(legacy), "--worker-cuont", "2"]) == 2
    assert "error: --worker-cuont: unknown flag" in capsys.readouterr().err
    assert validate_main([str(legacy), "--set", "training.steps=3"]) == 2
    assert "error: --set: applies to this project's job configs" in capsys.readouterr().err


def test_a_beam_runner_without_apache_beam_is_one_line(monkeypatch, capsys):
    """apache-beam is the `beam` extra: the trainer image and a plain install do not have it."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "apache_beam" else real(name, *a))
    for runner in ("beam", "dataflow"):
        report = validate(config_lib.load("local", [f"data.prepare_runner={runner}"]), check_data=False)
        (line,) = [str(p) for p in report.errors if p.field == "data.prepare_runner"]
        assert line == (f"data.prepare_runner: {runner} needs Apache Beam (apache_beam), which is not installed in "
                        "this environment: pip install '.[beam]'; for the trainer image: python pipelines/run.py "
                        "build --build-arg EXTRAS=beam; valid choices: local")
    # nothing to prepare (TFRecords given, or the user's trainer reads its own data): no Beam needed
    for source in ("tfrecord", "none"):
        cfg = config_lib.load("local", ["data.prepare_runner=beam", f"data.source={source}"])
        assert "data.prepare_runner" not in fields(validate(cfg, check_data=False))
    # python pipelines/run.py validate says it in one line too
    from pipelines.run import main

    status = main(["validate", str(PRESET_DIR / "local.yaml"), "--set", "data.prepare_runner=beam"])
    out, err = capsys.readouterr()
    assert status == 2, out + err
    assert [line for line in (out + err).splitlines() if "prepare_runner" in line] == [
        "error: data.prepare_runner: beam needs Apache Beam (apache_beam), which is not installed in this "
        "environment: pip install '.[beam]'; for the trainer image: python pipelines/run.py build --build-arg "
        "EXTRAS=beam; valid choices: local"]


def test_load_checks_a_submitted_job_in_its_region_and_raises_every_problem():
    from jobfile.errors import ConfigError
    from jobs.rules.validate import load

    cfg = load("local", ["training.steps=7"], region="europe-west4", check_data=False)
    assert (cfg.training.steps, cfg.topology.region) == (7, "europe-west4")
    cfg = load("local", [], region="not a region!", check_data=False)  # left to the submit preflight
    assert cfg.topology.region == config_lib.load("local").topology.region
    with pytest.raises(ConfigError) as exc:
        load("local", ["training.steps=0", "training.stepz=3"], check_data=False)
    assert [p.field for p in exc.value.problems] == ["training.stepz"]  # the shape first: steps is checked once typed
    with pytest.raises(ConfigError) as exc:
        load("local", ["training.steps=0", "topology.region=us-west2",
                       "topology.chief.accelerator_type=NVIDIA_TESLA_V100", "topology.chief.accelerator_count=1"],
             check_data=False)
    assert {"training.steps", "topology.region"} <= {p.field for p in exc.value.problems}


def test_load_says_its_warnings_even_when_it_refuses():
    from jobfile.errors import ConfigError
    from jobs.rules.validate import load

    idle_ps = ["topology.parameter_server.replica_count=1", "topology.parameter_server.machine_type=n1-standard-4"]
    said: list[str] = []
    assert load("local", idle_ps, check_data=False, warn=lambda w: said.append(str(w)))
    assert [w.split(":")[0] for w in said] == ["topology.parameter_server.replica_count"]
    refused: list[str] = []
    with pytest.raises(ConfigError):
        load("local", idle_ps + ["training.steps=0"], check_data=False, warn=lambda w: refused.append(str(w)))
    assert refused == said
