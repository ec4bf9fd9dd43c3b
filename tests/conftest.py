"""Suite-wide safety: no test may reach a real AWS account.

Fake credentials and a fixed region are set before any test runs; tests that
need S3, DynamoDB or Step Functions use the local cloud on 127.0.0.1.
"""

from __future__ import annotations

import os

for name, value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
}.items():
    os.environ[name] = value
for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
    os.environ.pop(name, None)

# Local-cloud state and kept demo results go to a fresh folder, never the user's.
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

os.environ["LAYOUTLAB_STATE_DIR"] = tempfile.mkdtemp(prefix="layoutlab-test-state-")
# removed when this test process ends (every xdist worker makes its own), so runs leave no folders behind
atexit.register(shutil.rmtree, os.environ["LAYOUTLAB_STATE_DIR"], ignore_errors=True)

# The local cloud fixtures (`local_cloud`, session-scoped; `cloud`, per test with
# the environment set and moto reset afterwards): see layoutlab/local/pytest_plugin.py.
pytest_plugins = ["layoutlab.local.pytest_plugin"]


# How `make test` deals tests to its workers (pytest-xdist, --dist loadfile): a file's tests go to one
# worker together, so its module fixtures are made once; except the files below, whose tests are
# independent, each doing its own costly work over cheap fixtures (one rechunk or inspect per corpus
# file): dealt test by test, such a file no longer keeps one worker busy while the others have
# finished. (--dist loadgroup with xdist_group marks would say this per test, but pytest-xdist 3.8
# cannot group under pytest 9: it renames node ids through an attribute pytest 9 no longer reads.)
SPREAD_OVER_WORKERS = {
    "tests/integration/test_corpus_rechunk.py",
    "tests/integration/test_corpus_inspect.py",
}


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LoadFileSpreadingSome(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return nodeid if file in SPREAD_OVER_WORKERS else file

    return LoadFileSpreadingSome(config, log)
