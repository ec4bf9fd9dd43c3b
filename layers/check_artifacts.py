"""Check that the deployment artifacts can load on the runtime, before AWS finds out.

Lambda python3.12 (and the Fargate image, built on the same base) is Amazon Linux
2023: glibc 2.34, GCC 11's libstdc++. A shared object linked against a newer
glibc fails at import there ("version `GLIBC_2.38' not found"), however well it
imports on the build machine. Two checks, over the layer and the function asset
(the image copies exactly these two directories, see cdk/container/Dockerfile):

- every ELF file's *needed* symbol versions (``.gnu.version_r``: what it asks of
  libc, libm, libstdc++, ...) are at most the runtime's;
- every installed distribution's wheel tags (``*.dist-info/WHEEL``) include one
  the runtime supports (CPython 3.12, manylinux up to glibc 2.34, x86_64). The
  project's own wheel is built on this machine and tagged ``linux_x86_64``; for it
  the ELF check is the guard.

    python layers/check_artifacts.py        # exit 1 and one line per problem

The symbol versions are read with pyelftools (no objdump needed).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging import tags

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_layer  # noqa: E402  (the same directory; the runtime's numbers live there)

OWN_DISTRIBUTION = "layoutlab"
# Version namespaces of the runtime's system libraries, and the newest each provides on
# Amazon Linux 2023 (glibc 2.34; GCC 11: GLIBCXX_3.4.29, CXXABI_1.3.13, libgcc_s GCC_11.0).
RUNTIME_PROVIDES = {
    "GLIBC": build_layer.RUNTIME_GLIBC,
    "GLIBCXX": build_layer.RUNTIME_GLIBCXX,
    "CXXABI": (1, 3, 13),
    "GCC": (11, 0, 0),
}
VERSION_NAME = re.compile(r"^(GLIBC|GLIBCXX|CXXABI|GCC)_(\d+(?:\.\d+)*)$")


@dataclass(frozen=True)
class Problem:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def needed_versions(path: Path) -> dict[str, set[str]]:
    """``{"libc.so.6": {"GLIBC_2.17", ...}, ...}``: the symbol versions ``path`` needs from each library."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    needed: dict[str, set[str]] = {}
    with open(path, "rb") as fh:
        for section in ELFFile(fh).iter_sections():
            if isinstance(section, GNUVerNeedSection):
                for verneed, auxiliaries in section.iter_versions():
                    needed.setdefault(verneed.name, set()).update(aux.name for aux in auxiliaries)
    return needed


def _as_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def too_new(version_names: set[str]) -> list[str]:
    """The names among ``version_names`` the runtime's system libraries do not provide."""
    newer = []
    for name in version_names:
        match = VERSION_NAME.match(name)
        if match and _as_tuple(match.group(2)) > RUNTIME_PROVIDES[match.group(1)]:
            newer.append(name)
    return sorted(newer, key=lambda n: (n.split("_")[0], _as_tuple(VERSION_NAME.match(n).group(2))))


def elf_problems(root: Path) -> tuple[int, list[Problem]]:
    """(ELF files looked at, problems) for every shared object or executable under ``root``."""
    checked, problems = 0, []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            if path.is_symlink() or not is_elf(path):
                continue
            checked += 1
            for library, versions in sorted(needed_versions(path).items()):
                if newer := too_new(versions):
                    problems.append(Problem(str(path.relative_to(root)),
                                            f"needs {', '.join(newer)} from {library}; the runtime (Amazon Linux "
                                            f"2023) has at most {_provided_text()}"))
    return checked, problems


def _provided_text() -> str:
    return ", ".join(f"{name}_{'.'.join(map(str, version))}" for name, version in RUNTIME_PROVIDES.items())


def runtime_tags() -> set[tags.Tag]:
    """Every wheel tag CPython of the runtime's version on x86_64 Amazon Linux 2023 accepts."""
    version = tuple(int(p) for p in build_layer.PYTHON_VERSION.split("."))
    platforms = [*build_layer.PLATFORMS, "manylinux2010_x86_64", "manylinux1_x86_64"]
    interpreter = f"cp{version[0]}{version[1]}"
    supported = set(tags.cpython_tags(version, abis=[interpreter], platforms=platforms))
    supported |= set(tags.compatible_tags(version, interpreter=interpreter, platforms=platforms))
    return supported


def wheel_problems(site: Path) -> tuple[int, list[Problem]]:
    """(distributions looked at, problems) for the ``*.dist-info/WHEEL`` files directly under ``site``."""
    supported = runtime_tags()
    checked, problems = 0, []
    for wheel in sorted(site.glob("*.dist-info/WHEEL")):
        checked += 1
        declared = [line.split(":", 1)[1].strip() for line in wheel.read_text().splitlines()
                    if line.startswith("Tag:")]
        parsed = {tag for text in declared for tag in tags.parse_tag(text)}
        distribution = wheel.parent.name.split("-")[0]
        if parsed & supported:
            continue
        if distribution == OWN_DISTRIBUTION and all(t.platform == "linux_x86_64" and t.abi in ("abi3", "none")
                                                    for t in parsed):
            continue  # built here, for this Python; its C module passed (or fails) the ELF check
        problems.append(Problem(str(wheel.relative_to(site)),
                                f"wheel tags {', '.join(declared)} do not fit CPython {build_layer.PYTHON_VERSION} "
                                f"on manylinux <= glibc {'.'.join(map(str, build_layer.RUNTIME_GLIBC))} x86_64"))
    return checked, problems


def check(layer_site: Path = build_layer.SITE, function_dir: Path = build_layer.FUNCTION_DIR) -> dict:
    """Both checks over both artifacts: counts and problems."""
    report = {"elf_files": 0, "wheels": 0, "problems": []}
    for root in (layer_site, function_dir):
        if not root.is_dir():
            report["problems"].append(Problem(str(root), "missing: build it with `make artifacts`"))
            continue
        elf_count, elf = elf_problems(root)
        wheel_count, wheels = wheel_problems(root)
        report["elf_files"] += elf_count
        report["wheels"] += wheel_count
        report["problems"] += elf + wheels
    return report


def main() -> int:
    report = check()
    for problem in report["problems"]:
        print(problem)
    print(f"checked {report['elf_files']} ELF files and {report['wheels']} wheels against CPython "
          f"{build_layer.PYTHON_VERSION} on Amazon Linux 2023: {len(report['problems'])} problem(s)")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
