"""The dashboard's cookie signer: tampering, expiry, purpose and CSRF tokens."""

from __future__ import annotations

from app.ui.session import Signer, make_signer


def test_a_session_cookie_round_trips_and_holds_no_key():
    signer = Signer("s" * 40)
    cookie = signer.new_session("key-id-1", ttl_s=60, now=1000.0)
    session = signer.read_session(cookie, now=1059.0)
    assert session is not None and session.key_id == "key-id-1" and session.expires == 1060
    assert signer.read_session(cookie, now=1060.0) is None  # expired


def test_a_tampered_or_foreign_cookie_is_refused():
    signer = Signer("s" * 40)
    cookie = signer.new_session("key-id-1", ttl_s=60, now=1000.0)
    body, mac = cookie.split(".")
    forged = Signer("t" * 40).new_session("key-id-1", ttl_s=60, now=1000.0)
    assert signer.read_session(forged, now=1001.0) is None  # another server's secret
    # Change the MAC's first character: it carries 6 whole bits of the MAC, whereas the
    # last one's low bits are padding that decoding ignores (a tampered tail could decode to
    # the same MAC, about once in a thousand random nonces).
    tampered = ("B" if mac[0] == "A" else "A") + mac[1:]
    assert signer.read_session(body + "." + tampered, now=1001.0) is None
    assert signer.read_session(body + "x." + mac, now=1001.0) is None
    for junk in (None, "", "abc", "a.b.c", "." * 5000):
        assert signer.read_session(junk, now=1001.0) is None


def test_a_sign_in_cookie_is_not_a_session():
    signer = Signer("s" * 40)
    login_cookie, token = signer.new_login(now=1000.0)
    assert signer.read_session(login_cookie, now=1001.0) is None
    nonce = signer.login_nonce(login_cookie, now=1001.0)
    assert signer.check_csrf(nonce, token)
    session_cookie = signer.new_session("k", ttl_s=60, now=1000.0)
    assert signer.login_nonce(session_cookie, now=1001.0) is None


def test_csrf_tokens_are_bound_to_the_session_and_the_secret():
    signer = Signer("s" * 40)
    first = signer.read_session(signer.new_session("k", 60, now=0.0), now=1.0)
    second = signer.read_session(signer.new_session("k", 60, now=0.0), now=1.0)
    assert first is not None and second is not None and first.nonce != second.nonce
    token = signer.csrf_token(first.nonce)
    assert signer.check_csrf(first.nonce, token)
    assert not signer.check_csrf(second.nonce, token)
    assert not signer.check_csrf(first.nonce, None)
    assert not signer.check_csrf(first.nonce, "")
    assert not Signer("t" * 40).check_csrf(first.nonce, token)


def test_without_a_secret_each_signer_has_its_own():
    cookie = make_signer(None).new_session("k", 60)
    assert make_signer(None).read_session(cookie) is None
    assert make_signer("u" * 40).read_session(make_signer("u" * 40).new_session("k", 60))
