"""A test app with a schedule declared in code (tests/acceptance/test_scheduler_leader.py)."""

import jobrun

app = jobrun.App()


@app.periodic("*/2 * * * * *", name="beat", tz="Europe/London", payload={"from": "code"})
@app.task("beat.run")
def beat(job: jobrun.Job) -> None:
    return None
