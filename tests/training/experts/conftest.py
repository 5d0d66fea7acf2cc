"""The team's model files (tests/support/team_files.py), written once per session."""

from __future__ import annotations

import pytest

from tests.support.team_files import TeamFiles, write_team_files


@pytest.fixture(scope="session")
def team(tmp_path_factory: pytest.TempPathFactory) -> TeamFiles:
    return write_team_files(tmp_path_factory.mktemp("team"))
