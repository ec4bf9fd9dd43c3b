"""Fargate entry point: ``python -m layoutlab.handlers.task convert|bench``.

The payload is the JSON string in ``LAYOUTLAB_TASK_PAYLOAD`` (a container
override set by the state machine) and is exactly the event the Lambda handler
of the same name receives; the same functions run. Exit status 0 on success;
on failure one line naming the error on stderr and status 1, which Step
Functions reports as States.TaskFailed.
"""

from __future__ import annotations

import json
import sys

from layoutlab import settings

PAYLOAD_ENV = settings.TASK_PAYLOAD
TASKS = ("convert", "bench")


def run_task(kind: str, payload_text: str | None) -> dict:
    if kind not in TASKS:
        raise SystemExit(f"usage: python -m layoutlab.handlers.task {{{'|'.join(TASKS)}}}")
    if not payload_text:
        raise ValueError(f"{PAYLOAD_ENV} is empty: the state machine passes the task's payload in it")
    payload = json.loads(payload_text)
    from layoutlab.handlers._runtime import metrics

    if kind == "convert":
        from layoutlab.handlers.convert import run
    else:
        from layoutlab.handlers.bench import run
    try:
        return run(payload)
    finally:
        metrics.flush_metrics()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    kind = argv[0] if argv else ""
    from layoutlab.errors import Terminated, unwind_on_sigterm

    unwind_on_sigterm()  # ECS stops a task with SIGTERM: the convert step then deletes what it half wrote
    try:
        result = run_task(kind, settings.value(PAYLOAD_ENV))
    except SystemExit:
        raise
    except Terminated as stop:
        print(f"layoutlab task {kind}: {stop}; partial outputs removed", file=sys.stderr)
        return 143
    except Exception as error:  # the task's exit status is its only channel back to Step Functions
        print(f"layoutlab task {kind}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
