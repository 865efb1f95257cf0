"""Import AI Platform Training configs (``trainingInput`` YAML and gcloud flags) into this project.

``translate(training_input)`` gives the project's job config dict and every problem, legacy-specific
ones (cloud_tpu with workerCount != 1, missing tpuTfVersion for a custom container on a TPU, unknown
keys...) plus ``check_job``'s on the result, all with legacy field paths
(``trainingInput.workerConfig.acceleratorConfig.count``) or the gcloud flag that set the value
(``--worker-accelerator``).

Choices (documented here because Vertex has no exact equivalent):
- legacy machine types become today's machine + accelerator (catalog ``legacy_machine_types``);
- a ``cloud_tpu`` worker becomes the chief pool ``{"machine_type": "cloud-tpu", "accelerator_type":
  "TPU_V2", "accelerator_count": 8}`` (TPU_V2 x 8 unless workerConfig.acceleratorConfig says
  otherwise): on Vertex the trainer runs on the TPU VM itself, so the master VM is dropped (warning);
- BASIC_GPU -> one n1-standard-8 + 1 NVIDIA_TESLA_K80; BASIC_TPU -> cloud-tpu TPU_V2 x 8;
- strategy: TPU -> tpu; parameter servers (``parameterServerType/Count``) -> parameter_server (TF2's
  ParameterServerStrategy: the master becomes the coordinating chief, which computes nothing, so GPUs on it
  are a warning); more than one machine (master + workers) -> multi_worker; one machine with more than one
  GPU -> mirrored; else one_device;
- tpu_tf_version = workerConfig.tpuTfVersion, or runtimeVersion for a TPU job without custom container;
- container.image_uri = masterConfig.imageUri (for a TPU: workerConfig.imageUri, else the master's);
  pythonModule -> command ``python -m MODULE``; a custom container without command uses its entrypoint;
- jobDir -> output.base_dir (not appended to the args); region missing -> us-central1 (warning).
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any, Mapping, Sequence

from jobfile.errors import ConfigError, Problem, problem
from jobs.rules.hardware.catalog import load_catalog
from jobs.rules.aiplatform.gcloud_flags import merge, parse_flags
from jobs.rules.job_spec import as_int, worker_pool_specs
from jobs.rules.hardware.rules import Report, check_job, check_tpu_version
from jobs.rules.hardware.shared import infer_strategy, one_line


def as_str(value: Any) -> str | None:
    """A text field of an AI Platform config: stripped; a number YAML read (``2.11``) as its text; None if neither."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return getattr(value, "text", None) or str(value)
    return None

TI = "trainingInput"
KNOWN_KEYS = ("scaleTier", "masterType", "masterConfig", "workerType", "workerCount", "workerConfig",
              "parameterServerType", "parameterServerCount", "parameterServerConfig", "evaluatorType",
              "evaluatorCount", "evaluatorConfig", "region", "runtimeVersion", "pythonVersion", "args",
              "jobDir", "packageUris", "pythonModule", "hyperparameters", "scheduling", "useChiefInTfConfig",
              "serviceAccount", "network", "encryptionConfig", "enableWebAccess")
REPLICA_KEYS = ("acceleratorConfig", "imageUri", "tpuTfVersion", "containerCommand", "containerArgs", "diskConfig")
ACCELERATOR_KEYS = ("count", "type")
SCHEDULING_KEYS = ("maxRunningTime", "maxWaitTime", "priority")
# project pool -> (type key, count key, config key)
ROLES = {"chief": ("masterType", None, "masterConfig"),
         "worker": ("workerType", "workerCount", "workerConfig"),
         "parameter_server": ("parameterServerType", "parameterServerCount", "parameterServerConfig"),
         "evaluator": ("evaluatorType", "evaluatorCount", "evaluatorConfig")}
DEFAULT_COMMAND = ["python", "-m", "trainers.task"]


def training_input_of(doc: Any) -> Mapping[str, Any] | None:
    """The ``trainingInput`` of a config.yaml or of a job resource (also one level down)."""
    if not isinstance(doc, Mapping):
        return None
    if TI in doc:
        return doc[TI] if isinstance(doc[TI], Mapping) else {}
    for value in doc.values():
        if isinstance(value, Mapping) and TI in value:
            return value[TI] if isinstance(value[TI], Mapping) else {}
    return None


def is_legacy(doc: Any) -> bool:
    """True for an AI Platform config.yaml / job resource (has ``trainingInput``)."""
    return training_input_of(doc) is not None


