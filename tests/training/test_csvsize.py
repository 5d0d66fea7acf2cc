"""A file too large to read is refused up front with the way out; ``--sample-rows`` reads
a seeded random sample of the file's rows, exactly as they are in the file."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from training.cli import main
from training.csvfile import read_text_frame
from training.csvsize import READ_FACTOR
from training.errors import CsvError, ParameterError


@pytest.fixture()
def csv_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    n = 3_000
    frame = pd.DataFrame(
        {
            "a": rng.normal(size=n).round(3),
            "note": rng.choice(["plain", "has, comma", 'two\nlines "quoted"'], n),
            "y": rng.integers(0, 2, n),
        }
    )
    path = tmp_path / "data.csv"
    frame.to_csv(path, index=False)
    return path


def test_a_file_beyond_the_limit_is_refused_with_the_ways_out(csv_file: Path) -> None:
    limit = csv_file.stat().st_size * READ_FACTOR // 2
    with pytest.raises(CsvError, match=r"limit \(memory_limit\).*--sample-rows N.*--scheduler"):
        read_text_frame(csv_file, memory_limit=limit)
    frame, _ = read_text_frame(csv_file, memory_limit=limit * 2)
    assert len(frame) == 3_000


def test_a_sample_holds_the_files_rows_in_file_order(csv_file: Path) -> None:
    whole, _ = read_text_frame(csv_file)
    sample, delimiter = read_text_frame(csv_file, sample_rows=500, seed=4)
    assert delimiter == "," and len(sample) == 500
    assert sample.index.is_monotonic_increasing
    pd.testing.assert_frame_equal(sample, whole.loc[sample.index])
    again, _ = read_text_frame(csv_file, sample_rows=500, seed=4)
    assert again.index.equals(sample.index)
    other, _ = read_text_frame(csv_file, sample_rows=500, seed=5)
    assert not other.index.equals(sample.index)


def test_a_sample_larger_than_the_file_is_the_file(csv_file: Path) -> None:
    whole, _ = read_text_frame(csv_file)
    pd.testing.assert_frame_equal(read_text_frame(csv_file, sample_rows=10_000)[0], whole)


@pytest.mark.parametrize("value", [0, -3])
def test_a_bad_sample_size_is_refused_by_name(csv_file: Path, value: int) -> None:
    with pytest.raises(ParameterError, match="--sample-rows"):
        read_text_frame(csv_file, sample_rows=value)


def test_train_reads_a_sample(csv_file: Path) -> None:
    out = io.StringIO()
    argv = ["train", "--csv", str(csv_file), "--target", "y", "--task", "classification"]
    with redirect_stdout(out):
        code = main([*argv, "--name", "s", "--sample-rows", "1000", "--dry-run", "--quiet"])
    assert code == 0
    assert "800 training rows, 200 test rows" in out.getvalue()
