"""The console's pages a newcomer looks for first, in a real headless Chromium against a real
`jobrun web`, PostgreSQL and (where jobs must run) master: the attempts across jobs, the submit
form, schedules in words, a queue's figures as rates and durations, the jobs search saying what
it matches, the token prompt naming the real option, and the API explorer usable with a token.

The fixtures are tests/acceptance/test_console.py's (the same Chromium, the same waits on
conditions, never a sleep).
"""

from __future__ import annotations

import re

import httpx

from tests.acceptance.test_console import (TIMEOUT, browser, expect, master, page,  # noqa: F401
                                           shot, web)
from jobrun.testing import wait_for


def base(page) -> str:
    return page.url.split("#")[0]


def test_the_token_prompt_names_the_option_that_exists(browser, web):
    context = browser.new_context()
    p = context.new_page()
    p.goto(f"{web.url}/")
    prompt = p.locator(".auth")
    expect(prompt).to_contain_text("jobrun web --token-file PATH")
    text = prompt.inner_text()
    assert "JOBRUN_WEB_TOKEN" not in text and "--token " not in text
    context.close()


def test_the_api_explorer_loads_without_the_token_and_offers_it(web):
    """The explorer's page and its document load in a browser that has no token yet; the
    document declares the bearer scheme (Swagger UI's Authorize button sends it); every API
    call still needs the token."""
    with httpx.Client(base_url=web.url, timeout=30) as anonymous:
        docs = anonymous.get("/api/v1/docs")
        assert docs.status_code == 200 and "swagger" in docs.text.lower()
        doc = anonymous.get("/api/v1/openapi.json")
        assert doc.status_code == 200
        assert doc.json()["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
        assert {"bearer": []} in doc.json()["security"]
        assert anonymous.get("/api/v1/jobs").status_code == 401
        assert anonymous.post("/api/v1/openapi.json").status_code == 401  # a read only
        authorised = {"Authorization": f"Bearer {web.token}"}
        assert anonymous.get("/api/v1/jobs", headers=authorised).status_code == 200


def test_the_jobs_search_says_what_it_matches_and_no_column_stays_empty(page, client):
    job = client.enqueue("noop", {}, idempotency_key="order-4711").job
    client.enqueue("noop", {}, idempotency_key="order-4712")
    page.goto(base(page) + "#/jobs")
    search = page.locator("#job-filters input[name=q]")
    expect(search).to_have_attribute("placeholder", "id, task or idempotency key")
    expect(page.locator("#job-list tr[data-row]")).to_have_count(2)
    headers = page.locator("#job-list th").all_inner_texts()
    assert "task" in headers and "error" not in headers  # the list holds no error to show
    search.fill("4711")
    page.click("#job-filters button:text-is('Filter')")
    rows = page.locator("#job-list tr[data-row]")
    expect(rows).to_have_count(1)
    assert rows.first.get_attribute("data-href") == f"#/jobs/{job.id}"


def test_a_queue_shows_rates_and_durations(page, client, tmp_path):
    client.queue_add("mail", rate="50/s", aging="30s", retention="7d", concurrency=3)
    page.goto(base(page) + "#/queues/mail")
    expect(page.locator("#queue-state")).to_contain_text("running")
    settings = page.locator("#queue-body dl.kv").first
    expect(settings.locator("[data-setting=rate]")).to_have_text("50 starts/s")
    expect(settings.locator("[data-setting=aging]")).to_have_text("one priority step per 30 s waiting")
    expect(settings.locator("[data-setting=retention]")).to_have_text("finished jobs kept 7 d")
    assert "604800" not in page.locator("#queue-body").inner_text()
    expect(page.locator("#queue-in")).to_contain_text("jobs/")
    expect(page.locator("#queue-done")).to_contain_text("jobs/")
    shot(page, tmp_path, "queue-figures")


def test_attempts_across_jobs_filtered_by_outcome(page, master, client, tmp_path):
    bad = client.enqueue("flaky_file", str(tmp_path / "never"), max_attempts=1).job
    good = client.enqueue("noop", {}).job
    wait_for(lambda: client.get(bad.id).status == "dead" and client.get(good.id).status
             == "succeeded", timeout=30, message="one job to die and one to succeed")
    page.goto(base(page) + "#/attempts")
    expect(page.locator("main h1")).to_have_text("Attempts")
    rows = page.locator("#attempt-list tr[data-row]")
    expect(rows.filter(has_text="flaky_file")).to_have_count(1)
    expect(rows.filter(has_text="noop")).to_have_count(1)
    page.select_option("#attempt-filters select[name=outcome]", "failures")
    expect(page).to_have_url(base(page) + "#/attempts?outcome=failures")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("is missing")
    expect(rows.first.locator(".status")).to_have_text("failed")
    shot(page, tmp_path, "attempts")
    page.fill("#attempt-filters input[name=task]", "noop")
    page.click("#attempt-filters button:text-is('Filter')")
    expect(page.locator("#attempt-list")).to_contain_text("No attempt matches these filters")


def test_a_job_is_submitted_and_bad_json_is_never_sent(page, client, tmp_path):
    client.declare_queue("mail")
    page.keyboard.press("g")
    page.keyboard.press("n")
    expect(page.locator("main h1")).to_have_text("Submit a job")
    page.fill("#submit-form input[name=task]", "noop")
    page.fill("#submit-form textarea[name=payload]", '{"to": "a@example.com",}')
    expect(page.locator("#payload-error")).to_contain_text("Not JSON")
    page.click("#submit")
    expect(page.locator("#submit-notice")).to_be_empty()
    assert client.list() == []  # nothing was sent
    page.fill("#submit-form textarea[name=payload]", '{"to": "a@example.com"}')
    expect(page.locator("#payload-error")).to_be_empty()
    page.fill("#submit-form input[name=queue]", "mail")
    page.fill("#submit-form input[name=priority]", "-5")
    page.fill("#submit-form input[name=delay]", "5m")
    page.fill("#submit-form input[name=idempotency_key]", "welcome-42")
    page.click("#submit")
    link = page.locator("#submitted a")
    expect(link).to_contain_text("job #")
    job = client.get(int(link.inner_text().removeprefix("job #")))
    assert (job.task, job.payload, job.queue, job.priority, job.idempotency_key) == (
        "noop", {"to": "a@example.com"}, "mail", -5, "welcome-42")
    assert 290 <= (job.run_at - job.created_at).total_seconds() <= 310
    shot(page, tmp_path, "submit")
    page.click("#submit")  # the same key again: the stored job, not a second one
    expect(page.locator("#submitted")).to_contain_text("Already there")
    page.fill("#submit-form input[name=queue]", "nowhere")
    page.fill("#submit-form input[name=idempotency_key]", "")
    page.click("#submit")
    expect(page.locator("#submit-notice .state.error")).to_contain_text("is not declared")


def test_schedules_are_described_in_words(page, client, tmp_path):
    client.schedules.create("nightly", "30 2 * * *", "noop", tz="America/New_York")
    client.schedules.create("odd", "0 9-17 * * *", "noop")
    page.goto(base(page) + "#/schedules")
    body = page.locator("#schedules-body")
    expect(body.locator("tr[data-row]")).to_have_count(2)
    expect(body.locator("tr", has_text="nightly")).to_contain_text(
        "every day at 02:30, New York time")
    expect(body.locator("tr", has_text="odd")).to_contain_text("0 9-17 * * *, UTC")
    page.goto(base(page) + "#/schedules/nightly")
    words = page.locator("#schedule-words")  # the next fire in the schedule's zone, as worded
    expect(words).to_have_text(re.compile(r"^every day at 02:30, New York time; next at .*02:30$"))
    shot(page, tmp_path, "schedule-words")


def test_a_job_s_timeline_follows_its_own_stream(page, client, tmp_path):
    """The job page draws every recorded transition, and a change made elsewhere reaches it
    through the job's own stream (`event: job`), even with the summary stream cut."""
    job = client.enqueue("noop", {}, delay=3600).job
    page.route("**/api/v1/events", lambda route: route.abort())  # the summary's only
    page.goto(base(page) + f"#/jobs/{job.id}")
    page.reload()
    steps = page.locator("#timeline li")
    expect(steps).to_have_count(1)
    expect(steps.first).to_have_attribute("data-event", "enqueued")
    expect(steps.first).to_contain_text("to run at")
    # Once the job's stream is live, the change below can reach the page only by its line.
    expect(page.locator("section.page-job")).to_have_attribute("data-job-stream", "live")
    client.cancel(job.id, actor="cli:tester@desk")
    expect(steps).to_have_count(2)
    expect(page.locator("#timeline li[data-event=cancelled]")).to_contain_text(
        "cancelled by cli:tester@desk")
    expect(page.locator("#job-status")).to_contain_text("cancelled")
    expect(page.locator("#live")).not_to_have_text("live")  # the summary stream stayed cut
    shot(page, tmp_path, "job-timeline")