@dataclasses.dataclass
class LegacyImport:
    job: dict[str, Any]
    report: Report
    pools: list[dict[str, Any]]
    user_args: list[str]


class _Translation:
    def __init__(self, ti: Mapping[str, Any], sources: Mapping[str, str]):
        self.ti, self.sources, self.cat = ti, dict(sources), load_catalog()
        self.errors: list[Problem] = []
        self.warnings: list[Problem] = []
        self.paths: dict[str, str] = {}  # project field -> legacy field
        for name, (type_key, count_key, config_key) in ROLES.items():
            accel = f"{TI}.{config_key}.acceleratorConfig"
            self.paths.update({f"topology.{name}.machine_type": f"{TI}.{type_key}",
                               f"topology.{name}.replica_count": f"{TI}.{count_key or type_key}",
                               f"topology.{name}.tpu_topology": f"{TI}.{type_key}",
                               f"topology.{name}.accelerator_type": f"{accel}.type",
                               f"topology.{name}.accelerator_count": f"{accel}.count"})
        topology = {"strategy": "one_device", "region": "us-central1", "tpu_tf_version": ""}
        for name in ROLES:
            topology[name] = {"replica_count": 0, "machine_type": "", "accelerator_type": "",
                              "accelerator_count": 0, "tpu_topology": ""}
        self.job: dict[str, Any] = {
            "name": "legacy-import",
            "training": {"epochs": 2, "steps": 0, "per_replica_batch_size": 8, "global_batch_size": 0,
                         "optimizer": "adam", "learning_rate": 0.001, "seed": 42, "deterministic": True,
                         "mixed_precision": False},
            "checkpoint": {"every_steps": 20, "every_seconds": 0, "keep": 3},
            "topology": topology,
            "container": {"image_uri": "", "command": list(DEFAULT_COMMAND), "args": []},
            "output": {"base_dir": "./runs/local"},
            "scheduling": {"strategy": "STANDARD", "restart_job_on_worker_restart": False,
                           "timeout": "86400s", "max_restarts": 0},
        }

    # ---- helpers -------------------------------------------------------------------------------
    def field(self, legacy_path: str) -> str:
        for path, flag in sorted(self.sources.items(), key=lambda kv: -len(kv[0])):
            if legacy_path == path or legacy_path.startswith(path + "."):
                return flag
        return legacy_path

    def error(self, path: str, message: str, valid: Sequence[object] = ()) -> None:
        """One problem per field: the first found is the actionable one."""
        field = self.field(path)
        if all(p.field != field for p in self.errors):
            self.errors.append(problem(field, message, valid))

    def warn(self, path: str, message: str, valid: Sequence[object] = ()) -> None:
        self.warnings.append(problem(self.field(path), message, valid))

    def section(self, value: Any, path: str, known: Sequence[str]) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.error(path, f"must be a mapping, not {value!r:.40}")
            return {}
        for key in value:
            if path == TI and key in REPLICA_KEYS:
                self.error(f"{path}.{key}", f"{key} belongs in a replica config, not directly in trainingInput",
                           [f"workerConfig.{key}", f"masterConfig.{key}"])
            elif key not in known:
                close = difflib.get_close_matches(str(key), known, n=3, cutoff=0.6)
                self.error(f"{path}.{key}", "unknown key", close or known)
        return value

    def text(self, mapping: Mapping[str, Any], key: str, path: str) -> str:
        value = as_str(mapping.get(key))
        if value is None:
            self.error(f"{path}.{key}", f"must be a string, not {mapping.get(key)!r:.40}")
            return ""
        return value

    def count(self, value: Any, path: str, default: int) -> int:
        if value is None:
            return default
        number = as_int(value)
        if number is None or number < 0:
            self.error(path, f"must be a whole number >= 0, not {value!r:.40}")
            return default
        return number

    # ---- translation ---------------------------------------------------------------------------
    def run(self) -> None:
        ti = self.section(self.ti, TI, KNOWN_KEYS)
        tier = self.text(ti, "scaleTier", TI).upper() or ("CUSTOM" if ti.get("masterType") else "BASIC")
        if tier not in self.cat.scale_tiers:
            self.error(f"{TI}.scaleTier", f"unknown scale tier {tier!r}", list(self.cat.scale_tiers))
            tier = "CUSTOM" if ti.get("masterType") else "BASIC"
        roles = self.roles(ti, tier)
        tpu_role = roles["worker"][0] == "cloud_tpu"
        for name, (mtype, count, config, tpath, cpath, kpath) in roles.items():
            if tpu_role and name == "worker":
                self.tpu(mtype, count, config, tpath, cpath, kpath, roles["chief"])
            elif not (tpu_role and name == "chief"):
                self.pool(name, mtype, count, config, tpath, cpath, kpath)
        topology = self.job["topology"]
        region = self.text(ti, "region", TI)
        if region:
            topology["region"] = region
        else:
            self.warn(f"{TI}.region", "no region given (gcloud requires --region); assuming us-central1",
                      ["us-central1"])
        self.paths["topology.region"] = f"{TI}.region"
        self.paths["topology.strategy"] = f"{TI}.scaleTier"
        self.container(ti, roles, tpu_role)
        if ti.get("jobDir"):
            self.job["output"]["base_dir"] = self.text(ti, "jobDir", TI)
        scheduling = self.section(ti.get("scheduling"), f"{TI}.scheduling", SCHEDULING_KEYS)
        if scheduling.get("maxRunningTime"):
            self.job["scheduling"]["timeout"] = str(scheduling["maxRunningTime"])
        topology["strategy"] = infer_strategy(self.job)

    def roles(self, ti: Mapping[str, Any], tier: str) -> dict[str, tuple]:
        out: dict[str, tuple] = {}
        spec = self.cat.scale_tiers[tier]
        for name, (type_key, count_key, config_key) in ROLES.items():
            kpath = f"{TI}.{config_key}"
            config = self.section(ti.get(config_key), kpath, REPLICA_KEYS)
            if tier != "CUSTOM":
                for key in (type_key, count_key):
                    if key and ti.get(key) not in (None, "", 0):
                        self.error(f"{TI}.{key}", f"is only used with scaleTier CUSTOM, not {tier}", ["CUSTOM"])
                if config.get("acceleratorConfig"):
                    self.error(f"{kpath}.acceleratorConfig", f"needs scaleTier CUSTOM, not {tier}", ["CUSTOM"])
                    config = {k: v for k, v in config.items() if k != "acceleratorConfig"}
                given = {"chief": [1, spec.get("master")], "worker": spec.get("workers"),
                         "parameter_server": spec.get("parameter_servers")}.get(name) or [0, ""]
                path = f"{TI}.scaleTier"
                out[name] = (given[1], given[0], config, path, path, kpath)
                continue
            tpath, cpath = f"{TI}.{type_key}", f"{TI}.{count_key or type_key}"
            mtype = self.text(ti, type_key, TI)
            count = 1 if name == "chief" else self.count(ti.get(count_key), cpath, -1)
            if name == "chief" and not mtype:
                self.error(tpath, "scaleTier CUSTOM needs a masterType", ["n1-standard-4", "n1-highcpu-16"])
            elif count == -1 and mtype:
                self.error(cpath, f"{type_key} is {mtype} but {count_key} is not set", [1])
            elif count > 0 and not mtype:
                self.error(tpath, f"{count_key} is {count} but no {type_key} is set", ["n1-standard-4"])
            out[name] = (mtype, max(count, 0), config, tpath, cpath, kpath)
        return out

    def accelerator(self, config: Mapping[str, Any], kpath: str) -> tuple[str, int, bool]:
        accel = self.section(config.get("acceleratorConfig"), f"{kpath}.acceleratorConfig", ACCELERATOR_KEYS)
        if not accel:
            return "", 0, False
        apath = f"{kpath}.acceleratorConfig"
        atype = self.text(accel, "type", apath).upper()
        count = self.count(accel.get("count"), f"{apath}.count", 1)
        if not atype:
            self.error(f"{apath}.type", "acceleratorConfig needs a type", ["NVIDIA_TESLA_T4", "TPU_V2"])
        return atype, count, True

    def pool(self, name: str, mtype: str, count: int, config: Mapping[str, Any], tpath: str, cpath: str,
             kpath: str) -> None:
        if count <= 0 or not mtype:
            return
        target = self.job["topology"][name]
        prefix = f"topology.{name}"
        atype, acount, has_accel = self.accelerator(config, kpath)
        legacy = self.cat.legacy_machines.get(mtype)
        if legacy and legacy.tpu:
            self.error(tpath, f"{mtype} is only valid as workerType", [m for m in self.cat.legacy_machines
                                                                      if not self.cat.legacy_machines[m].tpu][:5])
            return
        if self.cat.is_tpu(atype):
            self.error(f"{kpath}.acceleratorConfig.type", "TPUs attach to the cloud_tpu worker: set workerType "
                                                          "cloud_tpu and put this in workerConfig.acceleratorConfig")
            atype, acount = "", 0
        machine = mtype
        self.paths.update({f"{prefix}.machine_type": tpath, f"{prefix}.replica_count": cpath,
                           f"{prefix}.tpu_topology": tpath, f"{prefix}.accelerator_type": f"{kpath}.acceleratorConfig.type",
                           f"{prefix}.accelerator_count": f"{kpath}.acceleratorConfig.count"})
        if legacy:
            machine = legacy.machine_type
            if legacy.accelerator_type and has_accel:
                self.error(f"{kpath}.acceleratorConfig", f"{mtype} has {legacy.accelerator_count} "
                           f"{legacy.accelerator_type} built in; remove acceleratorConfig or use a Compute "
                           f"Engine machine type such as {legacy.machine_type}", [legacy.machine_type])
            if legacy.accelerator_type:
                atype, acount = legacy.accelerator_type, legacy.accelerator_count
                self.paths[f"{prefix}.accelerator_type"] = self.paths[f"{prefix}.accelerator_count"] = tpath
        elif mtype not in self.cat.machines:
            known = list(self.cat.legacy_machines) + list(self.cat.machines)
            self.error(tpath, f"unknown machine type {mtype!r}", self.cat.suggest(mtype, known) or ["n1-standard-4"])
        target.update(replica_count=count, machine_type=machine, accelerator_type=atype, accelerator_count=acount)

    def tpu(self, mtype, count, config, tpath, cpath, kpath, master) -> None:
        chief = self.job["topology"]["chief"]
        atype, acount, has_accel = self.accelerator(config, kpath)
        apath = f"{kpath}.acceleratorConfig"
        if not has_accel:
            atype, acount = "TPU_V2", 8
            self.paths.update({"topology.chief.accelerator_type": tpath, "topology.chief.accelerator_count": tpath})
        else:
            self.paths.update({"topology.chief.accelerator_type": f"{apath}.type",
                               "topology.chief.accelerator_count": f"{apath}.count"})
            if atype and atype not in self.cat.tpu_cores:
                self.error(f"{apath}.type", f"a cloud_tpu worker takes a TPU, not {atype}", list(self.cat.tpu_cores))
        if count != 1:
            self.error(cpath, f"cloud_tpu takes workerCount 1, not {count}", [1])
        self.paths.update({"topology.chief.machine_type": tpath, "topology.chief.replica_count": cpath,
                           "topology.chief.tpu_topology": tpath})
        chief.update(replica_count=1, machine_type="cloud-tpu", accelerator_type=atype, accelerator_count=acount)
        master_type, _, master_config, master_path, _, master_kpath = master
        master_accel = self.accelerator(master_config, master_kpath)
        if master_accel[2]:
            self.error(f"{master_kpath}.acceleratorConfig", "with a cloud_tpu worker the master takes no accelerator; "
                       "TPUs go in workerConfig.acceleratorConfig")
        legacy_master = self.cat.legacy_machines.get(master_type)
        if legacy_master and atype in self.cat.tpu_cores and atype not in self.cat.legacy_master_tpu_types:
            self.error(master_path, f"a legacy master type ({master_type}) pairs only with "
                                    f"{_join(self.cat.legacy_master_tpu_types)}; for {atype} use a Compute Engine "
                                    "machine type", ["n1-highcpu-16"])
        if master_type and master_path.endswith(".masterType"):
            self.warn(master_path, f"on Vertex the trainer runs on the TPU VM itself: the master "
                                   f"{master_type} is not needed and is dropped")

    def container(self, ti: Mapping[str, Any], roles: Mapping[str, tuple], tpu_role: bool) -> None:
        container, topology = self.job["container"], self.job["topology"]
        master_cfg, worker_cfg = roles["chief"][2], roles["worker"][2]
        master_image = self.text(master_cfg, "imageUri", f"{TI}.masterConfig")
        worker_image = self.text(worker_cfg, "imageUri", f"{TI}.workerConfig")
        image = (worker_image or master_image) if tpu_role else master_image
        container["image_uri"] = image
        if worker_image and master_image and worker_image != master_image and not tpu_role:
            self.warn(f"{TI}.workerConfig.imageUri", "this project runs one image in every pool: the workers "
                      f"will run masterConfig.imageUri {master_image}", [master_image])
        module = self.text(ti, "pythonModule", TI)
        if module:
            container["command"] = ["python", "-m", module]
        elif image:
            command = master_cfg.get("containerCommand") or []
            container["command"] = [str(c) for c in command] if isinstance(command, list) else []
        args = ti.get("args") or master_cfg.get("containerArgs") or []
        container["args"] = [str(a) for a in args] if isinstance(args, list) else [str(args)]
        if not tpu_role:
            return
        version = self.text(worker_cfg, "tpuTfVersion", f"{TI}.workerConfig")
        self.paths["topology.tpu_tf_version"] = f"{TI}.workerConfig.tpuTfVersion"
        runtime = self.text(ti, "runtimeVersion", TI)
        if not version and runtime and not image:
            version = runtime
            self.paths["topology.tpu_tf_version"] = f"{TI}.runtimeVersion"
        elif not version and not image:
            self.warn(f"{TI}.runtimeVersion", "no runtime version: pass --runtime-version with a version "
                                              "available for TPUs", self.cat.runtime_versions)
        topology["tpu_tf_version"] = version

    def finish(self) -> Report:
        legacy_fields = {p.field for p in self.errors}
        found = check_job(self.job)
        errors = found.errors + check_tpu_version(self.job, require_for_custom_container=True)
        mapped = [self.remap(p) for p in errors]
        errors = self.errors + [p for p in mapped if p.field not in legacy_fields]
        warnings = self.warnings + [self.remap(p) for p in found.warnings]
        return Report(list(dict.fromkeys(map(one_line, errors))), list(dict.fromkeys(map(one_line, warnings))))

    def remap(self, p: Problem) -> Problem:
        legacy = self.paths.get(p.field)
        if legacy is None:
            prefix = p.field.rsplit(".", 1)[0]
            legacy = self.paths.get(f"{prefix}.machine_type", TI) if p.field.startswith("topology.") else TI
        return dataclasses.replace(p, field=self.field(legacy))


