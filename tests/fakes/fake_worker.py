"""Fake replica for the launcher tests: plain Python, no TensorFlow.

Its role comes from TF_CONFIG (``chief-0``, ``worker-1``, ...).  ``--do SPEC=ACTION`` picks the
action, SPEC being ``chief-0`` (one replica), ``worker`` (a role) or ``*``; the most specific wins
and the default is ``ok``.  Actions:

  ok                     print and exit 0
  exit:N                 exit N
  sleep                  sleep forever (default SIGTERM handling: dies on SIGTERM)
  sleep:S                sleep S seconds, then exit 0
  ignore-term            ignore SIGTERM (like an MWMS worker), write <pid-dir>/<name>.ready,
                         sleep forever
  exit-when:PATH:N       wait until PATH exists, then exit N (N < 0: kill itself with signal -N)
  spawn                  start a grandchild `sleep` (pid written too), write
                         <pid-dir>/<name>.ready, sleep forever
  fail-once:DIR:N        first attempt: create DIR/<name>.failed and exit N;
                         later: print "Resumed from step 7" and exit 0
  kill-self              SIGKILL itself

Always prints ``env <json>`` with its cluster variables and ``line i`` for i < --lines.
With ``--pid-dir D`` it writes ``D/<name>-<pid>.pid`` (and ``D/<name>-child-<pid>.pid``).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--do", action="append", default=[])
p.add_argument("--pid-dir")
p.add_argument("--lines", type=int, default=3)
args = p.parse_args()

tf_config = json.loads(os.environ["TF_CONFIG"])
task = tf_config["task"]
name = f"{task['type']}-{task['index']}"
actions = dict(item.split("=", 1) for item in args.do)
action = actions.get(name) or actions.get(task["type"]) or actions.get("*") or "ok"

if args.pid_dir:
    open(os.path.join(args.pid_dir, f"{name}-{os.getpid()}.pid"), "w").close()
keys = sorted(k for k in os.environ
              if k in ("CLUSTER_SPEC", "TF_CONFIG", "PYTHONUNBUFFERED", "FAKE_EXTRA")
              or k.startswith(("AIP_", "CLOUD_ML_")))
print("env " + json.dumps({k: os.environ[k] for k in keys}))
for i in range(args.lines):
    print(f"{name} line {i}")
print(f"{name} action {action}", file=sys.stderr)
sys.stdout.flush()

kind, _, rest = action.partition(":")
if kind == "ok":
    sys.exit(0)
elif kind == "exit":
    sys.exit(int(rest))
elif kind == "sleep":
    time.sleep(float(rest) if rest else 10_000)
elif kind == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"{name} ignoring SIGTERM", flush=True)
    if args.pid_dir:
        open(os.path.join(args.pid_dir, f"{name}.ready"), "w").close()
    time.sleep(10_000)
elif kind == "exit-when":
    path, code = rest.rsplit(":", 1)
    while not os.path.exists(path):
        time.sleep(0.02)
    print(f"{name} saw {path}", flush=True)
    if int(code) < 0:
        os.kill(os.getpid(), -int(code))
    sys.exit(int(code))
elif kind == "spawn":
    child = subprocess.Popen(["sleep", "10000"])
    if args.pid_dir:
        open(os.path.join(args.pid_dir, f"{name}-child-{child.pid}.pid"), "w").close()
    print(f"{name} spawned {child.pid}", flush=True)
    if args.pid_dir:
        open(os.path.join(args.pid_dir, f"{name}.ready"), "w").close()
    time.sleep(10_000)
elif kind == "fail-once":
    marker_dir, code = rest.rsplit(":", 1)
    marker = os.path.join(marker_dir, f"{name}.failed")
    if not os.path.exists(marker):
        open(marker, "w").close()
        print(f"{name} failing on purpose", flush=True)
        sys.exit(int(code))
    print("Resumed from step 7", flush=True)
    sys.exit(0)
elif kind == "kill-self":
    os.kill(os.getpid(), signal.SIGKILL)
else:
    sys.exit(f"unknown action {action!r}")
