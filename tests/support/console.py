"""Shared by the console's tests: seeding a trail through /predict, and checking HTML."""

from __future__ import annotations

from typing import Any, Protocol

import html5lib
import httpx

from tests.support.bundles import Trained


class Client(Protocol):
    def post(self, url: str, **kw: Any) -> httpx.Response: ...


def seed(client: Client, trained: Trained, requests: int, headers: dict[str, str]) -> list[str]:
    """``requests`` audited predictions of 1-3 held-out rows each; their request ids."""
    ids = []
    for i in range(requests):
        rows = trained.instances(slice(i, i + 1 + i % 3))
        rid = f"seed-{i:04d}"
        r = client.post(
            "/predict", json={"instances": rows}, headers={**headers, "X-Request-ID": rid}
        )
        assert r.status_code == 200, r.text
        ids.append(rid)
    return ids


LANDMARKS = ("header", "nav", "main", "footer")
SVG = "{http://www.w3.org/2000/svg}"


def check_page(html: str) -> Any:
    """Parse ``html`` strictly (any parse error fails) and check its title and landmarks."""
    parser = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False)
    doc = parser.parse(html)
    title = doc.find("./head/title")
    assert title is not None and (title.text or "").strip(), "the page has no title"
    assert doc.get("lang") == "en"
    for tag in LANDMARKS:
        if tag == "nav" and doc.find(".//form[@id='login-form']") is not None:
            continue  # the sign-in page has nowhere to go yet
        assert doc.find(f".//{tag}") is not None, f"no <{tag}> landmark"
    assert len(doc.findall(".//h1")) == 1, "one <h1> per page"
    for table in doc.iter("table"):
        assert table.find("./caption") is not None, "every table has a caption"
        assert table.find("./thead/tr/th") is not None, "every table has column headers"
    for svg in doc.iter(SVG + "svg"):
        labelled = svg.get("aria-hidden") == "true" or svg.get("aria-label")
        assert labelled or svg.get("aria-labelledby"), "every drawing has a text alternative"
    return doc
