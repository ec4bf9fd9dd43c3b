"""The report page in a real browser: headless Chromium (Debian's ``chromium``, installed by
``make sysdeps``) opens the page from disk with no network, decodes every figure, and draws it.

Two runs of the browser, no driver library: ``--dump-dom`` on a copy of the page with one
load-time script appended (it records each <img>'s decoded size into the DOM), and
``--screenshot`` of the page itself, which must not be blank.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from layoutlab.report.html import write_report
import report_records as rr  # tests/report_records.py (pytest pythonpath)



def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed: CI must run 'make sysdeps' (Debian package chromium) before the tests")
    pytest.skip("chromium is not installed (apt-get install chromium, or 'make sysdeps'); "
                "this check is required in CI (CI is set there)")


def _browser(chromium: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    # --no-sandbox: CI runs the suite as root, where Chromium's sandbox refuses to start.
    # A profile of its own in the test's folder: nothing shared with a user's browser.
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--no-first-run", "--disable-extensions", "--disable-background-networking",
               f"--user-data-dir={cwd / 'profile'}", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd)
    assert result.returncode == 0, f"{command}: exit {result.returncode}\n{result.stderr[-2000:]}"
    return result


IMAGE_PROBE = """<script>
window.addEventListener("load", () => {
  const images = [...document.images].map(i => ({complete: i.complete, width: i.naturalWidth,
      height: i.naturalHeight, shown: Math.round(i.getBoundingClientRect().width), alt: i.alt}));
  document.body.setAttribute("data-images", JSON.stringify(images));
});
</script>"""


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("browser")
    return write_report(rr.all_items(), folder / "report.html", source="hand-built").html


def test_chromium_decodes_and_lays_out_every_figure(page, tmp_path):
    chromium = _chromium()
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", IMAGE_PROBE + "</body>"))
    dom = _browser(chromium, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri(), cwd=tmp_path).stdout
    found = re.search(r'data-images="([^"]*)"', dom)
    assert found, "the load handler never ran: " + dom[:500]
    images = json.loads(html.unescape(found.group(1)))
    expected = page.read_text().count("<img ")
    assert len(images) == expected == 12
    for image in images:
        assert image["complete"] and image["width"] > 300 and image["height"] > 200, image
        assert image["shown"] > 300, image  # laid out at a readable width, not collapsed
        assert image["alt"]


def test_chromium_screenshot_of_the_page_is_not_blank(page, tmp_path):
    chromium = _chromium()
    shot = tmp_path / "shot.png"
    _browser(chromium, "--window-size=1280,3000", f"--screenshot={shot}", page.as_uri(), cwd=tmp_path)
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 3000)
    grey = image.convert("L")
    not_white = sum(count for level, count in enumerate(grey.histogram()) if level < 240)
    assert not_white / (image.width * image.height) > 0.05  # text, bars, heatmap cells
    colours = image.getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 500  # anti-aliased figures, not a flat fill
    assert max(ImageStat.Stat(image).stddev) > 20
