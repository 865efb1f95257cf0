"""report: what a run left (TensorBoard scalars, the verification record, checkpoints) in; an HTML page, a
Markdown summary and, for a classifier, ClassificationMetrics out."""
from kfp.dsl import HTML, Artifact, ClassificationMetrics, Input, Markdown, Output

from components.base import component


@component
def report(report: Output[HTML], summary: Output[Markdown], confusion: Output[ClassificationMetrics],
           verification: Input[Artifact] = None, tensorboard: Input[Artifact] = None,
           checkpoints: Input[Artifact] = None, config_json: str = "", record_dir: str = "",
           study: Input[Artifact] = None):
    """The run report: every scalar under ``tensorboard`` (a TensorBoard logs folder: each series plotted and
    named), the verification record (``verify_model``'s ``verification``: signature, inputs/outputs, latency,
    predictions; a classifier's accuracy, confusion matrix and sample images), the ``checkpoints`` kept, and
    the job (from ``config_json``, and ``record_dir``'s ``training.json`` when the run is this project's), a
    hyperparameter study (``study``: ``tune``'s or ``hyperparameter_tuning_job``'s record: every trial, the best
    one marked) and the gate's verdict (``<record_dir>/gate.json``).
    Every input is optional; what is missing is said, never an error.

    Outputs: ``report`` (one self-contained HTML page: the Vertex Pipelines UI shows it), ``summary``
    (Markdown), ``confusion`` (ClassificationMetrics, drawn by the UI; only for a classifier). With
    ``record_dir`` the page is also written to ``<record_dir>/report.html``."""
    # lazy: KFP component body
    from jobs.steps import calls as steps

    content, written = steps.report(config_json, verification.path if verification is not None else "",
                                     tensorboard.uri if tensorboard is not None else "",
                                     checkpoints.uri if checkpoints is not None else "", record_dir,
                                     study_file=study.path if study is not None else "")
    with open(report.path, "w", encoding="utf-8") as f:
        f.write(content["html"])
    with open(summary.path, "w", encoding="utf-8") as f:
        f.write(content["markdown"])
    if content["classes"]:
        confusion.log_confusion_matrix(content["classes"], content["confusion_matrix"])
    print(f"wrote the run report{' ' + written if written else ''}")
    # lazy: KFP component body
    from jobs.steps.step_exit import end_without_teardown

    end_without_teardown()  # no finalization of the step's modules once the outputs are written
