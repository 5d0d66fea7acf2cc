"""A hostile corpus for the audit console (``/audit/...``), on a classification and a
regression bundle with odd feature names: odd queries on every page, odd forms for the
probe and the sign-in, forged and misplaced cookies, cross-site posts, odd methods and
paths. Each case gets the one answer it deserves: a 4xx naming the field at fault (on the
page, or in JSON), or the page asked for; never a 5xx."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.core.access import CONSOLE_COOKIE
from tests.support.hostile import API, AUDITOR, AUTH, Case, b64, check, q, seeded, send
from tests.support.hostile import Seeded as S

FORM = "application/x-www-form-urlencoded"
PAGES = ("/audit", "/audit/timeline", "/audit/timeline.json", "/audit/performance")


@pytest.fixture(scope="module", params=["odd_bundle", "odd_regression"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S]:
    store, trained = request.getfixturevalue(request.param)
    with seeded(store, trained, tmp_path_factory.mktemp("console-hostile"), "c") as s:
        yield s


def probe_form(s: S) -> dict[str, str]:
    return {f"f:{k}": v for k, v in s.row.items()}


def form(fields: dict[str, str], **headers: str) -> dict[str, Any]:
    return {
        "method": "POST",
        "body": q(**fields).encode(),
        "headers": {"Content-Type": FORM, **headers},
    }


def probe(s: S, status: int, named: str | None, **change: str) -> Case:
    return Case("/audit/probe", status, named, **form({**probe_form(s), **change}))


def login(status: int, named: str | None, body: bytes, **headers: str) -> Case:
    headers = {"Authorization": "", "Content-Type": FORM, **headers}
    return Case("/audit/login", status, named, "POST", headers, body)


def cookie(target: str, value: str, status: int, named: str | None) -> Case:
    return Case(
        target, status, named, headers={"Authorization": "", "Cookie": f"{CONSOLE_COOKIE}={value}"}
    )


def session_probe(s: S, status: int, **headers: str) -> Case:
    """The probe posted by a browser signed in with the auditor's cookie, from ``headers``'
    site; another site's is refused naming the Origin header."""
    signed_in = {"Authorization": "", "Cookie": f"{CONSOLE_COOKIE}={AUDITOR}", **headers}
    named = "header Origin" if status == 403 else None
    return Case("/audit/probe", status, named, **form(probe_form(s), **signed_in))


CASES: dict[str, Callable[[S], Case]] = {}
# -- every filtered page: the same odd filters
for page in PAGES:
    p = page + "?"
    CASES |= {
        f"{page}-plain": lambda s, p=p: Case(p, 200),
        f"{page}-since-junk": lambda s, p=p: Case(p + "since=yesterday", 422, "since"),
        f"{page}-since-nan": lambda s, p=p: Case(p + "since=NaN", 422, "since"),
        f"{page}-since-1e309": lambda s, p=p: Case(p + "since=1e309", 422, "since"),
        f"{page}-since-null": lambda s, p=p: Case(p + "since=2020-01-01%00", 422, "since"),
        f"{page}-since-overflow": lambda s, p=p: Case(
            p + q(since="0001-01-01T00:00+14:00"), 422, "since"
        ),
        f"{page}-since-blank": lambda s, p=p: Case(p + "since=%20%20", 200),
        f"{page}-until-junk": lambda s, p=p: Case(p + "until=-1", 422, "until"),
        f"{page}-since-equals-until": lambda s, p=p: Case(
            p + q(since="2020-01-01", until="2020-01-01"), 422, "until"
        ),
        f"{page}-since-after-until": lambda s, p=p: Case(
            p + q(since="2030-01-01", until="2020-01-01"), 422, "until"
        ),
        f"{page}-window": lambda s, p=p: Case(p + q(since="2000-01-01", until="2100-01-01"), 200),
        f"{page}-expert-unknown": lambda s, p=p: Case(p + "expert=nobody", 422, "expert"),
        f"{page}-expert-null": lambda s, p=p: Case(p + "expert=%00", 422, "expert"),
        f"{page}-expert-known": lambda s, p=p: Case(p + q(expert=s.experts[0]), 200),
        f"{page}-version-traversal": lambda s, p=p: Case(
            p + q(version="../../etc/passwd"), 422, "version"
        ),
        f"{page}-version-null": lambda s, p=p: Case(p + "version=v%00", 422, "version"),
        f"{page}-version-long": lambda s, p=p: Case(p + "version=" + "v" * 300, 422, "version"),
        f"{page}-version-unicode": lambda s, p=p: Case(p + q(version="v\u00e9"), 422, "version"),
        f"{page}-version-unknown": lambda s, p=p: Case(p + "version=v2", 200),
        f"{page}-repeated": lambda s, p=p: Case(
            p + "since=2020-01-01&since=2021-01-01", 422, "since"
        ),
        f"{page}-unknown": lambda s, p=p: Case(p + "limit=5", 422, "limit"),
        f"{page}-unknown-null-name": lambda s, p=p: Case(p + "%00=1", 422, "\x00"),
        f"{page}-many": lambda s, p=p: Case(
            p + "&".join(f"p{i}=1" for i in range(1200)), 422, "p0"
        ),
        f"{page}-bad-utf8": lambda s, p=p: Case(p + "since=%ff%fe", 422, "since"),
        f"{page}-huge-value": lambda s, p=p: Case(p + "since=" + "9" * 30000, 422, "since"),
        f"{page}-request-id": lambda s, p=p: Case(p + "request_id=c-0", 422, "request_id"),
    }
