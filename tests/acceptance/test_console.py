"""The web console in a real headless Chromium, against a real `jobrun web`, PostgreSQL and master.

Chromium is Debian's `chromium` package (installed by .ci/run), driven by Playwright's Python
API; Playwright's own browser download is never used. Every wait is on a condition (Playwright's
expect/wait_for_selector, jobrun.testing.wait_for), never a fixed sleep. Screenshots of each
page go to the test's tmp folder and must not be blank.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from jobrun.testing import wait_for
from tests.masterproc import ROOT, MasterProcess
from tests.pngcheck import distinct_colours
from tests.webproc import WebProcess

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
APP = "tests.apps.consoleapp"
TIMEOUT = 30_000  # ms; the machine is shared and slow at times

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (see .ci/run)",
                allow_module_level=True)
expect = playwright_api.expect
# The context's default timeout covers actions, not expect(): its own default is 5 s, which a
# master's first registration on a loaded machine has overrun (0 masters shown after 5 s).
expect.set_options(timeout=TIMEOUT)


@pytest.fixture
def web(db_env, tmp_path, client):
    token = secrets.token_urlsafe(16)
    token_file = tmp_path / "web.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    with WebProcess({**db_env, "PYTHONPATH": str(ROOT)}, "--token-file", str(token_file)) as w:
        w.token, w.url = token, w.base
        yield w


@pytest.fixture
def master(db_env, tmp_path, client):
    with MasterProcess(db_env, tmp_path, "-c", "2", "--lease-ttl", "3", app=APP) as m:
        m.wait_ready()
        yield m


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, web):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(TIMEOUT)
    p = context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    p.goto(f"{web.url}/")
    p.fill("input[name=token]", web.token)
    p.click("text=Use token")
    expect(p.locator("#live")).to_have_text("live")
    yield p
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def shot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    colours = distinct_colours(path)
    assert colours > 8, f"{path} looks blank ({colours} colours)"
    return path


def test_asks_for_the_token_once_and_keeps_it_for_the_tab(page, web, tmp_path):
    expect(page.locator("h1")).to_have_text("Overview")
    expect(page.locator("#no-masters")).to_contain_text("No master is running")
    assert page.evaluate("sessionStorage.getItem('jobrun.token')") == web.token
    page.reload()
    expect(page.locator("#live")).to_have_text("live")
    expect(page.locator("h1")).to_have_text("Overview")
    expect(page.locator("input[name=token]")).to_have_count(0)


def test_a_wrong_token_is_asked_again(browser, web):
    context = browser.new_context()
    p = context.new_page()
    p.goto(f"{web.url}/")
    p.fill("input[name=token]", "not-the-token")
    p.click("text=Use token")
    expect(p.locator(".auth")).to_contain_text("refused", timeout=TIMEOUT)
    context.close()


def test_overview_shows_queues_masters_and_a_live_job(page, master, client, tmp_path):
    expect(page.locator("#totals [data-card=children]")).to_contain_text("/2")
    expect(page.locator("#overview-body")).to_contain_text("default")
    shot(page, tmp_path, "overview")

    page.goto(page.url.split("#")[0] + "#/jobs")
    expect(page.locator("h1")).to_have_text("Jobs")
    job = client.enqueue("sleep", 1.5).job
    row = page.locator(f"tr[data-href='#/jobs/{job.id}']")
    expect(row).to_be_visible()  # appeared without a reload
    expect(row.locator(".status")).to_have_text("succeeded")
    shot(page, tmp_path, "jobs")


def test_a_dead_job_is_retried_and_succeeds(page, master, client, tmp_path):
    flag = tmp_path / "flag"
    job = client.enqueue("flaky_file", str(flag), max_attempts=1).job
    wait_for(lambda: client.get(job.id).status == "dead", timeout=30, message="the job to die")
    page.goto(page.url.split("#")[0] + f"#/jobs/{job.id}")
    expect(page.locator("#job-status")).to_contain_text("dead")
    expect(page.locator("#job-body dl.kv")).to_contain_text("1 of 1")
    expect(page.locator(".attempt")).to_contain_text("is missing")
    expect(page.locator(".attempt .log")).to_contain_text("looking for")  # its captured log
    shot(page, tmp_path, "job-dead")
    flag.write_text("here")
    page.click("#retry")
    expect(page.locator("#job-status")).to_contain_text("succeeded")
    expect(page.locator(".attempt")).to_have_count(2)
    assert client.get(job.id).status == "succeeded"
    # Its timeline tells the whole story, the retry by the console's caller included.
    steps = page.locator("#timeline li")
    expect(steps).to_have_count(6)
    assert [s.get_attribute("data-event") for s in steps.all()] == [
        "enqueued", "claimed", "dead", "requeued", "claimed", "succeeded"]
    expect(page.locator("#timeline li[data-event=requeued]")).to_contain_text("by api:127.0.0.1")
    shot(page, tmp_path, "job-succeeded")


def test_a_running_job_is_cancelled(page, master, client, tmp_path):
    job = client.enqueue("sleep", 60).job
    wait_for(lambda: client.get(job.id).status == "leased", timeout=30, message="the job to start")
    page.goto(page.url.split("#")[0] + f"#/jobs/{job.id}")
    expect(page.locator("#job-status")).to_contain_text("leased")
    page.click("#cancel")
    expect(page.locator("#job-status")).to_contain_text("cancelled")
    assert client.get(job.id).status == "cancelled"


def test_a_stale_retry_shows_the_conflict_and_changes_nothing(page, master, client, tmp_path):
    job = client.enqueue("flaky_file", str(tmp_path / "never"), max_attempts=1).job
    wait_for(lambda: client.get(job.id).status == "dead", timeout=30, message="the job to die")
    # A tab whose live streams are gone (the summary's and the job's own) keeps showing what
    # it loaded: a stale page.
    page.route("**/api/v1/events*", lambda route: route.abort())
    page.goto(page.url.split("#")[0] + f"#/jobs/{job.id}")
    page.reload()
    expect(page.locator("#job-status")).to_contain_text("dead")
    shown = int(page.locator("#job-version").inner_text())
    client.retry(job.id)  # someone else acts meanwhile; the job runs and dies again
    wait_for(lambda: client.get(job.id).status == "dead" and client.get(job.id).attempts == 1
             and client.get(job.id).version > shown, timeout=30, message="the job to die again")
    before = client.get(job.id)
    page.click("#retry")
    expect(page.locator("#conflict")).to_contain_text("409")
    expect(page.locator("#conflict")).to_contain_text(f"version {shown}")
    shot(page, tmp_path, "job-conflict")
    after = client.get(job.id)
    assert (after.status, after.version) == (before.status, before.version)


def test_the_queue_list_counts_the_masters_serving_each_queue(page, master, client):
    client.queue_add("emails")  # no master serves it: its jobs would wait for nothing
    wait_for(lambda: client.queue_get("default")["served_by"], timeout=15,
             message="the master's registry row")
    page.goto(page.url.split("#")[0] + "#/queues")
    # The overview, drawn until the queue list replaces it, links its queue rows the same way.
    expect(page.locator("#queue-body table")).to_be_visible()
    for name, count in (("default", "1"), ("emails", "0")):
        row = page.locator(f"#queue-body tr[data-href='#/queues/{name}']")
        expect(row).to_be_visible()
        expect(row.locator("td").nth(5)).to_have_text(count)  # after queued, leased


def test_a_queue_is_paused_and_resumed(page, client, tmp_path):
    page.goto(page.url.split("#")[0] + "#/queues/default")
    expect(page.locator("#queue-state")).to_contain_text("running")
    page.click("#pause")
    expect(page.locator("#queue-state")).to_contain_text("paused")
    assert paused(client, "default")
    shot(page, tmp_path, "queue")
    page.click("#resume")
    expect(page.locator("#queue-state")).to_contain_text("running")
    assert not paused(client, "default")


def frames(page) -> int:
    """Live frames the page has received (the badge counts them)."""
    return int(page.locator("#live").get_attribute("data-frames") or 0)


def press_across_a_frame(page, target, client) -> None:
    """Press ``target``, let a live frame arrive (an enqueue changes the summary: no master
    runs, the job stays queued), release."""
    seen = frames(page)
    target.hover()
    page.mouse.down()
    client.enqueue("noop", {})
    page.wait_for_function("n => Number(document.getElementById('live').dataset.frames) > n",
                           arg=seen)
    page.mouse.up()


def test_a_click_held_across_a_live_frame_still_pauses(page, client):
    """A queue's page redraws at each live frame; one that arrives between a button's press
    and its release waits until the click is done, so the click is not lost."""
    page.goto(page.url.split("#")[0] + "#/queues/default")
    expect(page.locator("#queue-state")).to_contain_text("running")
    queued = page.locator("div:has(> h2:text-is('Now')) dt:text-is('queued') + dd")
    expect(queued).to_have_text("0")
    press_across_a_frame(page, page.locator("#pause"), client)
    expect(page.locator("#queue-state")).to_contain_text("paused")
    assert paused(client, "default")
    expect(queued).to_have_text("1")  # the frame held back is drawn after the click


def test_a_link_held_across_a_live_frame_still_navigates(page, client):
    """The same on the overview: a link pressed across a frame still opens its page."""
    base = page.url.split("#")[0]
    page.goto(base + "#/")
    link = page.locator("#overview-body a[href='#/queues/default']")
    expect(link).to_be_visible()
    press_across_a_frame(page, link, client)
    expect(page).to_have_url(base + "#/queues/default")
    expect(page.locator("#queue-state")).to_contain_text("running")


def test_every_page_renders_and_keys_move_between_them(page, master, client, tmp_path):
    for i in range(3):
        client.enqueue("noop", {"n": i})
    base = page.url.split("#")[0]
    page.goto(base + "#/jobs")
    expect(page.locator("tr[data-row] .status.succeeded")).to_have_count(3)
    page.keyboard.press("j")
    page.keyboard.press("j")
    expect(page.locator("tr.selected")).to_have_count(1)
    href = page.locator("tr.selected").get_attribute("data-href")
    page.keyboard.press("Enter")
    expect(page).to_have_url(base + href)
    for key, heading, name in (("q", "Queues", "queues"), ("w", "Workers", "workers"),
                               ("t", "Tasks", "tasks"), ("s", "Schedules", "schedules"),
                               ("o", "Overview", "overview-keys")):
        page.keyboard.press("g")
        page.keyboard.press(key)
        expect(page.locator("main h1")).to_have_text(heading)
        expect(page.locator("main .loading")).to_have_count(0)
        shot(page, tmp_path, name)
    page.keyboard.press("/")
    expect(page.locator("#search")).to_be_focused()
    page.keyboard.type("123456789")
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_contain_text("Could not load job #123456789")
    background = "getComputedStyle(document.body).backgroundColor"
    page.emulate_media(color_scheme="light")
    light = page.evaluate(background)
    page.emulate_media(color_scheme="dark")
    assert page.evaluate(background) != light  # the theme follows the system setting
    shot(page, tmp_path, "dark")
    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(base + "#/workers")
    expect(page.locator("main")).to_contain_text("Running now")
    shot(page, tmp_path, "workers-phone")


def test_a_schedule_is_listed_opened_and_paused(page, client, tmp_path):
    client.schedules.create("nightly", "30 1 * * *", "noop", tz="Europe/London")
    base = page.url.split("#")[0]
    page.goto(base + "#/schedules")
    body = page.locator("#schedules-body")
    expect(body.locator("tr[data-row]")).to_have_count(1)
    expect(body).to_contain_text("30 1 * * *")
    shot(page, tmp_path, "schedules")
    page.goto(base + "#/schedules/nightly")
    expect(page.locator("main h1")).to_have_text("Schedule nightly")
    expect(body.locator("li")).to_have_count(5)  # the next fire times
    page.locator("#pause").click()
    expect(page.locator("#schedule-notice")).to_contain_text("Schedule nightly paused")
    assert client.schedules.get("nightly").paused
    expect(page.locator("#resume")).to_be_visible()
    shot(page, tmp_path, "schedule-detail")


def paused(client, queue: str) -> bool:
    return next(q for q in client.queues() if q["name"] == queue)["paused"]
