"""The decisions behind a training pipeline, taken before any DSL wiring (``pipelines/training_pipeline.py``
wires what :func:`plan` decides): which target, the config as that target runs it, the components' image,
whether there is a prepare step, a gate, a tuning study and its baseline, the sample request that travels
as a parameter, the placement judgement the training step ranks (``jobs.rules.ranking``: the plan's, or one made
here without the project), and who is told of the run's end (``notify:``: a webhook here and on Vertex, e-mail on
Vertex).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from jobs.rules import ranking
from jobs.run_records import records
from jobs.rules.hardware import prices
from jobs.rules.job_image import component_image
from jobfile import config as config_lib
from jobfile.regular_file import open_regular

TARGETS = ("vertex", "local")


@dataclass(frozen=True)
class PipelinePlan:
    """What the pipeline of one job for one target holds."""

    target: str
    cfg: config_lib.JobConfig  # as the target runs it: for Vertex, ``JobConfig.for_vertex``
    image: str  # the components' image (``jobs.rules.job_image.component_image``); empty: the published default
    with_data: bool  # a prepare step (not when the trainer reads its own data: ``data.source: none``)
    sample_request: str  # ``serving.sample_request``'s content, one line of JSON (empty: none)
    gated: bool  # the job sets bars: a gate step before the upload
    tuned: bool  # a ``tuning:`` section: a study instead of one training
    baseline: bool  # the study has the job as it stands beside it (``tuning.baseline``)
    description: str
    notified: bool = False  # ``notify.webhook``: the run's end is sent by the exit handler (``components/notify``)
    emailed: tuple[str, ...] = ()  # ``notify.email``, on Vertex: Vertex's e-mail as the exit handler of the body
    #: the ``placement_plan`` parameter's default: the judgement of the job's options (``jobs.rules.ranking.to_doc``)
    placement: dict = None


def sample_request_json(cfg: config_lib.JobConfig) -> str:
    """``serving.sample_request``'s content, as one line of JSON: it travels in the pipeline (a Vertex task
    cannot read the submitter's files; kfp writes parameter defaults into a one-line YAML comment)."""
    if not cfg.serving.sample_request:
        return ""
    with open_regular(cfg.serving.sample_request, "serving.sample_request") as f:  # checked by validation first
        return json.dumps(json.load(f), separators=(",", ":"))


def plan(cfg: config_lib.JobConfig, target: str, placement: dict | None = None) -> PipelinePlan:
    """The plan of ``cfg``'s pipeline for ``target`` (``vertex`` | ``local``; any other is a ValueError). For
    Vertex the config is ``JobConfig.for_vertex`` (a user trainer's code is the image's WORKDIR), taken after
    the sample request was read: its content travels, not its path; so does the placement judgement
    (``placement``: ``vtp plan``'s; None: made here with the price table and ``budget.prices``, the quota not
    checked), taken before ``budget.prices`` is dropped."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    image = component_image(cfg)  # components run the cpu image (or container.image_uri)
    with_data = cfg.data.source != "none"
    request = sample_request_json(cfg)
    if target == "vertex":
        if placement is None:
            placement = ranking.offline_doc(cfg, table=prices.price_table(cfg.budget.prices))
        cfg = cfg.for_vertex()
    where = "on Vertex AI" if target == "vertex" else "on this machine"
    return PipelinePlan(
        target=target, cfg=cfg, image=image, with_data=with_data, sample_request=request,
        gated=records.is_gated(cfg), tuned=cfg.tuning.enabled, baseline=bool(cfg.tuning.baseline),
        notified=bool(cfg.notify.webhook.url_env or cfg.notify.webhook.url_secret),
        emailed=tuple(cfg.notify.email) if target == "vertex" else (),
        description=(f"Train {cfg.trainer.module or cfg.model.name} with {cfg.topology.strategy} {where} from "
                     "source to a verified, registered SavedModel."), placement=placement or {})
