"""A hostile corpus for ``GET /weights``, on a classification and a regression bundle whose
feature names hold spaces, unicode, ``%``, ``&``, ``?`` and the words ``limit`` and
``instances``: odd numbers, times, cursors, ids, repeated and unknown parameters, odd
headers, methods and paths. Each case gets the one answer it deserves: a 4xx naming the
field at fault, or the page it asked for; never a 5xx. The server serves on afterwards."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator

import pytest

from tests.support.hostile import API, AUDITOR, AUTH, Case, b64, check, q, seeded, send
from tests.support.hostile import Seeded as S


@pytest.fixture(scope="module", params=["odd_bundle", "odd_regression"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S]:
    store, trained = request.getfixturevalue(request.param)
    with seeded(store, trained, tmp_path_factory.mktemp("hostile"), "h") as s:
        yield s


W = "/weights?"
# Each case from the served bundle; the id says what it tries.
CASES: dict[str, Callable[[S], Case]] = {
    # -- limit
    "limit-empty": lambda s: Case(W + "limit=", 422, "limit"),
    "limit-zero": lambda s: Case(W + "limit=0", 422, "limit"),
    "limit-negative": lambda s: Case(W + "limit=-1", 422, "limit"),
    "limit-over": lambda s: Case(W + "limit=1001", 422, "limit"),
    "limit-max": lambda s: Case(W + "limit=1000", 200),
    "limit-float": lambda s: Case(W + "limit=1.5", 422, "limit"),
    "limit-exponent": lambda s: Case(W + "limit=1e3", 422, "limit"),
    "limit-nan": lambda s: Case(W + "limit=NaN", 422, "limit"),
    "limit-inf": lambda s: Case(W + "limit=inf", 422, "limit"),
    "limit-minus-inf": lambda s: Case(W + "limit=-inf", 422, "limit"),
    "limit-1e309": lambda s: Case(W + "limit=1e309", 422, "limit"),
    "limit-huge-int": lambda s: Case(W + "limit=" + "9" * 400, 422, "limit"),
    "limit-5000-digits": lambda s: Case(W + "limit=" + "9" * 5000, 422, "limit"),
    "limit-plus": lambda s: Case(W + "limit=%2B5", 422, "limit"),
    "limit-spaces": lambda s: Case(W + "limit=%205%20", 422, "limit"),
    "limit-hex": lambda s: Case(W + "limit=0x10", 422, "limit"),
    "limit-underscore": lambda s: Case(W + "limit=1_0", 422, "limit"),
    "limit-arabic-digit": lambda s: Case(W + q(limit="\u0665"), 422, "limit"),
    "limit-superscript": lambda s: Case(W + q(limit="\u00b2"), 422, "limit"),
    "limit-fullwidth": lambda s: Case(W + q(limit="\uff15"), 422, "limit"),
    "limit-null-byte": lambda s: Case(W + "limit=5%00", 422, "limit"),
    "limit-twice": lambda s: Case(W + "limit=5&limit=6", 422, "limit"),
    "limit-twice-same": lambda s: Case(W + "limit=5&limit=5", 422, "limit"),
    "limit-bad-utf8": lambda s: Case(W + "limit=%ff%fe", 422, "limit"),
    "limit-emoji": lambda s: Case(W + q(limit="\U0001f600"), 422, "limit"),
    # -- since / until
    "since-empty": lambda s: Case(W + "since=", 422, "since"),
    "since-nan": lambda s: Case(W + "since=NaN", 422, "since"),
    "since-number": lambda s: Case(W + "since=1700000000", 422, "since"),
    "since-1e309": lambda s: Case(W + "since=1e309", 422, "since"),
    "since-negative": lambda s: Case(W + "since=-1", 422, "since"),
    "since-month-13": lambda s: Case(W + "since=2020-13-01", 422, "since"),
    "since-feb-30": lambda s: Case(W + "since=2020-02-30", 422, "since"),
    "since-year-0": lambda s: Case(W + "since=0000-01-01", 422, "since"),
    "since-year-10000": lambda s: Case(W + "since=10000-01-01", 422, "since"),
    "since-hour-25": lambda s: Case(W + "since=2020-01-01T25:00", 422, "since"),
    "since-offset-25h": lambda s: Case(W + q(since="2020-01-01T00:00+25:00"), 422, "since"),
    "since-year-1-east": lambda s: Case(W + q(since="0001-01-01T00:00+14:00"), 422, "since"),
    "since-year-9999-west": lambda s: Case(
        W + q(since="9999-12-31T23:59:59.999999-14:00"), 422, "since"
    ),
    "since-year-1-utc": lambda s: Case(W + q(since="0001-01-01T00:00Z"), 200),
    "since-z": lambda s: Case(W + q(since="2020-01-01T00:00Z"), 200),
    "since-space": lambda s: Case(W + q(since="2020-01-01 00:00"), 200),
    "since-null-byte": lambda s: Case(W + "since=2020-01-01%00", 422, "since"),
    "since-unicode-digits": lambda s: Case(W + q(since="\uff12020-01-01"), 422, "since"),
    "since-long": lambda s: Case(W + "since=" + "2" * 5000, 422, "since"),
    "since-twice": lambda s: Case(W + "since=2020-01-01&since=2021-01-01", 422, "since"),
    "since-equals-until": lambda s: Case(
        W + q(since="2020-01-01", until="2020-01-01"), 422, "until"
    ),
    "since-after-until": lambda s: Case(
        W + q(since="2030-01-01", until="2020-01-01"), 422, "until"
    ),
    "since-equal-in-two-zones": lambda s: Case(
        W + q(since="2020-01-01T01:00+01:00", until="2020-01-01T00:00Z"), 422, "until"
    ),
    "until-bad": lambda s: Case(W + "until=yesterday", 422, "until"),
    "until-far-future": lambda s: Case(W + q(until="9999-12-31T23:59:59"), 200),
    "window-one-microsecond": lambda s: Case(
        W + q(since="2020-01-01T00:00:00", until="2020-01-01T00:00:00.000001"), 200
    ),
    # -- expert
    "expert-empty": lambda s: Case(W + "expert=", 422, "expert"),
    "expert-unknown": lambda s: Case(W + "expert=nobody", 422, "expert"),
    "expert-null-byte": lambda s: Case(W + "expert=%00", 422, "expert"),
    "expert-case": lambda s: Case(W + q(expert=s.experts[0].upper() + "X"), 422, "expert"),
    "expert-padded": lambda s: Case(W + q(expert=f" {s.experts[0]}"), 422, "expert"),
    "expert-long": lambda s: Case(W + "expert=" + "x" * 8000, 422, "expert"),
    "expert-twice": lambda s: Case(
        W + q(expert=s.experts[0]) + "&" + q(expert=s.experts[0]), 422, "expert"
    ),
    "expert-known": lambda s: Case(W + q(expert=s.experts[0]), 200),
    "expert-with-window": lambda s: Case(
        W + q(expert=s.experts[-1], since="2000-01-01", limit="3"), 200
    ),
    # -- cursor
    "cursor-empty": lambda s: Case(W + "cursor=", 422, "cursor"),
    "cursor-junk": lambda s: Case(W + "cursor=abc", 422, "cursor"),
    "cursor-padding-only": lambda s: Case(W + "cursor====", 422, "cursor"),
    "cursor-truncated": lambda s: Case(W + "cursor=" + s.cursor[:-3], 422, "cursor"),
    "cursor-one-char-short": lambda s: Case(W + "cursor=" + s.cursor[:-1], 422, "cursor"),
    "cursor-valid": lambda s: Case(W + "cursor=" + s.cursor, 200),
    "cursor-valid-padded": lambda s: Case(
        W + "cursor=" + s.cursor + "=" * (-len(s.cursor) % 4), 200
    ),
    "cursor-forged-old": lambda s: Case(W + "cursor=" + b64("123.456"), 200),
    "cursor-negative": lambda s: Case(W + "cursor=" + b64("-1.-1"), 422, "cursor"),
    "cursor-int64-max": lambda s: Case(W + "cursor=" + b64(f"{2**63 - 1}.{2**63 - 1}"), 200),
    "cursor-int64-over": lambda s: Case(W + "cursor=" + b64(f"{2**63}.1"), 422, "cursor"),
    "cursor-20-digits": lambda s: Case(W + "cursor=" + b64("9" * 20 + ".1"), 422, "cursor"),
    "cursor-float": lambda s: Case(W + "cursor=" + b64("1.5e3.7"), 422, "cursor"),
    "cursor-nan": lambda s: Case(W + "cursor=" + b64("nan.nan"), 422, "cursor"),
    "cursor-newline": lambda s: Case(W + "cursor=" + b64("1.1\n"), 422, "cursor"),
    "cursor-unicode-digits": lambda s: Case(W + "cursor=" + b64("\u0661.\u0661"), 422, "cursor"),
    "cursor-binary": lambda s: Case(
        W + "cursor=" + base64.urlsafe_b64encode(b"\xff\xfe\x00").decode(), 422, "cursor"
    ),
    "cursor-standard-alphabet": lambda s: Case(W + "cursor=%2B%2F%2B%2F", 422, "cursor"),
    "cursor-null-byte": lambda s: Case(W + "cursor=%00", 422, "cursor"),
    "cursor-long": lambda s: Case(W + "cursor=" + "A" * 20000, 422, "cursor"),
    "cursor-twice": lambda s: Case(W + f"cursor={s.cursor}&cursor={s.cursor}", 422, "cursor"),
    "cursor-with-request-id": lambda s: Case(
        W + q(cursor=s.cursor, request_id="h-0"), 422, "cursor"
    ),
    # -- request_id
    "rid-empty": lambda s: Case(W + "request_id=", 422, "request_id"),
    "rid-null-byte": lambda s: Case(W + "request_id=%00", 422, "request_id"),
    "rid-newline": lambda s: Case(W + "request_id=h-0%0A", 422, "request_id"),
    "rid-129": lambda s: Case(W + "request_id=" + "a" * 129, 422, "request_id"),
    "rid-128-absent": lambda s: Case(W + "request_id=" + "a" * 128, 404, "request_id"),
    "rid-space": lambda s: Case(W + "request_id=h-0%20", 422, "request_id"),
    "rid-unicode": lambda s: Case(W + q(request_id="h-\u00e9"), 422, "request_id"),
    "rid-sql": lambda s: Case(W + q(request_id="x' OR '1'='1"), 422, "request_id"),
    "rid-wildcard": lambda s: Case(W + q(request_id="h-%"), 422, "request_id"),
    "rid-absent": lambda s: Case(W + "request_id=never-served", 404, "request_id"),
    "rid-found": lambda s: Case(W + q(request_id="h-0"), 200),
    "rid-twice": lambda s: Case(W + f"request_id={'h-0'}&request_id={'h-0'}", 422, "request_id"),
    "rid-with-limit": lambda s: Case(W + q(request_id="h-0", limit="5"), 422, "limit"),
    "rid-with-since": lambda s: Case(W + q(request_id="h-0", since="2020-01-01"), 422, "since"),
    "rid-with-unknown": lambda s: Case(W + q(request_id="h-0", colour="red"), 422, "colour"),
    # -- parameters no mode takes
    "unknown": lambda s: Case(W + "colour=red", 422, "colour"),
    "unknown-null-name": lambda s: Case(W + "%00=1", 422, "\x00"),
    "unknown-empty-name": lambda s: Case(W + "=1", 422, ""),
    "unknown-long-name": lambda s: Case(W + "n" * 5000 + "=1", 422, "n" * 5000),
    "unknown-many": lambda s: Case(W + "&".join(f"p{i}=1" for i in range(1500)), 422, "p0"),
    "ampersands-only": lambda s: Case(W + "&&&", 200),
    "question-marks": lambda s: Case(W + "?limit=5", 422, "?limit"),
    "semicolon-separator": lambda s: Case(W + "limit=5;since=2020-01-01", 422, "limit"),
    "plus-as-space": lambda s: Case(W + "limit=+5", 422, "limit"),
    "fragment-like": lambda s: Case(W + "limit=5%23x", 422, "limit"),
    # -- the gate probe: every feature named
    "probe-valid": lambda s: Case(W + q(**s.row), 200),
    # "NaN" as text is one of the bundle's missing-value spellings, as a CSV reader writes it.
    "probe-nan-text": lambda s: Case(W + q(**{**s.row, s.numeric: "NaN"}), 200),
    "probe-inf": lambda s: Case(W + q(**{**s.row, s.numeric: "inf"}), 422, s.numeric),
    "probe-minus-inf": lambda s: Case(W + q(**{**s.row, s.numeric: "-Infinity"}), 422, s.numeric),
    "probe-1e39": lambda s: Case(W + q(**{**s.row, s.numeric: "1e39"}), 422, s.numeric),
    "probe-minus-1e39": lambda s: Case(W + q(**{**s.row, s.numeric: "-1e39"}), 422, s.numeric),
    "probe-1e309": lambda s: Case(W + q(**{**s.row, s.numeric: "1e309"}), 422, s.numeric),
    "probe-huge-int": lambda s: Case(W + q(**{**s.row, s.numeric: "9" * 60}), 422, s.numeric),
    "probe-words": lambda s: Case(W + q(**{**s.row, s.numeric: "twelve"}), 422, s.numeric),
    "probe-null-byte": lambda s: Case(W + q(**{**s.row, s.numeric: "1\x00"}), 422, s.numeric),
    "probe-missing-value": lambda s: Case(W + q(**{**s.row, s.numeric: ""}), 200),
    "probe-unknown-category": lambda s: Case(
        W + q(**{**s.row, s.category: "no such category"}), 422, s.category
    ),
    "probe-category-null-byte": lambda s: Case(
        W + q(**{**s.row, s.category: "\x00"}), 422, s.category
    ),
    "probe-feature-twice": lambda s: Case(
        W + q(**s.row) + "&" + q(**{s.numeric: "1"}), 422, s.numeric
    ),
    "probe-extra-parameter": lambda s: Case(W + q(**s.row, colour="red"), 422, "colour"),
    "probe-with-request-id": lambda s: Case(W + q(**s.row, request_id="h-0"), 422, "request_id"),
    "probe-one-feature-short": lambda s: Case(
        W + q(**{k: v for k, v in list(s.row.items())[1:]}), 422, next(iter(s.row))
    ),
    "probe-one-feature": lambda s: Case(W + q(**{s.numeric: "1"}), 422, None),
    # -- headers
    "no-key": lambda s: Case(
        W + "limit=1", 401, "header Authorization", headers={"Authorization": ""}
    ),
    "bearer-empty": lambda s: Case(
        W + "limit=1", 401, "header Authorization", headers={"Authorization": "Bearer "}
    ),
    "bearer-lower-case": lambda s: Case(
        W + "limit=1", 200, headers={"Authorization": f"bearer {AUDITOR}"}
    ),
    "basic-scheme": lambda s: Case(
        W + "limit=1",
        401,
        "header Authorization",
        headers={"Authorization": f"Basic {AUDITOR}"},
    ),
    "api-key-role": lambda s: Case(
        W + "limit=1", 403, "header Authorization", headers={"Authorization": f"Bearer {API}"}
    ),
    "key-long": lambda s: Case(
        W + "limit=1",
        401,
        "header Authorization",
        headers={"Authorization": "Bearer " + "k" * 8000},
    ),
    "key-latin1": lambda s: Case(
        W + "limit=1", 401, "header Authorization", headers={"Authorization": "Bearer cl\xe9"}
    ),
    "key-in-x-api-key": lambda s: Case(
        W + "limit=1", 200, headers={"Authorization": "", "X-API-Key": AUDITOR}
    ),
    "key-in-cookie": lambda s: Case(
        W + "limit=1",
        401,
        "header Authorization",
        headers={"Authorization": "", "Cookie": f"iabma_auditor={AUDITOR}"},
    ),
    "key-in-query": lambda s: Case(W + q(limit="1", key=AUDITOR), 422, "key"),
    "request-id-bad": lambda s: Case(
        W + "limit=1", 400, "header X-Request-ID", headers={"X-Request-ID": "a b"}
    ),
    "request-id-long": lambda s: Case(
        W + "limit=1", 400, "header X-Request-ID", headers={"X-Request-ID": "a" * 129}
    ),
    "accept-odd": lambda s: Case(W + "limit=1", 200, headers={"Accept": "image/png"}),
    "content-type-odd": lambda s: Case(
        W + "limit=1", 200, headers={"Content-Type": "text/x-nonsense"}
    ),
    "body-on-get": lambda s: Case(W + "limit=1", 200, body=b"limit=1000"),
    "encoding-odd": lambda s: Case(W + "limit=1", 200, headers={"Content-Encoding": "br"}),
    # -- methods and paths
    "post": lambda s: Case(W + "limit=1", 405, "method", method="POST", body=b"{}"),
    "put": lambda s: Case(W + "limit=1", 405, "method", method="PUT", body=b"{}"),
    "delete": lambda s: Case(W + "limit=1", 405, "method", method="DELETE"),
    "patch": lambda s: Case(W + "limit=1", 405, "method", method="PATCH"),
    "options": lambda s: Case(W + "limit=1", 405, "method", method="OPTIONS"),
    "head": lambda s: Case(W + "limit=1", 405, method="HEAD"),  # no body to name a field
    "trailing-slash": lambda s: Case("/weights/?limit=1", 307),
    "double-slash": lambda s: Case("//weights?limit=1", 404, "path"),
    "upper-case": lambda s: Case("/WEIGHTS?limit=1", 404, "path"),
    "semicolon": lambda s: Case("/weights;v=1?limit=1", 404, "path"),
    "encoded-newline": lambda s: Case("/weights%0A?limit=1", 400, "path"),
    "encoded-null": lambda s: Case("/weights%00?limit=1", 400, "path"),
    "dot-segment": lambda s: Case("/x/../weights?limit=1", 404, "path"),
    "encoded-letter": lambda s: Case("/%77eights?limit=1", 200),
}


@pytest.mark.parametrize("name", list(CASES))
def test_weights_answers_each_hostile_request_as_it_deserves(served: S, name: str) -> None:
    case = CASES[name](served)
    check(send(served.app.base_url, case, AUTH), case)


def test_the_corpus_is_broad(served: S) -> None:
    assert len(CASES) >= 150
    assert served.app.get("/readyz").status_code == 200
    r = served.app.get("/weights", params={"limit": "2"}, headers=AUTH)
    assert r.status_code == 200 and len(r.json()["records"]) == 2
