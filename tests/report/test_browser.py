"""The report as a person sees it: opened in a real headless browser (Debian's chromium),
rendered without a console error, every figure decoded, hostile strings shown as text."""

import shutil
from pathlib import Path

import pytest

from soak.cli import main
from tests.report.conftest import HOSTILE_NAME, HOSTILE_TAG

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)
FLAGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does)"
)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # Playwright gives each launch a fresh profile (user data) folder of its own.
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def _open(browser, path: Path, screenshot: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    problems: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(f"{m.type}: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on(
        "request",
        lambda r: (
            None if r.url.startswith(("file:", "data:")) else problems.append(f"request: {r.url}")
        ),
    )
    page.goto(path.as_uri(), wait_until="load")
    images = page.evaluate(
        "[...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight,"
        " i.getBoundingClientRect().width])"
    )
    page.screenshot(path=screenshot, full_page=False)
    return page, problems, images


def test_the_report_renders_with_every_figure_and_no_error(browser, faulty_run, tmp_path):
    shot = tmp_path / "report.png"
    page, problems, images = _open(browser, faulty_run / "report.html", shot)
    assert problems == []
    assert len(images) == 7  # the six of test_figures, and the headroom plot
    for complete, width, height, shown in images:
        assert complete and width > 300 and height > 100 and shown > 300
    assert page.evaluate("document.querySelectorAll('script').length") == 0
    text = page.evaluate("document.body.innerText")
    assert HOSTILE_NAME in text and HOSTILE_TAG in text  # shown as the text it is
    assert page.evaluate("document.querySelector('.banner').innerText").startswith("FAIL")
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    page.close()


def test_the_comparison_renders_too(browser, faulty_run, fixed_run, tmp_path):
    out = tmp_path / "compare.html"
    assert main(["compare", str(faulty_run), str(fixed_run), "--out", str(out)]) == 0
    page, problems, images = _open(browser, out, tmp_path / "compare.png")
    assert problems == []
    assert len(images) == 1 and images[0][0] and images[0][1] > 300
    page.close()


def test_the_report_prints_to_pdf(browser, faulty_run, tmp_path):
    page = browser.new_page()
    page.goto((faulty_run / "report.html").as_uri())
    pdf = page.pdf(path=tmp_path / "report.pdf", format="A4")
    assert pdf[:4] == b"%PDF" and len(pdf) > 50_000
    page.close()


def test_an_interrupted_reports_server_table_fits_1400_px(browser, tmp_path):
    # A run stopped before any work: a row of "not available" cells, which used to push the
    # server table past the page at 1,400 px (issue 19).
    from soak.model import DeviceInfo
    from soak.pipeline import build_outputs
    from soak.store import STORE_NAME, RunStore

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store = RunStore.create(run_dir / STORE_NAME)
    store.set_meta(run={"backend": "cpu", "workload": "mix", "host": "h"}, host={})
    store.set_meta(stop={"reason": "interrupted", "detail": "stopped at once", "duration_s": 37.0})
    store.add_devices([DeviceInfo(0, "cpu", "Intel(R) Xeon(R) Processor")])
    store.close()
    _, report = build_outputs(run_dir)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(report.as_uri(), wait_until="load")
    overflow = page.evaluate(
        "(() => { const w = document.querySelector('table.compact').parentElement;"
        " return w.scrollWidth - w.clientWidth; })()"
    )
    page.close()
    assert overflow <= 0


def test_not_available_breaks_between_its_words_never_inside_one(browser, tmp_path):
    # The inventory's identifiers may break anywhere (a UUID is one long word); a "not
    # available" among them wrapped as "not avail / able" (issue 43).
    from soak.model import DeviceInfo
    from soak.pipeline import build_outputs
    from soak.store import STORE_NAME, RunStore

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store = RunStore.create(run_dir / STORE_NAME)
    store.set_meta(run={"backend": "cpu", "workload": "mix", "host": "h"}, host={})
    store.set_meta(stop={"reason": "interrupted", "detail": "stopped at once", "duration_s": 37.0})
    store.add_devices([DeviceInfo(0, "cpu", "Intel(R) Xeon(R) Processor")])
    store.close()
    _, report = build_outputs(run_dir)
    page = browser.new_page(viewport={"width": 700, "height": 900})
    page.goto(report.as_uri(), wait_until="load")
    lines = page.evaluate(
        """[...document.querySelectorAll('table.inventory .na')].map(span => {
             const text = span.firstChild, rows = new Map();
             for (let i = 0; i < text.length; i++) {
               const r = document.createRange(); r.setStart(text, i); r.setEnd(text, i + 1);
               const top = Math.round(r.getBoundingClientRect().top);
               rows.set(top, (rows.get(top) || '') + text.data[i]);
             }
             return [...rows.values()].map(s => s.trim());
           })"""
    )
    page.close()
    assert lines and any(len(cell) > 1 for cell in lines)  # narrow enough to wrap
    for cell in lines:
        assert all(line in ("not", "available", "not available") for line in cell), cell
