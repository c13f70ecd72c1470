"""`trust.dashboard_url` against dashboard URLs a hostile intent may claim (DESIGN §1.1).

The URL is rebuilt from the head Service's name in the intent's own namespace; a claim may
only repeat it (with or without scheme, port or a trailing slash). Anything else, another
host, user info, a path, a query or an impossible port, is an IntentError, so nothing
read from an object names an address the syncer dials.
"""

from __future__ import annotations

import pytest

from syncer.errors import IntentError
from syncer.trust import dashboard_url

HOST = "demo-head-svc.team-a.svc.cluster.local"


@pytest.mark.parametrize(
    ("claimed", "port"),
    [
        (None, 8265),
        ("", 8265),
        (f"http://{HOST}:8265", 8265),
        (f"{HOST}:9000", 9000),
        (f"http://{HOST}/", 8265),
    ],
)
def test_a_claim_that_repeats_the_url_is_taken(claimed: str | None, port: int) -> None:
    assert dashboard_url("team-a", "demo-head-svc", claimed) == f"http://{HOST}:{port}"


@pytest.mark.parametrize(
    "claimed",
    [
        "http://demo-head-svc.team-b.svc.cluster.local:8265",  # another namespace
        f"http://evil@{HOST}:8265",  # user info
        f"http://{HOST}.evil.example:8265",
        f"http://{HOST}:8265/proxy",
        f"http://{HOST}:8265?x=1",
        f"http://{HOST}:0",
        f"http://{HOST}:70000",
        f"https://{HOST}:8265",
        "http://169.254.169.254:80",
        f"http://{HOST}:8265#frag",
    ],
)
def test_any_other_claim_is_refused(claimed: str) -> None:
    with pytest.raises(IntentError):
        dashboard_url("team-a", "demo-head-svc", claimed)
