"""What was accepted and wrong (issue 44), one test per class with cases beyond the issue's examples: each is one
``error:`` (or, for a flag that overrides the file, ``warning:``) line naming the field, the rule and a valid
alternative; nothing wrong accepted; no traceback.

Classes and owners:
* a region's name, wherever one is read (``jobs.rules.hardware.names.region_verdict`` / ``jobs.rules.hardware.shared.
  region_problems``: topology.region, placement.regions, ``vtp hardware --region``, the submission's ``--region``);
* ``vtp hardware`` filters that match nothing say so, with what exists (``jobs.commands.hardware_cli``);
* a boot disk the machine cannot use, SPOT with a TPU Pod, VPC peering with accelerators Vertex does not peer
  (catalog data with sources; ``jobs.rules.hardware.vertex_rules``);
* ``serving.eval_data``: a NaN in an instance, labels of the wrong kind for ``eval_task``, labels that are no class
  of the model (``jobs.evaluation.examples_file``);
* a flag that overrides a different value of the job file (``jobs.commands.flag_file.flag_file_warnings``);
* ``tuning`` with ``baseline: false`` and nothing to search (``jobs.rules.tuning_section.section_problems``).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jobs.evaluation import examples_file
from jobs.evaluation.verdict import judge
from jobs.rules.hardware.catalog import load_catalog
from jobs.rules.hardware.names import region_verdict
from jobs.rules.hardware.shared import region_problems
from jobs.rules.validate import validate_document
from jobfile import config as config_lib

CAT = load_catalog()


def _errors(doc: dict) -> list[str]:
    _, report = validate_document(doc, check_data=False)
    return [str(e) for e in report.errors]


def _one_device(**chief) -> dict:
    return {"topology": {"strategy": "tpu" if "tpu_topology" in chief or "TPU" in chief.get("accelerator_type", "")
                         else "one_device", "chief": chief, "worker": {"replica_count": 0}}}


# ---- a region's name ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("region, meant", [
    ("US-CENTRAL1", "us-central1"), ("us-central", "us-central1"), ("us-central1 ", "us-central1"),
    (" europe-west4", "europe-west4"), ("us-central1\n", "us-central1"), ("Europe_West4", "europe-west4"),
    ("us-centrl1", "us-central1"), ("eurpoe-west4", "europe-west4"), ("asia-northeast", "asia-northeast1"),
    ("us_east4", "us-east4"),
])
def test_a_malformed_or_mistyped_region_is_refused_with_did_you_mean_everywhere(region, meant):
    from jobs.rules.placement import placement_problems

    doc = {"topology": {"region": region}}
    line = [e for e in _errors(doc) if e.startswith("topology.region:")]
    assert len(line) == 1 and f"did you mean {meant}?" in line[0] and "valid choices: " + meant in line[0], line
    cfg = config_lib.from_dict({"placement": {"regions": ["us-east4", region]}})
    assert [p.field for p in placement_problems(cfg)] == ["placement.regions[1]"]
    assert region_problems("--region", region)[0].valid[0] == meant


def test_vtp_hardware_and_the_submission_check_the_regions_name_first(capsys):
    from jobs.rules.preflight import region_problems as submission_region
    from pipelines.run import main

    assert main(["hardware", "--region", "US-CENTRAL1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == ["error: --region: 'US-CENTRAL1' is not a region name: lower case, no "
                                              "spaces, like us-central1 (did you mean us-central1?); valid choices: "
                                              "us-central1"]
    assert "did you mean us-central1" in str(submission_region("--region", "us-centrl1")[0])


def test_listed_regions_and_new_well_formed_ones_are_not_typos():
    for region in CAT.vertex_regions:  # me-west1 beside us-west1, europe-west12 beside europe-west1...
        assert region_problems("topology.region", region) == [], region
    assert region_verdict("mars-north9", CAT.known_regions).kind == "new"
    doc = config_lib.load("local", ["topology.region=mars-north9"]).to_dict()
    _, report = validate_document(doc, check_data=False)
    assert report.ok and any("region mars-north9 is not in the hardware catalog" in str(w) for w in report.warnings)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(sorted(load_catalog().vertex_regions)),
       st.sampled_from(["upper", "space", "tab", "underscore", "newline", "title"]))
def test_any_region_spelt_wrong_is_refused_and_the_region_suggested(region, how):
    spelt = {"upper": region.upper(), "space": region + " ", "tab": "\t" + region,
             "underscore": region.replace("-", "_"), "newline": region + "\n", "title": region.title()}[how]
    problems = region_problems("topology.region", spelt)
    assert len(problems) == 1 and region in problems[0].valid, (spelt, problems)


# ---- vtp hardware filters that match nothing -----------------------------------------------------------------------
@pytest.mark.parametrize("argv, says", [
    (["--family", "n1", "--accelerator", "TPU_V3"], "nothing matches --accelerator TPU_V3 --family n1: n1 machine types "
                                                    "take NVIDIA_TESLA_K80"),
    (["--region", "europe-west4", "--accelerator", "NVIDIA_TESLA_K80"],
     "the catalog says europe-west4 does not offer NVIDIA_TESLA_K80; regions that do: asia-east1"),
    (["--region", "europe-west4", "--family", "v5p"], "nothing matches --region europe-west4 --family v5p"),
    (["--family", "e2", "--accelerator", "NVIDIA_L4"], "NVIDIA_L4 comes with g2"),
])
def test_filters_that_match_nothing_say_so_with_what_there_is(capsys, argv, says):
    from pipelines.run import main

    assert main(["hardware", *argv]) == 0
    out = capsys.readouterr().out
    assert says in out, out
    assert "GPUs that attach to N1: \n" not in out + "\n"  # never an empty list


def test_a_filter_on_hardware_without_region_data_keeps_it(capsys):
    """B200 has no region data: us-central1 neither offers nor lacks it as far as the catalog knows."""
    from pipelines.run import main

    assert main(["hardware", "--region", "us-central1", "--family", "a4"]) == 0
    assert "a4-highgpu-8g" in capsys.readouterr().out


# ---- machines and what Vertex documents they do not take -------------------------------------------------------
@pytest.mark.parametrize("chief, disk, fragment", [
    ({"machine_type": "n1-standard-8"}, "hyperdisk-balanced", "n1-standard-8 takes no Hyperdisk"),
    ({"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 1},
     "hyperdisk-balanced", "takes no Hyperdisk"),
    ({"machine_type": "e2-standard-8"}, "hyperdisk-balanced", "e2-standard-8 takes no Hyperdisk"),
    ({"machine_type": "a2-highgpu-1g", "accelerator_type": "NVIDIA_TESLA_A100", "accelerator_count": 1},
     "hyperdisk-balanced", "a2-highgpu-1g takes no Hyperdisk"),
    ({"machine_type": "a3-ultragpu-8g", "accelerator_type": "NVIDIA_H200_141GB", "accelerator_count": 8},
     "pd-standard", "a3-ultragpu-8g boots from Hyperdisk only, not pd-standard"),
    ({"machine_type": "a4-highgpu-8g", "accelerator_type": "NVIDIA_B200", "accelerator_count": 8},
     "pd-ssd", "a4-highgpu-8g boots from Hyperdisk only, not pd-ssd"),
])
def test_a_boot_disk_the_machine_cannot_use_is_refused(chief, disk, fragment):
    errors = _errors(_one_device(**chief, disk_spec={"boot_disk_type": disk}))
    assert len(errors) == 1 and errors[0].startswith("topology.chief.disk_spec.boot_disk_type: ") and fragment in errors[0]
    assert "valid choices: " in errors[0]


@pytest.mark.parametrize("chief, disk", [
    ({"machine_type": "n1-standard-8"}, "pd-standard"),
    ({"machine_type": "a3-ultragpu-8g", "accelerator_type": "NVIDIA_H200_141GB", "accelerator_count": 8},
     "hyperdisk-balanced"),
    ({"machine_type": "n2-standard-8"}, "hyperdisk-balanced"),  # not in the data: Vertex decides
])
def test_a_boot_disk_the_machine_takes_passes(chief, disk):
    assert _errors(_one_device(**chief, disk_spec={"boot_disk_type": disk})) == []


def test_the_disk_and_placement_facts_are_data_with_their_sources():
    raw = CAT.raw
    for key in (raw["boot_disk"]["by_machine"]["source"], raw["spot"]["source"], raw["vpc_peering"]["source"]):
        assert CAT.sources[key]["url"].startswith("https://") and CAT.sources[key]["read"] == "2026-11-27"
    assert set(raw["vpc_peering"]["not_with_accelerators"]) <= set(CAT.gpus)


@pytest.mark.parametrize("doc, field", [
    ({**_one_device(machine_type="ct5lp-hightpu-4t", tpu_topology="4x4"), "scheduling": {"strategy": "SPOT"}},
     "scheduling.strategy"),
    ({**_one_device(machine_type="ct5lp-hightpu-4t", tpu_topology="8x16"), "placement": {"strategies": ["STANDARD", "SPOT"]}},
     "placement.strategies[1]"),
    ({**_one_device(machine_type="cloud-tpu", accelerator_type="TPU_V3_POD", accelerator_count=32),
      "scheduling": {"strategy": "SPOT"}}, "scheduling.strategy"),
])
def test_spot_with_a_tpu_pod_is_refused(doc, field):
    errors = _errors(doc)
    assert [e.split(":")[0] for e in errors] == [field], errors
    assert "Vertex runs no Spot VMs with TPU Pods" in errors[0] and "STANDARD" in errors[0]


def test_spot_with_one_tpu_host_passes():
    assert _errors({**_one_device(machine_type="ct5lp-hightpu-4t", tpu_topology="2x2"),
                    "scheduling": {"strategy": "SPOT"}}) == []


@pytest.mark.parametrize("machine, gpu, count", [("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8),
                                                 ("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8),
                                                 ("a4-highgpu-8g", "NVIDIA_B200", 8)])
def test_vpc_peering_with_accelerators_vertex_does_not_peer_is_refused(machine, gpu, count):
    doc = {**_one_device(machine_type=machine, accelerator_type=gpu, accelerator_count=count),
           "vertex": {"network": "projects/123456789012/global/networks/default"}}
    errors = _errors(doc)
    assert len(errors) == 1 and errors[0].startswith(f"vertex.network: Vertex training does not peer a VPC network with "
                                                     f"{gpu}") and "network_attachment" in errors[0]
    doc["vertex"] = {"psc_interface_config": {"network_attachment": "my-attachment"}}
    assert _errors(doc) == []  # the documented way in


# ---- serving.eval_data -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("instance, where", [
    ([0.1, float("nan")], "[1]"), ({"x": [1.0, float("inf")]}, ".x[1]"), (float("-inf"), "the instance"),
    ([[0.0], [float("nan")]], "[1][0]"),
])
def test_a_number_that_is_not_finite_inside_an_instance_is_refused_by_its_line(instance, where):
    lines = [json.dumps({"instance": instance, "label": 1.0}), json.dumps({"instance": instance, "label": 2.0})]
    examples, problems = examples_file.parse_lines(lines)
    assert examples == [] and len(problems) == 2
    assert problems[0].message.startswith(f"line 1: the instance holds a number that is not finite ({where})")


@pytest.mark.parametrize("task, labels, fragment", [
    ("regression", ["cat", "dog"], "regression needs numeric labels; line 1's label \"cat\" is a class"),
    ("regression", [True, False], "line 1's label true is a class"),
    ("classification", [0.5, 1.5], "classification needs class labels (strings, whole numbers, true/false); "
                                   "line 1's label 0.5 is not one"),
    ("classification", [[1.0, 2.0], [3.0, 4.0]], "line 1's label [1.0, 2.0] is not one"),
])
def test_labels_of_the_wrong_kind_for_eval_task_are_refused_before_anything_runs(tmp_path, task, labels, fragment):
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps({"instance": [1.0, 2.0], "label": v}) + "\n" for v in labels))
    problems = examples_file.eval_data_problems(str(path), task=task)
    assert len(problems) == 1 and problems[0].field == "serving.eval_task" and fragment in problems[0].message
    assert examples_file.eval_data_problems(str(path), task="auto") == []


@pytest.mark.parametrize("outputs, labels, fragment", [
    ({"scores": np.eye(3)[[0, 1, 2, 0]]}, [0, 1, 7, 0], "label(s) 7 are no class of the model's output scores: its 3 "
                                                        "scores per instance are classes 0..2"),
    ({"scores": np.eye(3)[[0, 1, 2, 0]]}, [0, -1, 2, 0], "label(s) -1 are no class"),
    ({"probabilities": np.eye(2)[[0, 1, 1]]}, ["cat", "dog", "bird"], "label(s) 'bird' name no class of the model"),
    ({"score": np.asarray([[0.1], [0.9], [0.7]])}, [0, 1, 2], "label(s) 2 are no class of a binary classifier"),
    # a class-name output: the model's metadata.json lists what it can answer (issue 56: was judged without a word)
    ({"class": np.asarray([[b"cat"], [b"dog"], [b"cat"]])}, ["cat", "dog", "bird"], "label(s) 'bird' name no class"),
])
def test_labels_that_are_no_class_of_the_model_stop_the_verdict(outputs, labels, fragment):
    classes = ["cat", "dog"] if isinstance(labels[0], str) else None
    with pytest.raises(examples_file.EvalError) as exc:
        judge(outputs, labels, task="classification", classes=classes)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_labels_the_model_has_are_judged():
    result = judge({"scores": np.eye(3)[[0, 1, 2, 0]]}, [0, 1, 2, 1], task="classification")
    assert result["accuracy"] == 0.75


# ---- a flag and the file -------------------------------------------------------------------------------------------
def test_a_flag_that_overrides_the_file_says_which_wins():
    from jobs.commands.flag_file import flag_file_warnings

    cfg = config_lib.from_dict({"topology": {"region": "us-central1"},
                                "vertex": {"service_account": "trainer@p.iam.gserviceaccount.com",
                                           "network": "projects/1/global/networks/a"},
                                "placement": {"regions": ["us-east4", "europe-west4"]}})
    lines = flag_file_warnings(cfg, "europe-west4", "other@p.iam.gserviceaccount.com", "projects/1/global/networks/b")
    assert lines == [
        "--region: europe-west4 wins over the job file's topology.region (us-central1): the job runs in europe-west4",
        "placement.regions: the job file's us-east4, europe-west4 win over --region europe-west4 for the training job "
        "(the pipeline job runs in europe-west4)",
        "--service-account: other@p.iam.gserviceaccount.com wins over the job file's vertex.service_account "
        "(trainer@p.iam.gserviceaccount.com)",
        "--network: projects/1/global/networks/b wins over the job file's vertex.network (projects/1/global/networks/a)"]
    same = config_lib.from_dict({"vertex": {"network": "projects/1/global/networks/a"}})
    assert flag_file_warnings(same, "us-central1", "", "projects/1/global/networks/a") == []  # nothing overridden


def test_the_network_flag_is_held_to_the_same_peering_rule():
    from jobs.commands.submit import preflight

    cfg = config_lib.from_dict({**_one_device(machine_type="a3-ultragpu-8g", accelerator_type="NVIDIA_H200_141GB",
                                              accelerator_count=8), "name": "h200-job"})
    errors, _, _ = preflight(cfg, "my-project-1", "us-central1", "gs://bucket/root",
                             network="projects/123456789012/global/networks/default")
    assert any(str(e).startswith("--network: Vertex training does not peer a VPC network with NVIDIA_H200_141GB")
               for e in errors), errors


# ---- tuning with nothing to search -----------------------------------------------------------------------------------
@pytest.mark.parametrize("section", [{"baseline": False}, {"baseline": False, "max_trials": 4},
                                     {"baseline": False, "parameters": {}}])
def test_a_tuning_section_with_nothing_to_search_is_refused(section):
    doc = config_lib.load("local").to_dict()
    errors = _errors({**doc, "tuning": section})
    assert [e.split(":")[0] for e in errors] == ["tuning.parameters"], errors
    assert "has no parameters to search" in errors[0]
    assert _errors({**doc, "tuning": {"baseline": True}}) == []  # the default, said out loud: no section at all


def test_the_catalogs_vertex_regions_are_the_installed_clients():
    """catalog.yaml regions.vertex is google-cloud-aiplatform's own list (read once here; importing the client takes
    seconds, so the rules read the copy)."""
    from google.cloud.aiplatform.constants import base

    assert sorted(CAT.vertex_regions) == sorted(r for r in base.SUPPORTED_REGIONS if r != "global")
