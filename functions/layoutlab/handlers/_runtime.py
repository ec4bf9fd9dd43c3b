"""What every handler shares: Powertools objects, settings read once, AWS clients.

Handlers stay thin: parse the event, call one function of
``layoutlab.pipeline``, return. This module is imported at cold start, so a
missing environment variable fails the first invocation with its name.
"""

from __future__ import annotations

import functools
import os

from aws_lambda_powertools import Logger, Metrics

from layoutlab import observability as obs
from layoutlab import settings as settings_module
from layoutlab.process_environment import hide_initial_environment
from layoutlab.sandbox import make_non_dumpable
from layoutlab.settings import Settings

# A bad value in any LAYOUTLAB_* variable fails the cold start with one line naming it.
settings_module.check()

# Before any user's file is opened: /proc/self/environ (where Lambda's role credentials would show)
# reads as empty from here on; the process keeps its environment.
hide_initial_environment()
# ...and neither it nor its memory is readable by another process of the same user (a worker's among them)
make_non_dumpable()

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", obs.SERVICE))
metrics = Metrics(namespace=obs.NAMESPACE, service=os.environ.get("POWERTOOLS_SERVICE_NAME", obs.SERVICE))

if os.environ.get("POWERTOOLS_TRACE_DISABLED", "").lower() == "true":
    # Importing the X-Ray SDK costs ~0.8 s of every cold start; where tracing is off
    # (the local run sets POWERTOOLS_TRACE_DISABLED) skip it entirely.
    class _NoTracer:
        @staticmethod
        def capture_lambda_handler(function):
            return function

    tracer = _NoTracer()
else:
    from aws_lambda_powertools import Tracer

    tracer = Tracer(service=os.environ.get("POWERTOOLS_SERVICE_NAME", obs.SERVICE))


@functools.cache
def settings() -> Settings:
    return Settings.from_env()


@functools.cache
def s3_client():
    from layoutlab.storage import boto3_s3_client

    return boto3_s3_client()


@functools.cache
def results_store():
    from layoutlab.results.store import ResultsStore

    return ResultsStore(settings().results_table)


def _make_clients_at_init() -> None:
    """The clients every invocation uses, made in the init phase as AWS advises for Lambda: a warm
    container reuses them, and botocore's service models (~0.2 s of CPU for the first client) are loaded
    once per container, not per invocation. The local run forks every task from a runtime that ran this
    init, so its tasks start warm the same way (measured: ~0.3 s less per benchmark case). Without the
    settings, nothing is made here: the first invocation names what is missing, as before."""
    from layoutlab.settings import MissingSettings

    try:
        settings()
    except MissingSettings:
        return
    results_store()
    s3_client()


_make_clients_at_init()

# What the forked workers of each function (layoutlab/guard.py: every read of an uploaded file) import. A fork
# inherits its parent's modules, and what a worker imports dies with it: without these imported at init, each
# worker of a warm container imported them again (measured in a process that imported only the handler:
# 155-204 modules, 0.16-0.31 s a worker, two or three workers per granule).
FOR_PLAN_WORKERS = ("h5py", "s3fs", "h5coro", "layoutlab.hdf5_input", "layoutlab.structure",
                    "layoutlab.pipeline.facts", "layoutlab.bench.readers", "layoutlab.bench.patterns",
                    "layoutlab.products.signature")
FOR_CONVERT_WORKERS = ("h5py", "s3fs", "zarr", "layoutlab.hdf5_input", "layoutlab.convert.repack",
                       "layoutlab.convert.repack_hdf5", "layoutlab.convert.fastcopy", "layoutlab.convert.decode_check",
                       "layoutlab.convert.rechunk_zarr", "layoutlab.convert.allocation", "encodings.ascii")


def import_for_workers(*modules: str) -> None:
    """Import ``modules`` now, in the function's init, so its forked workers start with them loaded; with
    s3fs among them, botocore's S3 models parsed too (``storage.botocore_data_loader``)."""
    import importlib

    for name in modules:
        importlib.import_module(name)
    if "s3fs" in modules:
        from layoutlab.storage import botocore_data_loader

        botocore_data_loader()


def platform_memory_mb() -> int | None:
    """Memory of the platform this code runs as (``LAYOUTLAB_PLATFORM``), if known."""
    name = settings_module.value("LAYOUTLAB_PLATFORM")
    if not name:
        return None
    from layoutlab.platforms import platform_profile

    return platform_profile(name).memory_mb


def emit(spec, value: float, **dimensions) -> None:
    """One EMF data point with exactly ``spec``'s dimensions (``service`` included).

    A single metric per data point, so the dimension values of one case never
    leak into another's.
    """
    from aws_lambda_powertools.metrics import single_metric

    service = os.environ.get("POWERTOOLS_SERVICE_NAME", obs.SERVICE)
    with single_metric(name=spec.name, unit=spec.unit, value=value, namespace=obs.NAMESPACE,
                       default_dimensions={obs.SERVICE_DIMENSION: service}) as metric:
        for name, dim_value in dimensions.items():
            metric.add_dimension(name=name, value=str(dim_value))


def add_count(spec, value: float = 1, **dimensions) -> None:
    emit(spec, value, **dimensions)
