"""The replica stand-in under ``run.py --runner docker``: one process per replica, started by the launcher,
running that replica's container (``python -m jobs.local.launch.replica_container WORKER_POOL_SPECS.json``).

Its output is the container's, its exit status the container's (``docker kill`` → 137, the launcher's
``128+SIGKILL``), SIGTERM goes to the container (the trainer saves and exits 42, as on a Vertex
preemption) and the container is removed when it ends. The container runs its pool's ``container_spec``
as the Vertex CustomJob gets it, with :func:`container_environment`: the pool's ``env`` and the Vertex
variables the launcher set, nothing of the host's.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import uuid
from typing import Any, Sequence

from jobs.local.launch.containers import ContainerError, LABEL_NAME, Settings, _identity, _mounts, engine_client, local_reference
from jobs.rules.replica_env import ROLES, is_vertex_variable, replica_environment


def replica_spec(specs: list[dict[str, Any]], env: dict[str, str]) -> tuple[int, int, dict[str, Any]]:
    """(pool, index, container_spec) of the replica ``env``'s ``CLUSTER_SPEC`` names."""
    task = json.loads(env["CLUSTER_SPEC"])["task"]
    pool = int(str(task["type"]).removeprefix("workerpool"))
    return pool, int(task.get("index", 0)), specs[pool]["container_spec"]


def container_environment(env: dict[str, str], spec: dict[str, Any]) -> dict[str, str]:
    """The replica container's environment, by the one builder (``jobs.rules.replica_env``): nothing of the
    host's (the image has its own ``ENV``), the pool's ``container_spec.env``, the Vertex variables the
    launcher gave this stand-in."""
    declared = {e["name"]: e.get("value", "") for e in spec.get("env") or []}
    return replica_environment({}, declared, {k: v for k, v in env.items() if is_vertex_variable(k)})


def run_replica(specs_file: str) -> int:
    """Run this replica's container to its end; its exit status is the container's."""
    settings = Settings.from_env()
    if settings is None:
        print("error: jobs.local.launch.containers replica runs under run.py --runner docker only", file=sys.stderr)
        return 2
    with open(specs_file, encoding="utf-8") as f:
        specs = json.load(f)
    pool, index, spec = replica_spec(specs, dict(os.environ))
    name = f"{ROLES[pool]}-{index}"
    stopping = {"signal": None}
    container = None

    def forward(signum, _frame):  # SIGTERM: the launcher stops this replica -> the container's trainer
        stopping["signal"] = signum
        if container is not None:
            with contextlib.suppress(Exception):
                container.kill(signal=signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the launcher, which stops us with SIGTERM
    c = engine_client(settings.timeout_s)
    try:
        image = local_reference(c, spec["image_uri"], pull=False)
        container = c.containers.create(
            image, entrypoint=spec.get("command") or None, command=spec.get("args") or None,
            environment=container_environment(dict(os.environ), spec), network_mode="host",
            mounts=_mounts(settings.mounts), labels=settings.labels("replica", **{LABEL_NAME: name}),
            name=f"vtp-{settings.run_id}-{name}-{uuid.uuid4().hex[:6]}", **_identity())
        if stopping["signal"] is not None:
            return 128 + stopping["signal"]
        container.start()
        for chunk in container.logs(stream=True, follow=True):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
        return int(container.wait()["StatusCode"])
    except ContainerError as exc:
        print(f"error: {exc}", flush=True)
        return 125
    finally:
        if container is not None:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        c.close()


def main(argv: Sequence[str]) -> int:
    if len(argv) == 1:
        return run_replica(argv[0])
    print("usage: python -m jobs.local.launch.replica_container WORKER_POOL_SPECS.json (the launcher runs it)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
