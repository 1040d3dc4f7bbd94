"""The child process's runtime (``python -m jobrun.child``): receives job frames from its
master, runs handlers, captures their logs and commits transactional effects."""
