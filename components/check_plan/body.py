"""check_plan's work, behind ``components.entry`` (its inputs: ``component.py``): the checks ``vtp plan`` makes
(``jobs.cloud.planning.decide``, through ``jobs.steps.calls.check_plan``), made again as the run starts."""
from __future__ import annotations

from jobs.steps import calls as steps
from jobfile import config as config_lib


def check_plan(config_json: str, location: str, project: str, run_id: str = "", require_checks: bool = False,
               api_endpoint: str = ""):
    """Exit 1 after the failed checks' ``error:`` lines; nothing otherwise."""
    errors = steps.check_plan(config_lib.load_json(config_json), project, location, run_id=run_id,
                              require_checks=require_checks, api_endpoint=api_endpoint)
    if errors:
        raise SystemExit(1)
