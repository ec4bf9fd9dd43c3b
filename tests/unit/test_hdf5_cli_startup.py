"""``layoutlab repack`` starts without importing the libraries of other commands.

Start-up is part of the repack time the benchmark compares with h5repack:
aiohttp, xarray, pandas, zarr and boto3 together cost ~0.6 s to import.
"""

import json
import subprocess
import sys
from pathlib import Path

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
HEAVY = ["aiohttp", "xarray", "pandas", "zarr", "boto3", "s3fs", "moto"]

PROBE = """
import json, sys
from layoutlab import cli
try:
    cli.main(["repack", "--help"])
except SystemExit:
    pass
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in %r)), file=sys.stderr)
"""


def test_repack_command_imports_only_what_it_needs():
    result = subprocess.run([sys.executable, "-c", PROBE % HEAVY], capture_output=True, text=True,
                            env={"PYTHONPATH": str(FUNCTIONS), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert "usage: layoutlab repack" in result.stdout
    loaded = json.loads(result.stderr.strip().splitlines()[-1])
    assert loaded == []


def test_full_help_still_lists_every_command():
    from layoutlab import cli

    text = cli.build_parser().format_help()
    for command in ("repack", "inspect", "sample"):
        assert command in text
