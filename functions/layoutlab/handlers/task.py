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


def _record_case_failure(payload_text: str | None, error: Exception) -> None:
    """The case's FAILURE item with the task's own reason: Step Functions hears only the container's exit,
    and the record_failure step keeps this reason (pipeline/outcomes.py)."""
    try:
        from layoutlab.handlers._runtime import results_store
        from layoutlab.pipeline.outcomes import FARGATE_TASK_RECORDED
        from layoutlab.pipeline.payloads import BenchCase

        case = BenchCase.from_event(json.loads(payload_text or "{}"))
        said = str(error)
        reason = said if said.startswith(f"{type(error).__name__}: ") else f"{type(error).__name__}: {said}"
        results_store().put_failure(case.dataset_id, "bench", case.case_id, reason, error=type(error).__name__,
                                    recorded_by=FARGATE_TASK_RECORDED)
    except Exception as unrecorded:  # (the exit status still fails the case; its reason is then the platform's)
        print(f"layoutlab task bench: the failure could not be recorded: {unrecorded}", file=sys.stderr)


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
        if kind == "bench":
            _record_case_failure(settings.value(PAYLOAD_ENV), error)
        return 1
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
