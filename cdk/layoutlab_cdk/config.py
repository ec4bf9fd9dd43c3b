"""The CDK app's constants (paths, prefixes, the runtime) and, from the package
(``layoutlab.environments``), the schema of cdk.json's environments: ``load``,
``validate``, ``EnvConfig`` and its sizes, read once and validated.
"""

from __future__ import annotations

from pathlib import Path

from layoutlab import settings
from layoutlab.environments import (  # noqa: F401 (the stacks and tests use them from here)
    ENVIRONMENTS_KEY, FARGATE_CONVERT_MIN_BYTES_PER_S, FARGATE_EPHEMERAL_GIB_RANGE, FARGATE_IMAGE_RESERVE_GIB,
    FARGATE_START_SECONDS, HANDLERS, LAMBDA_EPHEMERAL_MB_RANGE, SCRATCH_FACTOR, ConfigError, EnvConfig, FunctionSize,
    TaskSize, ecs_task_timeouts, load, task_timeout_problems, validate)

REPO_ROOT = Path(__file__).resolve().parents[2]
ASL_PATH = REPO_ROOT / "stepfunctions" / "pipeline.asl.json"
BACKFILL_ASL_PATH = REPO_ROOT / "stepfunctions" / "backfill.asl.json"
FUNCTIONS_DIR = REPO_ROOT / "functions"
DOCKERFILE = "cdk/container/Dockerfile"  # relative to REPO_ROOT, the image's build context

PYTHON_RUNTIME = "3.12"  # the Lambda runtime (python3.12, Amazon Linux 2023); layers/build_layer.py and the Makefile follow it

# The S3 → ingest trigger watches this prefix of the ingest bucket only.
INGEST_PREFIX = "incoming/"
# The ingest queue (S3 → EventBridge → SQS → ingest): batch size, batching window and the event source's
# concurrency, shared with the local cloud's event source (layoutlab.local.sqs_source).
from layoutlab.pipeline.events import (  # noqa: E402,F401
    INGEST_BATCH_SIZE, INGEST_BATCH_WINDOW_SECONDS, INGEST_MAX_CONCURRENCY)
# Visibility timeout = 6 × ingest's timeout (AWS's advice for an SQS event source). A record over its product's
# bound comes back after it; 240 deliveries (a day at ingest's 60 s timeout) before the dead-letter queue.
INGEST_QUEUE_VISIBILITY_FACTOR = 6
INGEST_QUEUE_MAX_RECEIVES = 240


def ingest_queue_name(config: EnvConfig) -> str:
    """The ingest queue's name, fixed by the environment: the compute stack grants ingest its messages by this
    name, so it needs no reference to the pipeline stack (which depends on compute)."""
    return f"layoutlab-{config.name}-ingest-queue"
# User-supplied plans (object metadata names one); never triggers the pipeline.
PLANS_PREFIX = "plans/"
# Everything the pipeline writes goes to the *outputs* bucket under these prefixes.
OUTPUT_PREFIXES = {
    "variants": "variants/",  # converted layouts (paged HDF5, Zarr v3)
    "products": "products/",  # a product's granules converted with its chosen layout (layoutlab/products/)
    "runs": "runs/",  # per-dataset case lists and work-unit lists written by plan
    "map_runs": "map-runs/",  # Distributed Map ResultWriter output (see pipeline.asl.json)
    "summaries": "summaries/",  # JSON summary per dataset
    "reports": "reports/",  # HTML/PNG report
}
# Names fixed by the contract in stepfunctions/README.md.
TASK_CONTAINER_NAME = "layoutlab"
TASK_PAYLOAD_ENV = settings.TASK_PAYLOAD
