"""A refusal's "valid choices" never lists a value the same check would refuse (a placeholder such as
``gs://BUCKET/...`` or ``my-gcp-project``): each is either accepted by the check or a described form
(``gs://<your bucket>/...``); and ``--compile-only`` leaves no placeholder in the config it compiles (issue 33)."""
from __future__ import annotations

from pathlib import Path

from jobs.rules import preflight
from jobfile import config as config_lib

DIGEST = "a" * 64
IMAGE = f"us-central1-docker.pkg.dev/proj-1/training/tf-trainer-gpu:t@sha256:{DIGEST}"


def _is_form(choice: str) -> bool:
    return "<" in choice and ">" in choice


def test_gcs_and_project_choices_are_accepted_or_forms():
    cases = [preflight.gcs_problems("data.path", uri, f"gs://{preflight.BUCKET_FORM}/flower_photos")
             for uri in ("gs://my-bucket/flower_photos", "gs://BUCKET/flower_photos", "/data/x", "gs://team-b")]
    cases += [preflight.project_problems("--project", p) for p in ("PROJECT", None)]
    for problems in cases:
        [p] = problems
        for choice in p.valid:
            assert _is_form(choice) or (not preflight.gcs_problems("x", choice, "") if choice.startswith("gs://")
                                        else not preflight.project_problems("x", choice)), (p, choice)


def test_image_choices_are_accepted_or_forms_even_when_compiling_without_a_project():
    for image in ("us-central1-docker.pkg.dev/my-project/training/tf-trainer:latest",
                  "us-central1-docker.pkg.dev/proj-1/training/tf-trainer:v1", "127.0.0.1:5000/x:1", ""):
        errors, _ = preflight.image_problems("container.image_uri", image, "PROJECT", "us-central1")
        assert errors
        for p in errors:
            for choice in p.valid:
                again, _ = preflight.image_problems("x", choice, "proj-1", "us-central1")
                assert _is_form(choice) or not again, (p, choice)
                # a form filled in as it says is accepted: never a tag alone that the digest rule refuses next
                filled = (choice.replace("<your project id>", "proj-1").replace("<tag>", "v1")
                          .replace("<digest>", DIGEST))
                assert preflight.image_problems("x", filled, "proj-1", "us-central1") == ([], []), (p, choice)


def test_compile_only_leaves_no_placeholder_in_the_compiled_config(tmp_path, capsys):
    from pipelines.run import main

    out = tmp_path / "p.yaml"
    assert main(["--config", "multiworker", "--set", f"container.image_uri={IMAGE}", "--set",
                 "output.base_dir=gs://team-b/runs/x", "--set", "data.path=gs://team-b/flowers",
                 "--compile-only", str(out)]) == 0
    text = out.read_text()
    assert "my-project" not in text and "my-bucket" not in text
    cfg = config_lib.load("multiworker", [f"container.image_uri={IMAGE}"])
    assert preflight.placeholder_free(cfg).container.image_repository == ""
    kept = config_lib.load("multiworker", ["container.image_repository=us-central1-docker.pkg.dev/p-1/t/x"])
    assert preflight.placeholder_free(kept) is kept
    # without an image something builds into the placeholder repository: refused, with a form to fill in
    assert main(["--config", "multiworker", "--set", "output.base_dir=gs://team-b/runs/x", "--set",
                 "data.path=gs://team-b/flowers", "--compile-only", str(tmp_path / "q.yaml")]) == 2
    err = capsys.readouterr().err
    assert "placeholder project 'my-project'" in err and "<your project id>" in err
    assert not Path(tmp_path / "q.yaml").exists()