def _join(items: Sequence[str]) -> str:
    return ", ".join(items)


def translate_report(training_input: Any, sources: Mapping[str, str] | None = None) -> tuple[dict[str, Any], Report]:
    """Like :func:`translate`, with warnings; ``sources`` maps trainingInput paths to the flags that set them."""
    t = _Translation(training_input if isinstance(training_input, Mapping) else {}, sources or {})
    if not isinstance(training_input, Mapping):
        t.error(TI, f"must be a mapping, not {type(training_input).__name__}")
    t.run()
    return t.job, t.finish()


def translate(training_input: Any, sources: Mapping[str, str] | None = None) -> tuple[dict[str, Any], list[Problem]]:
    """(the project's job config dict, every error): legacy checks + check_job on the result."""
    job, report = translate_report(training_input, sources)
    return job, report.errors


def to_worker_pool_specs(job: Mapping[str, Any], image_uri: str) -> list[dict[str, Any]]:
    """Vertex worker pools of a translated (or any project) job config, running ``image_uri``."""
    container = job.get("container") if isinstance(job.get("container"), Mapping) else {}
    return worker_pool_specs(job, image_uri, container.get("command") or (), container.get("args") or ())


def import_legacy(doc: Any = None, argv: Sequence[str] = ()) -> LegacyImport:
    """Config file document and/or gcloud flags -> job, report (errors + warnings), worker pools."""
    try:
        parsed = parse_flags(argv)
    except ConfigError as exc:
        return LegacyImport({}, Report(errors=exc.problems), [], [])
    base = training_input_of(doc) if doc is not None else {}
    if doc is not None and base is None:
        return LegacyImport({}, Report(errors=[problem(TI, "the document has no trainingInput")]), [], [])
    ti = merge(base, parsed.overrides)
    job, report = translate_report(ti, parsed.sources)
    if isinstance(doc, Mapping) and isinstance(doc.get("jobId"), str):
        job["name"] = re.sub(r"[^a-z0-9-]+", "-", doc["jobId"].lower()).strip("-")[:128] or job["name"]
    if parsed.user_args:
        job["container"]["args"] = list(parsed.user_args)
    pools = to_worker_pool_specs(job, job["container"]["image_uri"]) if report.ok else []
    return LegacyImport(job, report, pools, list(parsed.user_args))


__all__ = ["LegacyImport", "import_legacy", "is_legacy", "to_worker_pool_specs", "training_input_of", "translate", "translate_report"]
