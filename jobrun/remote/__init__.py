"""The Python reference worker of the worker protocol (`jobrun worker`): runs a master's
``@app.task`` handlers with no database connection, over `jobrun web`'s /api/v1/workers.
Modules: ``http`` (the wire), ``worker`` (claims, runs, renews, reports), ``cli``.
docs/workers-anywhere.md describes the protocol and this worker."""
