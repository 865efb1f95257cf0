"""notify: a run's end (its final state from the exit handler) in; one message to the job's webhook out, carrying
the cause, the model and its verdict, the cost and the links (``notify:``). Never fails the run."""
from kfp import dsl

from components.base import component


@component
def notify(config_json: str, status: dsl.PipelineTaskFinalStatus, run_id: str = "", run_created: str = "",
           on_vertex: bool = False, folder_per_run: bool = False, pipeline_job_name: str = "", api_endpoint: str = ""):
    """The pipeline's exit handler (``dsl.ExitHandler``): runs after every other task, whatever step failed, and
    sends the run's end where the job's ``notify:`` section says, when ``notify.on`` names that end (succeeded,
    failed, cancelled): the webhook (its URL read from ``notify.webhook.url_env`` here, or the Secret Manager
    version ``notify.webhook.url_secret``; never printed). The message: the job, its
    final state (``status``, given by the pipeline runner), the cause that the failed step recorded for this run
    (``run_id``: the pipeline run's id, ``dsl.PIPELINE_JOB_ID_PLACEHOLDER``; or, for a step that records no id, written
    after ``run_created``, ``dsl.PIPELINE_JOB_CREATE_TIME_UTC_PLACEHOLDER``) and the failing replica's last lines,
    the model and its verdict, the cost, the console and report links. ``on_vertex``: the run is on Vertex AI
    Pipelines (the console link). ``folder_per_run`` and ``pipeline_job_name``: as ``validate_config``'s (a scheduled
    run's own folder). ``api_endpoint``: Secret Manager's (a loopback stand-in in tests; empty: Google's).

    A notification that cannot be sent (no variable, an unreadable secret, a webhook that refuses, hangs or
    redirects elsewhere) is one ``warning:`` line; this step always ends 0, so the run's outcome is its own."""
    arguments = dict(locals())  # the inputs and outputs, as kfp's executor passed them
    # lazy: KFP component body
    from components.entry import v1

    return v1("notify", arguments)
