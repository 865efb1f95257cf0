"""custom_training_job: the Vertex job spec (validate_config's outputs) in; one Vertex AI CustomJob with the
worker pools by position, created, followed and cancelled with the pipeline; gcp_resources out."""
from kfp import dsl

from components.base import DEFAULT_IMAGE


@dsl.container_component
def custom_training_job(display_name: str, worker_pool_specs: list, base_output_directory: str, tensorboard: str,
                        restart_job_on_worker_restart: bool, scheduling_strategy: str, timeout: str,
                        service_account: str, network: str, location: str, project: str,
                        gcp_resources: dsl.OutputPath(str), api_endpoint: str = "", max_wait_duration: str = "",
                        persistent_resource_id: str = "", disable_retries: bool = False, enable_web_access: bool = False,
                        enable_dashboard_access: bool = False, reserved_ip_ranges: list = [],
                        psc_network_attachment: str = "", placement: list = [], logging_endpoint: str = "",
                        budget: dict = {}, labels: dict = {}, hardware: list = []):
    """Run the job's worker pools as one Vertex AI CustomJob: chief 0, workers 1, parameter servers 2,
    evaluator 3, an empty pool kept empty where Vertex needs the position (an evaluator without parameter
    servers), every replica in its pool's ``container_spec``; ``base_output_directory`` gives the replicas
    ``AIP_MODEL_DIR``/``AIP_CHECKPOINT_DIR``/``AIP_TENSORBOARD_LOG_DIR``; ``max_wait_duration`` (``FLEX_START``),
    ``persistent_resource_id``, ``disable_retries``, ``enable_web_access`` (a shell into each running replica),
    ``enable_dashboard_access``, ``reserved_ip_ranges`` and ``psc_network_attachment`` (``psc_interface_config``) go
    to the spec as the API names them; each pool's ``disk_spec`` and ``nfs_mounts`` travel in
    ``worker_pool_specs``. The spec is assembled by the
    project's one builder of the Vertex job spec from these inputs, which ``validate_config`` outputs. Follows it to its end under the
    project's client policy and cancels it when the pipeline is cancelled (SIGTERM); a retried task follows
    the job it already created. A failed job shows each failed replica's last lines from Cloud Logging
    (``logging_endpoint``: empty, Google's) and one hint line. ``placement`` and ``budget`` (validate_config's: the
    plan's judgement of the job's regions and scheduling strategies, each with its price, and the budget's bars): the
    job is created in the option THE placement procedure (the one ``vtp plan`` ranks with) ranks first; when Vertex ends it for
    capacity, that option is blocked and the job is created again under the procedure's next answer with the same
    ``base_output_directory`` (the trainer resumes from its checkpoint), within ``timeout`` in all: never in an option
    the plan refused, never over the budget at that option's price, one line for each option passed over; never for
    the user's code, a bad request or quota. ``hardware`` (validate_config's): the worker pools of every rung of the
    job's hardware ladder (``placement.hardware``), THE spec of the job on that rung: an option on a later rung is
    created with its pools, in the same output directory (the trainer resumes with the global batch kept); empty
    without a ladder. ``labels``: the run's labels (run, trial, config hash). Output ``gcp_resources`` (GCPC's
    format: the console links the job; it names the job that ran last).

    Why not GCPC's ``CustomTrainingJobOp``: its launcher removes empty entries recursively before the create
    call, so an evaluator without parameter servers would land at index 2 and run as a parameter server
    (pool 2 is the parameter servers' position). A container component, not a lightweight one: Python must be the
    container's own process to receive the SIGTERM of a cancelled pipeline (a lightweight component runs
    under ``sh -ec``, which does not pass it on)."""
    return dsl.ContainerSpec(image=DEFAULT_IMAGE, command=["python3", "-u", "-m", "components.entry", "custom_training_job"], args=[
        "--display_name", display_name, "--worker_pool_specs", worker_pool_specs,
        "--base_output_directory", base_output_directory, "--tensorboard", tensorboard,
        "--restart_job_on_worker_restart", restart_job_on_worker_restart,
        "--scheduling_strategy", scheduling_strategy, "--timeout", timeout, "--service_account", service_account,
        "--network", network, "--location", location, "--project", project, "--gcp_resources", gcp_resources,
        "--api_endpoint", api_endpoint, "--max_wait_duration", max_wait_duration,
        "--persistent_resource_id", persistent_resource_id, "--disable_retries", disable_retries,
        "--enable_web_access", enable_web_access, "--enable_dashboard_access", enable_dashboard_access,
        "--reserved_ip_ranges", reserved_ip_ranges, "--psc_network_attachment", psc_network_attachment,
        "--placement", placement, "--logging_endpoint", logging_endpoint, "--budget", budget, "--labels", labels,
        "--hardware", hardware])
