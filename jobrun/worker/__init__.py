"""The master process (``jobrun-master``) and its long-lived services: the claimer, the
dispatcher of job frames to children, the completer, notifier, heartbeater, reaper, registry
and metrics server. Only this package starts, signals or waits on child processes."""
