"""The report in a real browser: Debian's chromium, headless, driven by playwright.

A page must load from its file with no console error and no request leaving the file (plotly.js is
inlined), and its plots must be drawn: plotly marks a drawn figure's div `.js-plotly-plot` and puts
its SVG inside. Skipped only where chromium is not installed (`.ci/run` installs it).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from test_report import FIXTURE, gpu_report

from kernelcraft.report.build import from_run_dir
from kernelcraft.report.html import render_html
from kernelcraft.report.model import RunReport

CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LOAD_TIMEOUT_MS = 60_000

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no chromium on PATH: install Debian's package (apt-get install chromium), as .ci/run does",
    ),
]

# For each figure div: drawn by plotly, with its SVG, and the number of markers in its plot area.
DRAWN = """() => [...document.querySelectorAll('.plotly-graph-div')].map(d => ({
    id: d.id,
    drawn: d.classList.contains('js-plotly-plot') && d.querySelector('svg.main-svg') !== null,
    points: d.querySelectorAll('.scatterlayer .point').length,
    bars: d.querySelectorAll('.barlayer .point').length,
}))"""


def open_report(report: RunReport, tmp_path: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    page_file = tmp_path / "report.html"
    page_file.write_text(render_html(report), encoding="utf-8")
    errors: list[str] = []
    outside: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on(
                "request",
                lambda r: None if r.url.startswith(("file:", "data:", "blob:")) else outside.append(r.url),
            )
            page.goto(page_file.as_uri(), wait_until="load", timeout=LOAD_TIMEOUT_MS)
            page.wait_for_selector(".js-plotly-plot svg.main-svg", timeout=LOAD_TIMEOUT_MS)
            figures = {f["id"]: f for f in page.evaluate(DRAWN)}
            notice = page.locator("#speed-not-measured")
            return {
                "errors": errors,
                "outside": outside,
                "figures": figures,
                "notice_visible": notice.count() == 1 and notice.is_visible(),
                "title": page.title(),
            }
        finally:
            browser.close()


def test_the_report_of_a_cpu_run_draws_its_tree_and_says_visibly_that_speed_was_not_measured(
    tmp_path: Path,
) -> None:
    report = from_run_dir(FIXTURE)
    seen = open_report(report, tmp_path)
    assert seen["errors"] == [] and seen["outside"] == []
    assert list(seen["figures"]) == ["tree"] and seen["figures"]["tree"]["drawn"]
    assert seen["figures"]["tree"]["points"] == len(report.nodes)  # one marker per node
    assert seen["notice_visible"] is True
    assert seen["title"] == "kernelcraft report: layernorm, tree 1"


def test_the_report_of_a_timed_run_draws_the_tree_the_speedup_curve_failures_and_tokens(
    tmp_path: Path,
) -> None:
    report = gpu_report()
    seen = open_report(report, tmp_path)
    assert seen["errors"] == [] and seen["outside"] == []
    figures = seen["figures"]
    assert list(figures) == ["tree", "speedup", "failures", "tokens"]
    assert all(f["drawn"] for f in figures.values()), figures
    assert figures["tree"]["points"] == len(report.nodes)
    assert figures["failures"]["bars"] == len(report.failures_by_class)
    assert figures["speedup"]["points"] > 0 and seen["notice_visible"] is False
