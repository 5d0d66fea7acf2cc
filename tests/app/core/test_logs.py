"""The request log line's timestamp, made from a cached second, reads as the real time."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from app.core.logs import AccessLog
from app.settings import Settings


def test_the_cached_timestamp_is_the_isoformat_of_now() -> None:
    log = AccessLog(Settings())
    for _ in range(3):  # the first call fills the cache, the next ones read it
        before = datetime.now(UTC).replace(microsecond=0)
        stamp = log.now()
        after = datetime.now(UTC)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", stamp)
        assert before <= datetime.fromisoformat(stamp) <= after
