"""The README and docs/ stay true: short README with the two commands on top, links that resolve,
and only commands and make targets that exist.

A reader who follows a link to a missing page or heading, or types a `layoutlab` command or a
`make` target the docs show and gets "invalid choice", notices; these tests fail first, naming the
file, the line and what is wrong.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_LINES = 200
TWO_COMMANDS_WITHIN = 40  # lines: the two set-up commands a newcomer needs, on the first screen
TWO_COMMANDS = ("make demo", "make test")

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
# `layoutlab` as a command (not layoutlab.module, functions/layoutlab/, layoutlab-<env>-data)
LAYOUTLAB_COMMAND = re.compile(r"(?<![\w./-])layoutlab[ \t]+(.*)")
MAKE_COMMAND = re.compile(r"(?<![\w./$-])make[ \t]+(.*)")
WORD = re.compile(r"^[a-z][a-z0-9-]*$")  # a command or sub-command name (files have dots, placeholders capitals)
MAKE_TARGET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
MAKE_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def doc_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def shown_path(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def where(path: Path, line: int) -> str:
    return f"{shown_path(path)}:{line}"


def split_code(text: str) -> tuple[list[tuple[int, str]], str]:
    """(fenced code lines as (line number, text), the text with fenced blocks blanked, line numbers kept)."""
    code, prose, fence = [], [], None
    for number, line in enumerate(text.splitlines(), 1):
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)[0] * len(opening.group(1))
            prose.append("")
        elif fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            else:
                code.append((number, line))
            prose.append("")
        else:
            prose.append(line)
    return code, "\n".join(prose)


def code_spans(prose: str):
    """Every inline code span of the prose as (line number, content with whitespace runs made one space)."""
    for match in CODE_SPAN.finditer(prose):
        line = prose.count("\n", 0, match.start()) + 1
        yield line, " ".join(match.group(2).split())


def shown_code(path: Path):
    """(line, text) of everything shown as code: fenced lines and inline spans (a table's \\| is a |)."""
    code, prose = split_code(path.read_text())
    for line, text in [*code, *code_spans(prose)]:
        yield line, text.replace("\\|", "|")


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: inline markup dropped, lower case, punctuation removed, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LMN")
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    _, prose = split_code(path.read_text())
    seen: dict[str, int] = {}
    result = set()
    for line in prose.splitlines():
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(result)


def links(path: Path):
    """(line, target) of every link and image in the prose (not in code)."""
    _, prose = split_code(path.read_text())
    prose = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)
    for match in LINK.finditer(prose):
        yield prose.count("\n", 0, match.start()) + 1, match.group(1)


def link_problem(path: Path, target: str) -> str | None:
    """Why ``target`` (a link in ``path``) does not resolve; None when it does or is not a relative link."""
    if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("//"):
        return None  # an external URL (http:, mailto:): not this repository's to check
    file_part, _, anchor = target.partition("#")
    destination = (path.parent / file_part).resolve() if file_part else path
    if not destination.exists():
        return f"{file_part} does not exist"
    if anchor and destination.suffix == ".md" and anchor.lower() not in anchors(destination):
        return f"{shown_path(destination)} has no heading with the anchor #{anchor}"
    return None


def command_words(rest: str) -> tuple[str, ...]:
    """The command and sub-command words after ``layoutlab`` (``local up|down`` -> each alternative later)."""
    words = []
    for token in rest.split():
        token = token.strip("\"'),;:")
        if not token or not all(WORD.match(alternative) for alternative in token.split("|")):
            break
        words.append(token)
    return tuple(words)


def shown_layoutlab_commands() -> dict[tuple[str, ...], list[str]]:
    """Each distinct ``layoutlab COMMAND [SUB...]`` the docs show, with the places it is shown."""
    commands: dict[tuple[str, ...], list[str]] = {}
    for path in doc_files():
        for line, text in shown_code(path):
            for match in LAYOUTLAB_COMMAND.finditer(text):
                words = command_words(match.group(1))
                if not words:
                    continue  # `layoutlab COMMAND --help`: a placeholder, not a command
                alternatives = [[]]
                for word in words:
                    alternatives = [chosen + [option] for chosen in alternatives for option in word.split("|")]
                for chosen in alternatives:
                    commands.setdefault(tuple(chosen), []).append(where(path, line))
    return commands


def makefile_targets() -> set[str]:
    targets = set()
    for line in (REPO / "Makefile").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.][A-Za-z0-9_. -]*?)\s*::?(?!=)", line)
        if match and not line.startswith((".PHONY", "\t")):
            targets.update(match.group(1).split())
    return targets


