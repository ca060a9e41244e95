"""Bearer-token admission of every service's HTTP port (the chassis's edge), and the token setting's validation."""

from __future__ import annotations

import pytest

from tidemark.config.settings import ConfigurationError, load_settings
from tidemark.chassis.http_edge import BearerTokenCheck, Unauthorized
from tidemark.services.coordinator.settings import CoordinatorSettings

TOKEN = "s3cret-token-0123456789abcdef"


def refusal(check: BearerTokenCheck, header: str | None) -> Unauthorized:
    with pytest.raises(Unauthorized) as caught:
        check.check(header)
    return caught.value


def test_no_token_configured_admits_everything() -> None:
    check = BearerTokenCheck(None)
    assert not check.required
    for header in (None, "", "Bearer anything", "Basic abc"):
        check.check(header)


def test_the_configured_token_is_accepted() -> None:
    check = BearerTokenCheck(TOKEN)
    assert check.required
    check.check(f"Bearer {TOKEN}")
    check.check(f"bearer {TOKEN}")
    check.check(f"  Bearer   {TOKEN}  ")


@pytest.mark.parametrize("header, message, challenge", [
    (None, "missing bearer token", 'Bearer realm="tidemark"'),
    ("", "missing bearer token", 'Bearer realm="tidemark"'),
    ("Bearer", "malformed Authorization header", 'error="invalid_request"'),
    ("Bearer    ", "malformed Authorization header", 'error="invalid_request"'),
    (f"Basic {TOKEN}", "malformed Authorization header", 'error="invalid_request"'),
    (TOKEN, "malformed Authorization header", 'error="invalid_request"'),
    (f"Bearer {TOKEN[:-1]}", "invalid bearer token", 'error="invalid_token"'),
    (f"Bearer {TOKEN}x", "invalid bearer token", 'error="invalid_token"'),
    (f"Bearer {TOKEN.upper()}", "invalid bearer token", 'error="invalid_token"'),
    ("Bearer \udcff\udcfe", "invalid bearer token", 'error="invalid_token"'),
])
def test_missing_malformed_and_wrong_tokens_are_refused(header: str | None, message: str, challenge: str) -> None:
    error = refusal(BearerTokenCheck(TOKEN), header)
    assert message in error.message
    assert challenge in error.headers["WWW-Authenticate"]


def test_a_configured_token_must_be_a_real_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEMARK_API_TOKEN", "short")
    with pytest.raises(ConfigurationError) as caught:
        load_settings(CoordinatorSettings)
    assert caught.value.problems[0][0] == "TIDEMARK_API_TOKEN"
    assert "at least 16 characters" in caught.value.problems[0][1]
    monkeypatch.setenv("TIDEMARK_API_TOKEN", TOKEN)
    assert load_settings(CoordinatorSettings).api_token == TOKEN
    monkeypatch.delenv("TIDEMARK_API_TOKEN")
    assert load_settings(CoordinatorSettings).api_token is None
