"""Run the pipeline's tasks locally from the deployment artifacts, laid out as Lambda and Fargate lay them out.

The local run must execute what AWS executes: the built dependency layer and
function asset (``layers/build_layer.py``), with the runtime's Python, and
nothing of the development venv. Here:

- **the runtime's Python** is a virtual environment without pip made from the
  interpreter the project runs on (``LAYOUTLAB_ARTIFACTS/runtime/lang``): the
  standard library and nothing else, as Lambda's ``/var/lang``; its version must
  be the one the artifacts were built for;
- **Lambda**: the function asset plays ``/var/task`` (``LAMBDA_TASK_ROOT``), the
  layer ``/opt``, and ``runtime_bootstrap.py`` (copied to ``runtime/var-runtime``)
  Lambda's bootstrap: ``PYTHONPATH`` is the runtime directory only and the
  bootstrap adds the task root and the layer to ``sys.path`` in-process;
- **Fargate**: the same two directories as the image holds them
  (cdk/container/Dockerfile copies the function asset to ``/var/task`` and the
  layer's ``python/`` to ``/opt/python`` and sets ``PYTHONPATH`` to both), and
  the image's command ``python -m layoutlab.handlers.task KIND``.

Every task gets an environment made from scratch (the platform's variables plus
the task's), a scratch directory of its own as ``TMPDIR`` that may not outgrow
the function's configured ephemeral storage, a core and a memory limit. A
``TaskHost`` per platform kind serves the tasks: it imports the handlers once and
forks each task from there (``LAYOUTLAB_FRESH_INTERPRETER=1``: a new interpreter
per task instead).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from layoutlab import settings
from layoutlab.bench.isolation import IsolatedResult, result_of

ARTIFACTS_ENV = "LAYOUTLAB_ARTIFACTS"
FRESH_ENV = "LAYOUTLAB_FRESH_INTERPRETER"
BOOTSTRAP = Path(__file__).with_name("runtime_bootstrap.py")
# cdk/container/Dockerfile: where the image holds the artifacts, and its PYTHONPATH.
IMAGE_TASK_ROOT = "/var/task"
IMAGE_LAYER_PYTHON = "/opt/python"
IMAGE_PYTHONPATH = f"{IMAGE_TASK_ROOT}:{IMAGE_LAYER_PYTHON}"
HOST_START_TIMEOUT_S = 120


class ArtifactsMissing(RuntimeError):
    """The deployment artifacts are not built (or not for this Python)."""


def _checkout_root() -> Path:
    return Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Artifacts:
    root: Path  # holds dependencies/ (the layer) and function/ (the function asset), as layers/build does

    @classmethod
    def locate(cls) -> "Artifacts":
        """``LAYOUTLAB_ARTIFACTS``, else the checkout's ``layers/build``; checked before use."""
        root = Path(settings.value(ARTIFACTS_ENV) or _checkout_root() / "layers" / "build")
        artifacts = cls(root.resolve())
        artifacts.check()
        return artifacts

    @property
    def layer(self) -> Path:
        return self.root / "dependencies"

    @property
    def function(self) -> Path:
        return self.root / "function"

    @property
    def runtime(self) -> Path:
        return self.root / "runtime"

    @property
    def lang(self) -> Path:
        return self.runtime / "lang"

    @property
    def var_runtime(self) -> Path:
        return self.runtime / "var-runtime"

    @property
    def python(self) -> Path:
        return self.lang / "bin" / "python3"

    def built_for(self) -> str | None:
        """The Python version the layer was built for (its stamp), if built."""
        try:
            return json.loads((self.root / "dependencies.stamp.json").read_text())["python"]
        except (OSError, ValueError, KeyError):
            return None

    def check(self) -> None:
        missing = [str(p) for p in (self.layer / "python", self.function / "layoutlab") if not p.is_dir()]
        if missing:
            raise ArtifactsMissing(f"the deployment artifacts are not built ({', '.join(missing)} missing): run "
                                   "`make artifacts` (python layers/build_layer.py); the local run executes them "
                                   "as Lambda and Fargate do")
        running = f"{sys.version_info.major}.{sys.version_info.minor}"
        builder = self._checkout_builder()
        if builder is not None and not builder.is_current():
            raise ArtifactsMissing(f"{self.root}: the deployment artifacts are older than the code or pyproject.toml; "
                                   "rebuild them with `make artifacts` (python layers/build_layer.py)")
        if self.built_for() != running:
            raise ArtifactsMissing(f"{self.root}: the artifacts are built for Python {self.built_for()}, this is "
                                   f"Python {running}; rebuild them with `make artifacts`")

    def _checkout_builder(self):
        """layers/build_layer.py of the checkout these artifacts were built in (None for artifacts elsewhere)."""
        script = self.root.parent / "build_layer.py"
        if self.root != (_checkout_root() / "layers" / "build").resolve() or not script.exists():
            return None
        import importlib.util

        spec = importlib.util.spec_from_file_location("layoutlab_layer_builder", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def ensure_runtime(self) -> None:
        """The runtime's Python (a venv without pip of the interpreter behind this one) and the bootstrap.

        Several dispatchers may start at once (the load test starts one per upload): one makes the
        runtime under a file lock, into a temporary directory renamed into place, so none ever
        starts from a half-made one."""
        import fcntl

        base = Path(getattr(sys, "_base_executable", sys.executable))
        wanted = {"base": str(base), "version": sys.version}
        self.runtime.mkdir(parents=True, exist_ok=True)
        with open(self.runtime / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            marker = self.lang / "layoutlab-base.json"
            try:
                current = json.loads(marker.read_text()) == wanted and self.python.exists()
            except (OSError, ValueError):
                current = False
            if not current:
                staging = Path(tempfile.mkdtemp(prefix="lang-", dir=self.runtime))
                # --without-pip: the standard library and nothing else, as Lambda's /var/lang
                subprocess.run([str(base), "-m", "venv", "--without-pip", str(staging)], check=True)
                (staging / "layoutlab-base.json").write_text(json.dumps(wanted))
                shutil.rmtree(self.lang, ignore_errors=True)
                staging.rename(self.lang)
            self.var_runtime.mkdir(exist_ok=True)
            bootstrap = self.var_runtime / "bootstrap.py"
            if not bootstrap.exists() or bootstrap.read_bytes() != BOOTSTRAP.read_bytes():
                staged = bootstrap.with_name(".bootstrap.py.new")
                shutil.copyfile(BOOTSTRAP, staged)
                staged.replace(bootstrap)

    # -- the platforms' environments ---------------------------------------------------
    def base_environment(self, kind: str) -> dict[str, str]:
        """What the platform itself sets (never the caller's environment)."""
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        env = {
            "PATH": f"{self.lang / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "en_US.UTF-8",
            "TZ": ":UTC",
            # Bytecode goes beside the artifacts, never into them (Lambda's /var/task and /opt are read-only).
            "PYTHONPYCACHEPREFIX": str(self.runtime / "pycache"),
        }
        if kind == "lambda":
            env.update({
                "PYTHONPATH": str(self.var_runtime),
                "LAMBDA_TASK_ROOT": str(self.function),
                "LAMBDA_RUNTIME_DIR": str(self.var_runtime),
                "LAYOUTLAB_LAYER_ROOT": str(self.layer),  # Lambda's /opt
                "LD_LIBRARY_PATH": ":".join([str(self.lang / "lib"), "/lib64", "/usr/lib64", str(self.var_runtime),
                                             str(self.var_runtime / "lib"), str(self.function),
                                             str(self.function / "lib"), str(self.layer / "lib")]),
                "AWS_EXECUTION_ENV": f"AWS_Lambda_python{version}",
            })
        else:
            # (the image sets PYTHONDONTWRITEBYTECODE but holds its bytecode, compiled when it is built:
            # here the cache beside the artifacts, filled by the first task, stands for it)
            env.update({
                "PYTHONPATH": self.image_pythonpath(),
                "PYTHONUNBUFFERED": "1",
            })
        return env

    def image_pythonpath(self) -> str:
        """The Dockerfile's ``PYTHONPATH`` with the image's directories mapped onto the artifacts."""
        mapping = {IMAGE_TASK_ROOT: str(self.function), IMAGE_LAYER_PYTHON: str(self.layer / "python")}
        return ":".join(mapping[entry] for entry in IMAGE_PYTHONPATH.split(":"))


def _scratch_root() -> Path:
    root = Path(tempfile.gettempdir()) / "layoutlab-scratch"
    root.mkdir(exist_ok=True)
    return root


class TaskHost:
    """One serving runtime process of a platform kind; runs one task at a time."""

    def __init__(self, artifacts: Artifacts, kind: str, environment: dict[str, str]):
        self.artifacts, self.kind = artifacts, kind
        self.environment = {**artifacts.base_environment(kind), **environment}
        self.process: subprocess.Popen | None = None
        self.info: dict = {}
        self._lock = threading.Lock()

    def start(self) -> dict:
        if self.process is not None and self.process.poll() is None:
            return self.info
        self.artifacts.ensure_runtime()
        cwd = self.artifacts.function if self.kind == "lambda" else _scratch_root()
        self.process = subprocess.Popen(
            [str(self.artifacts.python), "-s", str(self.artifacts.var_runtime / "bootstrap.py"), "serve", self.kind],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=self.environment, cwd=str(cwd),
            text=True, bufsize=1, close_fds=True)
        line = self._read_line(HOST_START_TIMEOUT_S)
        if not line:
            code = self.process.wait(timeout=10)
            self.process = None
            raise RuntimeError(f"the local {self.kind} runtime did not start (exit status {code}); "
                               "its error is above (stderr)")
        self.info = json.loads(line)
        return self.info

    def _read_line(self, timeout: float | None) -> str:
        import select

        if timeout is not None:
            ready, _, _ = select.select([self.process.stdout], [], [], timeout)
            if not ready:
                return ""
        return self.process.stdout.readline()

    def run(self, target: str, payload, *, memory_mb: int | None, cpu: int | None, timeout: float | None,
            scratch_limit_mb: int | None, env: dict[str, str], on_output=None) -> IsolatedResult:
        """Run ``target`` (``handler:NAME``, ``task:KIND`` or ``module:function``) as one task."""
        with self._lock:
            self.start()
            with tempfile.TemporaryDirectory(prefix="layoutlab-task-") as workdir, \
                    tempfile.TemporaryDirectory(prefix="tmp-", dir=_scratch_root()) as scratch:
                work = Path(workdir)
                request = {
                    "target": target, "payload": payload, "cpu": cpu, "memory_mb": memory_mb, "timeout": timeout,
                    "env": env, "scratch": scratch,
                    "scratch_limit_bytes": scratch_limit_mb * 2**20 if scratch_limit_mb else None,
                    "fresh": settings.value(FRESH_ENV),
                    "request_path": str(work / "request.json"), "result_path": str(work / "result.json"),
                    "output_path": str(work / "output.txt"),
                }
                (work / "request.json").write_text(json.dumps(request))
                self.process.stdin.write(json.dumps({"request_path": request["request_path"]}) + "\n")
                line = self._read_line(None)
                if not line:
                    self.process = None  # it died: the next task starts a new one
                    reply = {"returncode": -9, "user_cpu_s": 0.0, "system_cpu_s": 0.0, "wall_s": 0.0,
                             "timed_out": False, "scratch_exceeded": False, "scratch_peak_bytes": 0}
                else:
                    reply = json.loads(line)
                printed = (work / "output.txt").read_bytes() if (work / "output.txt").exists() else b""
                if on_output is not None:
                    on_output(printed)
                try:
                    outcome = json.loads((work / "result.json").read_text())
                except (OSError, ValueError):
                    outcome = None
        if reply["scratch_exceeded"]:
            outcome = {"ok": False, "error_type": "EphemeralStorageExceeded", "peak_rss_mb": None, "traceback": None,
                       "error": f"{target}: its scratch space (TMPDIR: Lambda's /tmp, a Fargate task's disk) outgrew the configured "
                                f"ephemeral storage of {scratch_limit_mb} MB: No space left on device"}
        peak = (outcome or {}).get("peak_rss_mb")
        common = dict(returncode=reply["returncode"], process_wall_s=reply["wall_s"], user_cpu_s=reply["user_cpu_s"],
                      system_cpu_s=reply["system_cpu_s"], peak_rss_mb=peak or 0.0,
                      peak_rss_source=f"VmHWM ({'fresh interpreter' if request['fresh'] else 'forked from the runtime'})",
                      cpu=cpu, memory_mb=memory_mb, output_tail=printed[-4000:].decode("utf-8", "replace"),
                      timed_out=reply["timed_out"], env_keys=sorted(env))
        return result_of(target, outcome, common, timeout)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.stdin.close()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
