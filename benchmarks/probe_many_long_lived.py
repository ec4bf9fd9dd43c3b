"""What ``layoutlab repack IN... --out-dir`` would cost without its child per file: an experiment, not a mode.

The files of a directory are repacked, verified, by ``--jobs`` long-lived processes, each taking every
``jobs``-th file in turn (``repack(..., verify=True, check_here=True)``, as a many-files child runs it). The
CLI forks a child per file instead, so that a crafted file's harm stays its own; time the two side by side
against the reference loop to see what that child costs (docs/repack.md, "Fifth round"):

    farm-bench -n 7 --vs "sh -c 'rm -rf ref/*; for f in in/*; do h5repack -S PAGE -G 8388608 $f ref/$(basename $f) \\
        && h5diff $f ref/$(basename $f) || exit 1; done'" -- \\
        sh -c 'rm -rf out/*; LAYOUTLAB_NO_GUARD=1 exec python benchmarks/probe_many_long_lived.py in out'
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "functions"))

from layoutlab.convert.repack import repack  # noqa: E402
from layoutlab.convert.repack_many import expand_inputs  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("in_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--page-size", type=int, default=8 << 20)
    args = parser.parse_args(argv)
    files = expand_inputs([str(args.in_dir)])  # (the files the CLI would take from that directory)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    workers = []
    for job in range(args.jobs):
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                for path in files[job::args.jobs]:
                    repack(path, args.out_dir / path.name, page_size=args.page_size, verify=True, check_here=True)
            except BaseException as error:  # (said, and the run's exit code says it)
                print(f"{error}", file=sys.stderr)
                status = 1
            os._exit(status)
        workers.append(pid)
    failed = sum(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0 for pid in workers)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
