"""`jobrun web`: the HTTP/JSON API (``/api/v1``) for producers and operators in any language.

A process of its own, beside the masters: an ASGI app (FastAPI on uvicorn with uvloop) over a
psycopg connection pool. It never claims jobs. Modules: ``server`` (bind, token, process),
``connections`` (request timeout, connection cap, stalled readers, streams at shutdown),
``app`` (assembly), ``guard`` (host, token, origin, body size), ``envelope`` (the error
envelope), ``models`` (request bodies), ``routes_jobs`` and ``routes_observe`` (endpoints),
``reads`` (the API's own read operations), ``pool`` (driving jobrun.ops over the pool);
the worker protocol: ``routes_workers``, ``wakeups`` (its long polls), ``workertokens``.
"""

DEFAULT_BIND = "127.0.0.1:9120"  # loopback: a wider bind needs --token-file
REQUEST_TIMEOUT = 15.0  # seconds a client has to send a whole request (--request-timeout)