def shown_make_targets() -> list[tuple[str, str]]:
    """(place, target) of every ``make TARGET`` the docs show."""
    shown = []
    for path in doc_files():
        for line, text in shown_code(path):
            for match in MAKE_COMMAND.finditer(text):
                for token in match.group(1).split():  # the first target (the docs never show two)
                    token = token.strip("\"'),;:`")
                    if MAKE_VARIABLE.match(token):
                        continue  # make PYTHON=... demo: a variable, not a target
                    if MAKE_TARGET.match(token):
                        shown.append((where(path, line), token))
                    break
    return shown


def test_readme_fits_two_screens_and_opens_with_the_two_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/"
    code, _ = split_code(README.read_text())
    for command in TWO_COMMANDS:
        shown_at = [number for number, text in code if re.match(rf"^\s*{re.escape(command)}(\s|$)", text)]
        assert shown_at, f"README.md: `{command}` is not shown as a command in a code block"
        assert shown_at[0] <= TWO_COMMANDS_WITHIN, (
            f"README.md:{shown_at[0]}: `{command}` must be within the first {TWO_COMMANDS_WITHIN} lines")


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / target.partition("#")[0]).resolve() for _, target in links(README)}
    orphans = [str(page.relative_to(REPO)) for page in sorted(DOCS.glob("*.md")) if page.resolve() not in linked]
    assert not orphans, f"README.md links to no page of {', '.join(orphans)}"


def test_every_relative_link_and_anchor_resolves():
    broken = [f"{where(path, line)}: ({target}) {problem}"
              for path in doc_files() for line, target in links(path)
              if (problem := link_problem(path, target))]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_layoutlab_command_shown_exists():
    commands = shown_layoutlab_commands()
    assert ("demo",) in commands and ("repack",) in commands, "the command extraction found nothing it should"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "functions"), os.environ.get("PYTHONPATH")]))}
    unknown = []
    for words, places in sorted(commands.items()):
        run = subprocess.run([sys.executable, "-m", "layoutlab.cli", *words, "--help"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            reason = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
            unknown.append(f"{places[0]}: `layoutlab {' '.join(words)}` -> exit {run.returncode}: {reason}"
                           + (f" (also {', '.join(places[1:])})" if places[1:] else ""))
    assert not unknown, "commands the docs show that do not exist:\n" + "\n".join(unknown)


def test_every_make_target_shown_exists():
    targets = makefile_targets()
    assert {"demo", "test"} <= targets, f"Makefile targets not found by the parser: {sorted(targets)}"
    shown = shown_make_targets()
    assert shown, "the make extraction found nothing it should"
    missing = [f"{place}: `make {target}` (no such target in the Makefile)" for place, target in shown
               if target not in targets]
    assert not missing, "make targets the docs show that do not exist:\n" + "\n".join(missing)


# The checks above are only as good as their parsers: these pin what they must catch.

def test_github_slugs_match_githubs_rules():
    assert github_slug("The local pipeline (`make demo`)") == "the-local-pipeline-make-demo"
    assert github_slug("Deploy to AWS: `cdk deploy -c env=NAME`") == "deploy-to-aws-cdk-deploy--c-envname"
    assert github_slug("What is verified offline, and what only an account can verify") == \
        "what-is-verified-offline-and-what-only-an-account-can-verify"
    assert github_slug("Two engines, one dispatch") == "two-engines-one-dispatch"


def test_the_parsers_find_commands_links_and_targets_in_code_and_prose(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## A `code` heading\n\nSee [x](other.md#nowhere) and `layoutlab frob\nsub` or\n"
                    "`make nosuch ENV=dev`.\n\n```sh\neval \"$(layoutlab local env)\"\nlayoutlab sample geos|atl03 OUT\n"
                    "make PYTHON=/x demo\n[not a link](in-code.md)\n```\n| `layoutlab repack IN OUT` \\| x |\n")
    assert anchors(page) == {"title", "a-code-heading"}
    assert list(links(page)) == [(5, "other.md#nowhere")]
    assert link_problem(page, "other.md") == "other.md does not exist"
    assert link_problem(page, "#a-code-heading") is None
    assert "no heading with the anchor #nope" in link_problem(page, "page.md#nope")
    found = {(line, text) for line, text in shown_code(page)}
    assert (5, "layoutlab frob sub") in found and (7, "make nosuch ENV=dev") in found
    words = [command_words(m.group(1)) for _, text in sorted(found) for m in LAYOUTLAB_COMMAND.finditer(text)]
    assert words == [("frob", "sub"), ("local", "env"), ("sample", "geos|atl03"), ("repack",)]
