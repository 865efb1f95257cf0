"""report's work, behind ``components.entry`` (its inputs and outputs: ``component.py``): the page made by
``jobs.steps.calls.report`` (``jobs.steps.reporting``); the process ends once its outputs are written
(``jobs.steps.step_exit``)."""
from __future__ import annotations

from kfp.dsl import HTML, Artifact, ClassificationMetrics, Input, Markdown, Output

from jobs.steps import calls as steps
from jobs.steps.step_exit import end_without_teardown


def report(report: Output[HTML], summary: Output[Markdown], confusion: Output[ClassificationMetrics],
           verification: Input[Artifact] = None, tensorboard: Input[Artifact] = None,
           checkpoints: Input[Artifact] = None, config_json: str = "", record_dir: str = "",
           study: Input[Artifact] = None):
    """Fills ``report``, ``summary`` and, for a classifier, ``confusion``."""
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
    end_without_teardown(report.path, summary.path)  # no finalization of the step's modules once written
