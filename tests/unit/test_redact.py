"""No password in an error: DSNs that fail to parse, or parse otherwise than typed, and
connections refused, each reported without the password."""

from __future__ import annotations

import pytest

from jobrun.redact import redact, title_without_secrets
from jobrun.errors import JobrunError
from jobrun.store import db

CASES = [
    ("postgresql://u:S3cret%ZZ@127.0.0.1:1/db", "S3cret"),            # bad %-escape: unparsable
    ("postgresql://u:Passw0rd@hostpart@127.0.0.1:1/db", "hostpart"),  # '@' in the password
    ("postgresql://u:Passw0rd@hostpart@127.0.0.1:1/db", "Passw0rd"),
    ("host=127.0.0.1 port=1 user=u password=Hunter22", "Hunter22"),
    ("postgresql://u:Pw0rdXY@[::1", "Pw0rdXY"),                       # unparsable host
    ("postgresql://u:Se%41cretX@127.0.0.1:1/db", "SeAcretX"),         # decoded form
]


@pytest.mark.parametrize("dsn, secret", CASES)
def test_connect_errors_never_show_the_password(dsn, secret):
    with pytest.raises(JobrunError) as info:
        db.connect(dsn, connect_timeout=5)
    assert secret not in str(info.value)
    assert secret not in redact(dsn)


def test_title_hides_dsn_values():
    title = title_without_secrets(
        ["jobrun-master", "-A", "app", "--dsn", "postgresql://u:Hunter22@h/db",
         "--dsn=postgresql://u:Other99@h/db", "postgresql://x:Third77@h/db"])
    assert "Hunter22" not in title and "Other99" not in title and "Third77" not in title
    assert title.startswith("jobrun-master -A app --dsn *** --dsn=***")