CASES |= {
    # -- the decisions page's cursor
    "cursor-valid": lambda s: Case("/audit?cursor=" + s.cursor, 200),
    "cursor-empty": lambda s: Case("/audit?cursor=", 200),  # the form's empty field: no filter
    "cursor-junk": lambda s: Case("/audit?cursor=%21%21", 422, "cursor"),
    "cursor-truncated": lambda s: Case("/audit?cursor=" + s.cursor[:-2], 422, "cursor"),
    "cursor-forged": lambda s: Case("/audit?cursor=" + b64("5.5"), 200),
    "cursor-overflow": lambda s: Case("/audit?cursor=" + b64(f"{2**64}.1"), 422, "cursor"),
    "cursor-binary": lambda s: Case("/audit?cursor=__8A", 422, "cursor"),
    "cursor-twice": lambda s: Case(f"/audit?cursor={s.cursor}&cursor={s.cursor}", 422, "cursor"),
    "cursor-on-timeline": lambda s: Case("/audit/timeline?cursor=" + s.cursor, 422, "cursor"),
    # -- the record page
    "record-found": lambda s: Case("/audit/record?request_id=c-1", 200),
    "record-missing-id": lambda s: Case("/audit/record", 422, "request_id"),
    "record-empty-id": lambda s: Case("/audit/record?request_id=", 422, "request_id"),
    "record-absent": lambda s: Case("/audit/record?request_id=never", 404, "request_id"),
    "record-newline": lambda s: Case("/audit/record?request_id=c-1%0A", 422, "request_id"),
    "record-null": lambda s: Case("/audit/record?request_id=c-1%00", 422, "request_id"),
    "record-long": lambda s: Case("/audit/record?request_id=" + "r" * 129, 422, "request_id"),
    "record-script": lambda s: Case(
        "/audit/record?" + q(request_id="<script>alert(1)</script>"), 422, "request_id"
    ),
    "record-sql": lambda s: Case("/audit/record?" + q(request_id="' OR 1=1 --"), 422, "request_id"),
    "record-twice": lambda s: Case(
        "/audit/record?request_id=c-1&request_id=c-2", 422, "request_id"
    ),
    "record-extra": lambda s: Case("/audit/record?request_id=c-1&since=2020-01-01", 422, "since"),
    # -- pages that take no query
    "probe-page-query": lambda s: Case("/audit/probe?x=1", 422, "x"),
    "bundle-page-query": lambda s: Case("/audit/bundle?version=x", 422, "version"),
    "login-page-query": lambda s: Case("/audit/login?next=/evil", 422, "next"),
    "bundle-page": lambda s: Case("/audit/bundle", 200),
    # -- the probe form
    "probe-valid": lambda s: probe(s, 200, None),
    "probe-numeric-missing": lambda s: probe(s, 200, None, **{f"f:{s.numeric}": ""}),
    "probe-numeric-nan-text": lambda s: probe(s, 200, None, **{f"f:{s.numeric}": "NaN"}),
    "probe-numeric-inf": lambda s: probe(s, 422, s.numeric, **{f"f:{s.numeric}": "inf"}),
    "probe-numeric-minus-inf": lambda s: probe(s, 422, s.numeric, **{f"f:{s.numeric}": "-inf"}),
    "probe-numeric-1e39": lambda s: probe(s, 422, s.numeric, **{f"f:{s.numeric}": "1e39"}),
    "probe-numeric-minus-1e39": lambda s: probe(s, 422, s.numeric, **{f"f:{s.numeric}": "-1e39"}),
    "probe-numeric-1e309": lambda s: probe(s, 422, s.numeric, **{f"f:{s.numeric}": "1e309"}),
    "probe-numeric-words": lambda s: probe(s, 422, s.numeric, **{f"f:{s.numeric}": "ten"}),
    "probe-numeric-null": lambda s: probe(s, 422, s.numeric, **{f"f:{s.numeric}": "1\x00"}),
    "probe-numeric-long": lambda s: probe(s, 422, s.numeric, **{f"f:{s.numeric}": "9" * 5000}),
    "probe-category-unknown": lambda s: probe(s, 422, s.category, **{f"f:{s.category}": "zzz"}),
    "probe-category-null": lambda s: probe(s, 422, s.category, **{f"f:{s.category}": "\x00"}),
    "probe-sweep": lambda s: probe(s, 200, None, sweep=s.numeric),
    "probe-sweep-unknown": lambda s: probe(s, 422, "sweep", sweep="nobody"),
    "probe-sweep-category": lambda s: probe(s, 422, "sweep", sweep=s.category),
    "probe-unknown-field": lambda s: probe(s, 422, "f:nobody", **{"f:nobody": "1"}),
    "probe-field-without-prefix": lambda s: probe(s, 422, s.numeric, **{s.numeric: "1"}),
    "probe-twice": lambda s: Case(
        "/audit/probe",
        422,
        f"f:{s.numeric}",
        "POST",
        {"Content-Type": FORM},
        (q(**probe_form(s)) + "&" + q(**{f"f:{s.numeric}": "1"})).encode(),
    ),
    "probe-empty-body": lambda s: Case(
        "/audit/probe", 200, None, "POST", {"Content-Type": FORM}, b""
    ),
    "probe-json": lambda s: Case(
        "/audit/probe",
        415,
        "header Content-Type",
        "POST",
        {"Content-Type": "application/json"},
        b"{}",
    ),
    "probe-multipart": lambda s: Case(
        "/audit/probe",
        415,
        "header Content-Type",
        "POST",
        {"Content-Type": "multipart/form-data; boundary=x"},
        b"--x--",
    ),
    "probe-no-content-type": lambda s: Case(
        "/audit/probe", 200, None, "POST", {}, q(**probe_form(s)).encode()
    ),
    "probe-charset": lambda s: Case(
        "/audit/probe",
        200,
        None,
        "POST",
        {"Content-Type": FORM + "; charset=utf-8"},
        q(**probe_form(s)).encode(),
    ),
    "probe-not-utf8": lambda s: Case(
        "/audit/probe", 422, "body", "POST", {"Content-Type": FORM}, b"sweep=%ff%fe"
    ),
    "probe-raw-latin1": lambda s: Case(
        "/audit/probe", 422, "body", "POST", {"Content-Type": FORM}, b"sweep=\xe9"
    ),
    "probe-gzip": lambda s: Case(
        "/audit/probe",
        200,
        None,
        "POST",
        {"Content-Type": FORM, "Content-Encoding": "gzip"},
        gzip.compress(q(**probe_form(s)).encode()),
    ),
    "probe-bad-gzip": lambda s: Case(
        "/audit/probe",
        400,
        "body",
        "POST",
        {"Content-Type": FORM, "Content-Encoding": "gzip"},
        b"not gzip",
    ),
    "probe-brotli": lambda s: Case(
        "/audit/probe",
        415,
        "header Content-Encoding",
        "POST",
        {"Content-Type": FORM, "Content-Encoding": "br"},
        b"x",
    ),
    "probe-no-key": lambda s: Case(
        "/audit/probe", 401, "header Authorization", **form(probe_form(s), Authorization="")
    ),
    # -- the sign-in form (it needs no key)
    "login-valid": lambda s: login(303, None, f"key={AUDITOR}".encode()),
    "login-with-username": lambda s: login(303, None, f"username=auditor&key={AUDITOR}".encode()),
    "login-no-key": lambda s: login(401, "key", b"username=auditor"),
    "login-empty-key": lambda s: login(401, "key", b"key="),
    "login-blank-key": lambda s: login(401, "key", b"key=%20%20"),
    "login-wrong-key": lambda s: login(401, "key", b"key=guess"),
    "login-api-key": lambda s: login(403, "key", f"key={API}".encode()),
    "login-null-key": lambda s: login(401, "key", b"key=%00"),
    "login-long-key": lambda s: login(401, "key", b"key=" + b"k" * 60000),
    "login-key-twice": lambda s: login(422, "key", f"key={AUDITOR}&key=guess".encode()),
    "login-unknown-field": lambda s: login(422, "next", f"key={AUDITOR}&next=/x".encode()),
    "login-not-utf8": lambda s: login(422, "body", b"key=%ff"),
    "login-json": lambda s: Case(
        "/audit/login",
        415,
        "header Content-Type",
        "POST",
        {"Authorization": "", "Content-Type": "application/json"},
        f'{{"key": "{AUDITOR}"}}'.encode(),
    ),
    "login-cross-site": lambda s: login(
        403, "header Origin", f"key={AUDITOR}".encode(), Origin="https://evil.example"
    ),
    "login-null-origin": lambda s: login(
        403, "header Origin", f"key={AUDITOR}".encode(), Origin="null"
    ),
    "login-bad-origin": lambda s: login(
        403, "header Origin", f"key={AUDITOR}".encode(), Origin="http://[::1"
    ),
    "login-cross-referer": lambda s: login(
        403, "header Origin", f"key={AUDITOR}".encode(), Referer="https://evil.example/a"
    ),
    # -- cookies
    "cookie-valid": lambda s: cookie("/audit", AUDITOR, 200, None),
    "cookie-forged": lambda s: cookie("/audit", "forged-session-0123", 401, "header Authorization"),
    "cookie-signed-looking": lambda s: cookie(
        "/audit", "eyJrZXkiOiJ4In0.c2lnbmF0dXJl", 401, "header Authorization"
    ),
    "cookie-api-key": lambda s: cookie("/audit", API, 403, "header Authorization"),
    "cookie-empty": lambda s: cookie("/audit", "", 401, "header Authorization"),
    "cookie-bad-escape": lambda s: cookie("/audit", "%zz%", 401, "header Authorization"),
    "cookie-quoted": lambda s: cookie("/audit", f'"{AUDITOR}"', 401, "header Authorization"),
    "cookie-null": lambda s: cookie("/audit", "%00", 401, "header Authorization"),
    "cookie-long": lambda s: cookie("/audit", "c" * 7000, 401, "header Authorization"),
    "cookie-on-weights": lambda s: cookie("/weights", AUDITOR, 401, "header Authorization"),
    "cookie-on-predict": lambda s: Case(
        "/predict",
        401,
        "header Authorization",
        "POST",
        {
            "Authorization": "",
            "Content-Type": "application/json",
            "Cookie": f"{CONSOLE_COOKIE}={API}",
        },
        b'{"instances": []}',
    ),
    "cookie-other-name": lambda s: Case(
        "/audit",
        401,
        "header Authorization",
        headers={"Authorization": "", "Cookie": f"session={AUDITOR}"},
    ),
    "cookie-twice-bad-first": lambda s: Case(
        "/audit",
        401,
        "header Authorization",
        headers={
            "Authorization": "",
            "Cookie": f"{CONSOLE_COOKIE}=bad; {CONSOLE_COOKIE}={AUDITOR}",
        },
    ),
    "cookie-and-bad-header": lambda s: Case(
        "/audit",
        401,
        "header Authorization",
        headers={"Authorization": "Bearer wrong", "Cookie": f"{CONSOLE_COOKIE}={AUDITOR}"},
    ),
    "cookie-browser-gets-sign-in": lambda s: Case(
        "/audit",
        401,
        None,
        headers={"Authorization": "", "Accept": "text/html", "Cookie": f"{CONSOLE_COOKIE}=x"},
    ),
    # -- cross-site posts with a valid session
    "probe-cross-site": lambda s: session_probe(s, 403, Origin="https://evil.example"),
    "probe-cross-referer": lambda s: session_probe(s, 403, Referer="http://evil.example/"),
    "probe-same-site": lambda s: session_probe(s, 200, Origin=s.app.base_url),
    "logout-cross-site": lambda s: Case(
        "/audit/logout", 403, "header Origin", "POST", {"Origin": "https://evil.example"}, b""
    ),
    "logout": lambda s: Case("/audit/logout", 303, None, "POST", {}, b""),
    # -- methods
    "put-audit": lambda s: Case("/audit", 405, "method", "PUT", {}, b"x"),
    "post-audit": lambda s: Case("/audit", 405, "method", "POST", {"Content-Type": FORM}, b""),
    "delete-record": lambda s: Case("/audit/record?request_id=c-1", 405, "method", "DELETE"),
    "post-bundle": lambda s: Case("/audit/bundle", 405, "method", "POST", {}, b""),
    "patch-login": lambda s: Case("/audit/login", 405, "method", "PATCH", {}, b""),
    "get-logout": lambda s: Case("/audit/logout", 405, "method"),
    "options-probe": lambda s: Case("/audit/probe", 405, "method", "OPTIONS"),
    "post-timeline-json": lambda s: Case("/audit/timeline.json", 405, "method", "POST", {}, b""),
    # -- paths
    "static-css": lambda s: Case("/audit/static/console.css", 200),
    "static-absent": lambda s: Case("/audit/static/absent.css", 404, "path"),
    "static-dot-dot": lambda s: Case("/audit/static/..", 404, "path"),
    "static-encoded-dot-dot": lambda s: Case("/audit/static/%2e%2e", 404, "path"),
    "static-traversal": lambda s: Case("/audit/static/../bundle", 404, "path"),
    "static-encoded-slash": lambda s: Case("/audit/static/..%2Fpages.py", 404, "path"),
    "static-python": lambda s: Case("/audit/static/..%2F..%2Fmain.py", 404, "path"),
    "static-null": lambda s: Case("/audit/static/console.css%00", 400, "path"),
    "static-empty": lambda s: Case("/audit/static/", 404, "path"),
    "audit-trailing-slash": lambda s: Case("/audit/", 307),
    "record-trailing-slash": lambda s: Case("/audit/record/", 307),
    "audit-upper": lambda s: Case("/AUDIT", 404, "path"),
    "audit-newline": lambda s: Case("/audit%0A", 400, "path"),
    "audit-tab": lambda s: Case("/audit%09", 400, "path"),
    "audit-double-slash": lambda s: Case("//audit", 404, "path"),
    "audit-unknown-page": lambda s: Case("/audit/admin", 404, "path"),
    "login-dot-segment": lambda s: Case("/audit/login/../bundle", 404, "path"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_console_answers_each_hostile_request_as_it_deserves(served: S, name: str) -> None:
    case = CASES[name](served)
    check(send(served.app.base_url, case, AUTH), case)


def test_the_corpus_is_broad_and_the_console_serves_on(served: S) -> None:
    assert len(CASES) >= 200
    assert served.app.get("/readyz").status_code == 200
    assert served.app.get("/audit", headers=AUTH).status_code == 200
