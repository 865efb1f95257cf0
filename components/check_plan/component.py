"""check_plan: the validated job in; the plan's checks (quota, budget, the project's set-up) made again inside the
pipeline before anything is created, the step failing with the reasons when they fail."""
from components.base import component


@component
def check_plan(config_json: str, location: str, project: str, run_id: str = "", require_checks: bool = False,
               api_endpoint: str = ""):
    """The checks ``vtp plan`` makes (every ``placement`` option against the hardware
    catalog, the project's Vertex AI quota, the budget; the bucket, the APIs, the image, the service account), made
    when the run starts: a run started by a schedule, from the console or from a template long after it was planned
    is checked as it starts, not as it was when someone looked. Runs as the pipeline's service account in
    ``project``/``location``. When a check fails (no option fits, over budget, a check failed, or, with
    ``require_checks``, could not be made) the step prints one ``error:`` line each, records why for this run
    (``run_id``; the end message reads it) and fails: the training step after it never runs, no job is created.
    ``api_endpoint``: the project's APIs' (a loopback stand-in in tests; empty: Google's)."""
    arguments = dict(locals())  # the inputs and outputs, as kfp's executor passed them
    # lazy: KFP component body
    from components.entry import v1

    return v1("check_plan", arguments)
