"""The request log line's timestamp, made from a cached second, reads as the real time;
every library's warnings are log lines of the configured format."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from app.core.logs import AccessLog, setup_logging
from app.settings import Settings


@pytest.fixture
def configured() -> Iterator[None]:
    top, ours = logging.getLogger(), logging.getLogger("iabma")
    before = (list(top.handlers), list(ours.handlers), ours.propagate, ours.level)
    yield
    top.handlers[:], ours.handlers[:] = before[0], before[1]
    ours.propagate, ours.level = before[2], before[3]


def test_a_library_error_with_its_traceback_is_one_json_line(
    configured: None, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging(Settings(log_format="json"))
    try:
        raise OSError("the connection is lost")
    except OSError:
        logging.getLogger("sqlalchemy.pool.impl.QueuePool").error(
            "Exception during reset or similar", exc_info=True
        )
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert line["level"] == "error" and line["logger"] == "sqlalchemy.pool.impl.QueuePool"
    assert "OSError: the connection is lost" in line["exc"]


def test_the_cached_timestamp_is_the_isoformat_of_now() -> None:
    log = AccessLog(Settings())
    for _ in range(3):  # the first call fills the cache, the next ones read it
        before = datetime.now(UTC).replace(microsecond=0)
        stamp = log.now()
        after = datetime.now(UTC)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", stamp)
        assert before <= datetime.fromisoformat(stamp) <= after
