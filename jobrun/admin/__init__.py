"""The operator's side: the ``jobrun`` command line and ``jobrun top``; it reads and changes
jobs through the store and the client, never through a master."""
