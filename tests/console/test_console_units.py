"""The console's pure parts: chart geometry, signed cookies and CSRF tokens, where a login may lead, and
which addresses count as loopback."""

from __future__ import annotations

import pytest

from gateway.config import HeraldConfig
from gateway.console.auth import Signer, derive_key, same, weak_token
from gateway.console.charts import (
    HEIGHT,
    MIN_TOKEN_AXIS,
    MissMark,
    TurnFigures,
    daily_spend,
    money,
    nice_ceiling,
    saving,
    tokens,
    turns,
)
from gateway.console.serve import console_url, is_loopback
from gateway.console.server import _next

KEY = derive_key(b"secret" * 6, "console-token-0123")


def test_the_value_axis_ends_on_a_round_number() -> None:
    assert [nice_ceiling(v) for v in (0, 0.7, 1, 1.2, 2.1, 3, 7, 42, 0.013)] == [
        1, 1, 1, 2, 2.5, 5, 10, 50, 0.02
    ]  # fmt: skip
    assert [money(v) for v in (0, 0.0042, 1.234, 12345.6)] == ["$0", "$0.0042", "$1.23", "$12,346"]
    assert [money(v) for v in (-0.0087, -1.5, -0.000001)] == ["-$0.0087", "-$1.50", "$0"]  # never "$-"
    assert [saving(v) for v in (0.12, -0.0087)] == ["saved $0.12 by caching", "caching cost $0.0087 more"]
    assert [tokens(v) for v in (950, 1000, 12_500, 3_200_000)] == ["950", "1k", "12.5k", "3.2M"]


def test_daily_bars_are_as_tall_as_their_spend() -> None:
    chart = daily_spend([("2026-03-01", 1.0, 3), ("2026-03-02", 0.0, 0), ("2026-03-03", 2.5, 1)])
    one, none, most = chart.bars
    assert most.height == pytest.approx(2.5 * one.height)  # the axis ends at 2.5: the tallest fills it
    assert none.height == 0 and not chart.empty
    assert most.y + most.height == pytest.approx(HEIGHT - 28)  # bars stand on the axis
    assert one.title == "2026-03-01: $1.00 (3 requests)" and most.title.endswith("(1 request)")
    assert [label.text for label in chart.labels] == ["03-03"]  # today's, then every 5th before it
    assert [tick.label for tick in chart.ticks] == ["$0", "$0.50", "$1.00", "$1.50", "$2.00", "$2.50"]
    assert daily_spend([("2026-03-01", 0.0, 0)]).empty


@pytest.mark.parametrize("largest", [0.0, 0.004, 0.013, 0.02, 0.07, 0.1, 0.2, 0.9, 2.4, 7.0, 42.0, 1234.0])
def test_each_dollar_tick_is_labelled_once_with_its_value(largest: float) -> None:
    """Labels as precise as the step: never "$0.03" on a tick at 0.025, nor one label on two ticks."""
    chart = daily_spend([("2026-03-01", largest, 1)])
    top = nice_ceiling(largest)
    labels = [tick.label for tick in chart.ticks]
    assert len(set(labels)) == len(labels), labels
    for tick in chart.ticks:
        value = top * (chart.bottom - tick.y) / (chart.bottom - chart.top)
        assert float(tick.label.removeprefix("$").replace(",", "")) == pytest.approx(value, abs=1e-9), labels


@pytest.mark.parametrize("largest", [0, 1, 3, 7, 40, 625, 1250, 3900, 12_345, 2_400_000])
def test_each_token_tick_is_labelled_once_with_a_whole_number(largest: int) -> None:
    figures = [TurnFigures(1, "one", input_tokens=largest, cache_read=0, cache_write=0, output_tokens=0)]
    chart = turns(figures)
    labels = [tick.label for tick in chart.ticks]
    assert len(set(labels)) == len(labels), labels
    top = nice_ceiling(largest, least=MIN_TOKEN_AXIS)
    for tick in chart.ticks:
        value = top * (chart.bottom - tick.y) / (chart.bottom - chart.top)
        shown = float(tick.label.replace("k", "e3").replace("M", "e6"))
        assert shown == pytest.approx(value) and shown == int(shown), labels


