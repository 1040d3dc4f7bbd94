"""Does an open console slow a drain? A 20k noop drain with and without the console open.

    PYTHONPATH=. python benchmarks/console_drain.py --pg-bin /usr/lib/postgresql/15/bin --pairs 3

Runs alternate: a plain drain (benchmarks/drain.py's run_once), then the same drain while a
`jobrun web` serves the schema and headless Chromium (/usr/bin/chromium, through Playwright)
holds the overview page open on its live events stream. Prints each run's rate and the
medians of both kinds, and the loss of the median with the console against the median without.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from benchmarks import drain  # noqa: E402
from benchmarks.common import Bench, add_db_args, median  # noqa: E402
from tests.webproc import WebProcess  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


class Console:
    """`jobrun web` on the run's schema, and Chromium showing its overview, until closed."""

    def __init__(self, dsn: str, schema: str) -> None:
        env = {**os.environ, "JOBRUN_DATABASE_URL": dsn, "JOBRUN_SCHEMA": schema,
               "PYTHONPATH": str(ROOT)}
        self.web = WebProcess(env).start()
        from playwright.sync_api import sync_playwright
        self.pw = sync_playwright().start()
        self.browser = self.pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        self.page = self.browser.new_page(viewport={"width": 1280, "height": 800})
        self.page.goto(f"{self.web.base}/")
        self.page.wait_for_selector("#live.on", timeout=60_000)
        self.page.wait_for_selector("#totals", timeout=60_000)

    def close(self) -> None:
        self.browser.close()
        self.pw.stop()
        self.web.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=3, help="plain/console run pairs")
    parser.add_argument("--timeout", type=float, default=900.0)
    add_db_args(parser)
    args = parser.parse_args(argv)
    args.task = "noop"
    rates: dict[str, list[float]] = {"plain": [], "console": []}
    with Bench(args) as bench:
        new_schema = bench.new_schema
        for pair in range(args.pairs):
            for kind in ("plain", "console"):
                console: Console | None = None
                if kind == "console":
                    # The console opens on the schema the run is about to create and fill.
                    schema = new_schema()
                    bench.new_schema = lambda: schema
                    console = Console(bench.dsn, schema)
                try:
                    result = drain.run_once(bench, args, args.concurrency, None)
                finally:
                    bench.new_schema = new_schema
                    if console is not None:
                        console.close()
                rates[kind].append(result["wall_rate"])
                print(f"pair {pair + 1} {kind:8s} {result['wall_rate']:8.0f} jobs/s"
                      f"  (db span {result['db_rate']:.0f}/s)", flush=True)
    plain, with_console = median(rates["plain"]), median(rates["console"])
    print(f"median without console {plain:.0f} jobs/s, with console {with_console:.0f} jobs/s:"
          f" {100 * (plain - with_console) / plain:+.1f} % loss")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
