"""``vtp ci-local``: ``cloudbuild.yaml`` run on this machine, step by step, as Cloud Build runs it, before a
trigger runs it in the cloud.

    vtp ci-local --registry 127.0.0.1:5000 --substitution _TEMPLATE_REPOSITORY=      # the images, no upload
    vtp ci-local --registry 127.0.0.1:5000 --kfp-host http://127.0.0.1:8888/local-project/pipelines \\
        --vertex-endpoint http://127.0.0.1:8889 --substitution _SUBMIT=true ...       # every step, stand-ins
    vtp ci-local --install reuse --small-images --tests tests/test_cloudbuild.py ...  # the quick check (CI)

What Cloud Build does, and what this does in its place:

* **the source**: a trigger builds the pushed commit (its files, no ``.git``): ``--source commit`` (default)
  is ``git archive HEAD`` unpacked; ``gcloud builds submit`` uploads the working tree minus what
  ``.gitignore`` ignores: ``--source worktree`` (``git ls-files -co --exclude-standard``). Either way the
  workspace is made fresh under ``--workspace`` (default ``build/ci-local/``), never the checkout itself,
  so a virtualenv, build outputs and caches lying in the checkout never reach the build;
* **substitutions**: the file's defaults, overridden by the trigger's (``cloudbuild-trigger.yaml``, with
  ``--as trigger``) and then by ``--substitution``; the built-ins (PROJECT_ID, BUILD_ID, COMMIT_SHA,
  SHORT_SHA, BRANCH_NAME, TRIGGER_NAME, ...) from the commit and ``--project``; with
  ``options.dynamicSubstitutions`` (always on for triggered builds) ``$VAR``/``${VAR}`` in a user
  substitution's value is resolved against the built-ins and the other substitutions; with
  ``automapSubstitutions`` every step gets them all as environment variables (a ``script`` is never
  rewritten: bash expands them);
* **order**: a step without ``waitFor`` waits for every step before it; ``waitFor: ['-']`` starts at once;
  ``waitFor: [ids]`` waits for those. Steps whose waits are met run at the same time, as on Cloud Build.
  A failed step (unless ``allowFailure``/``allowExitCodes``) fails the build: running steps are stopped,
  later ones never start. ``timeout`` (per step, and the build's, or ``--timeout``) stops a step's whole
  process group;
* **steps**: each ``script`` is written to a file and executed (its ``#!`` line: bash) in the workspace (or
  its ``dir``), in its own process group; a step stopped (timeout, another step failed, Ctrl-C) gets SIGINT
  first (pytest and Python run their clean-ups), then SIGTERM, then SIGKILL; what a step leaves running,
  its own sessions included (found by a variable in its environment), is stopped when it ends, as a
  step's container is. ``python:*`` steps run on this interpreter (``python`` on their PATH is
  ``sys.executable``); ``gcr.io/cloud-builders/docker`` steps run this machine's ``docker`` CLI against
  ``--docker-host`` (default ``$DOCKER_HOST``, else ``unix:///var/run/docker.sock``);
* **the cloud**: never contacted. Artifact Registry for Docker is a local registry (``--registry
  HOST:PORT``: any registry, e.g. ``docker-registry`` or ``docker run -d -p 5000:5000 registry:2``): the
  docker steps get a ``docker`` on their PATH that pushes an image named ``REGION-docker.pkg.dev/P/R/I:T``
  (or ``*gcr.io/...``) as ``HOST:PORT/P/R/I:T`` and is the real CLI for everything else, so every name,
  tag and compiled YAML is what the cloud build makes and the digests are those the registry answered.
  Artifact Registry for KFP and Vertex AI are reached through two substitutions of ``cloudbuild.yaml``,
  ``_TEMPLATE_HOST`` (``--kfp-host http://127.0.0.1:P/PROJECT/REPO``) and ``_API_ENDPOINT``
  (``--vertex-endpoint http://127.0.0.1:P``). When a step would reach one that was not given, the run is
  refused before anything starts, with one line saying what it needs (loopback addresses only). Why not
  start stand-ins itself: the Vertex and KFP stand-ins are the test suite's (``tests/standins``, not part
  of the installed package) and a private Docker engine needs root; the test that runs this command
  starts them and passes their addresses. The steps get no Google credentials
  (``GOOGLE_APPLICATION_CREDENTIALS`` dropped, gcloud's configuration folder an empty one,
  ``NO_GCE_CHECK=true``);
* **install**: ``--install fresh`` (default) runs the step as written (a new ``.venv``, pip from the
  index: ~2 min); ``--install reuse`` makes ``.venv`` over this interpreter's packages
  (``python -m venv --system-site-packages .venv``; the rest of the step as written: pip finds every
  dependency installed and installs the workspace itself, ~10 s);
* **images**: ``--small-images`` puts a FROM-scratch busybox Dockerfile (the sources copied in, VARIANT
  recorded) in place of ``containers/Dockerfile`` in the workspace: every docker command of the steps runs
  for real, in seconds, with no base image and no PyPI. ``--wheels DIR`` links DIR's wheels into
  ``containers/wheels/`` (the Dockerfile then installs offline);
* **tests**: ``--tests ARGS`` hands ARGS to every pytest the steps start (``PYTEST_ADDOPTS``): a bounded
  selection of the ``unit-tests`` step (the test that runs this command is an integration test, which that
  step's ``-m "unit or process"`` never selects: it is never run recursively).

At the end: one line per step (outcome, wall time), then the build's artifacts as Cloud Build would upload
them (``artifacts.objects``: every file, where it would go; the image and template lists they hold, each
image checked by digest in the local registry). Exit status: 0 the build succeeded, 1 it failed,
2 invalid input (one ``error:`` line), 130 interrupted.

The package, by concept (each module's docstring says what it owns):

* :mod:`~jobs.commands.ci_local.build_file`: ``cloudbuild.yaml`` and ``cloudbuild-trigger.yaml`` read as data;
* :mod:`~jobs.commands.ci_local.substitutions`: the built-ins, dynamic substitutions, ``$NAME`` expansion;
* :mod:`~jobs.commands.ci_local.source`: the checkout, the commit's or the working tree's files, the run folder;
* :mod:`~jobs.commands.ci_local.environment`: what a step gets in place of its container;
* :mod:`~jobs.commands.ci_local.runner`: the order of the steps, running and stopping them, their outcomes;
* :mod:`~jobs.commands.ci_local.standins`: the local stand-ins for the cloud, and what would reach it, refused;
* :mod:`~jobs.commands.ci_local.artifacts`: the build's artifacts as Cloud Build would upload them;
* :mod:`~jobs.commands.ci_local.cli`: the command (``vtp ci-local``, ``python -m jobs.commands.ci_local``);
* :mod:`~jobs.commands.ci_local.errors`: the one ``error:`` line of bad input.
"""
from __future__ import annotations

from jobs.commands.ci_local.cli import main

__all__ = ["main"]
