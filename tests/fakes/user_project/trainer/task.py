"""A user's existing trainer, laid out as in the Vertex labs (trainer/task.py, no __init__.py).

Run as ``python -m trainer.task --user_arg value``; writes what it saw to AIP_MODEL_DIR (the chief)
or to a workertemp_<i> dir (others), like the lab's write_filepath().
"""
import argparse
import json
import os
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--user_arg", required=True)
    args = parser.parse_args()
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    out = os.environ["AIP_MODEL_DIR"]
    if task["type"] != "chief":
        out = os.path.join(out, f"workertemp_{task['index']}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "seen.json"), "w") as f:
        json.dump({"argv": sys.argv[1:], "user_arg": args.user_arg, "task": task,
                   "module": __name__, "spec": __spec__.name}, f)
    print(f"trainer.task {task['type']}-{task['index']} user_arg={args.user_arg}")


if __name__ == "__main__":
    main()
