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
    arguments = dict(locals())  # the inputs and outputs, as kfp's executor passed them
    # lazy: KFP component body
    from components.entry import v1

    return v1("report", arguments)