def test_turn_bars_stack_the_four_kinds_and_misses_mark_their_request() -> None:
    figures = [
        TurnFigures(7, "first", input_tokens=1000, cache_read=0, cache_write=3000, output_tokens=0),
        TurnFigures(9, "second", input_tokens=100, cache_read=3900, cache_write=0, output_tokens=0),
    ]
    marks = [
        MissMark(9, "ttl_expired", "TTL expired", "cache miss (TTL expired)"),
        MissMark(404, "evicted", "provider evicted", "not shown"),
    ]
    chart = turns(figures, marks)
    first_input, first_write, second_input, second_read = chart.bars
    assert (first_input.kind, first_write.kind, second_read.kind) == ("input", "write", "read")
    assert first_write.y + first_write.height == pytest.approx(first_input.y)  # stacked, no gap
    assert second_read.height == pytest.approx(39 * second_input.height)
    [marker] = chart.markers
    assert marker.x == pytest.approx(second_read.x + second_read.width / 2)
    assert marker.y < second_read.y
    assert (marker.kind, marker.title) == ("ttl_expired", "cache miss (TTL expired)")
    assert [(s.kind, s.label) for s in chart.marker_legend] == [("ttl_expired", "TTL expired")]  # shown only
    assert "4,000 tokens: 100 input, 3,900 cache read" in second_read.title


def test_a_cookie_opens_nothing_once_changed_expired_or_signed_with_another_key() -> None:
    signer = Signer(KEY)
    cookie = signer.new_login(1000.0, 60)
    login = signer.login(cookie, 1000.0)
    assert login is not None and login.expires_at == 1060
    assert signer.login(cookie, 1060.0) is None
    version, _, nonce, mac = cookie.split(".")
    assert signer.login(".".join([version, "9999999999", nonce, mac]), 1000.0) is None  # prolonged
    assert signer.login(cookie[:-2] + "xx", 1000.0) is None
    assert Signer(derive_key(b"secret" * 6, "another-token-0123")).login(cookie, 1000.0) is None
    assert signer.login_form(cookie, 1000.0) is None  # a login is not a login form, nor the reverse
    assert signer.login(signer.new_login_form(1000.0), 1000.0) is None


def test_a_csrf_token_belongs_to_one_login() -> None:
    signer = Signer(KEY)
    token = signer.csrf("nonce-a")
    assert signer.csrf_ok("nonce-a", token)
    assert not signer.csrf_ok("nonce-b", token)
    assert not any(signer.csrf_ok("nonce-a", given) for given in (None, "", "é", token[:-1]))


def test_token_checks() -> None:
    assert same("a-token", "a-token") and not same("a-token", "a-tokeN") and not same("", "a")
    assert weak_token("x" * 16) is None
    assert "has 5 characters" in (weak_token("short") or "")


def test_a_login_leads_only_to_a_console_page() -> None:
    assert _next("/console/chats?sort=spend") == "/console/chats?sort=spend"
    for elsewhere in (None, "", "https://evil.example/", "//evil.example/", "/healthz", "/console\\@evil"):
        assert _next(elsewhere) == "/console/"


def test_loopback_and_the_link_address() -> None:
    assert all(is_loopback(host) for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(host) for host in ("0.0.0.0", "::", "10.0.0.5", "herald.example.com"))
    plain = HeraldConfig()
    assert console_url(plain, "http://0.0.0.0:8787") == "http://127.0.0.1:8787/console"
    public = HeraldConfig.model_validate({"console": {"public_url": "https://herald.example.com/"}})
    assert console_url(public, "http://127.0.0.1:8787") == "https://herald.example.com/console"


def test_the_public_url_is_an_address_without_a_path() -> None:
    for bad in ("herald.example.com", "ftp://x", "https://x/console", "https://user@x"):
        with pytest.raises(ValueError, match="without a path"):
            HeraldConfig.model_validate({"console": {"public_url": bad}})
