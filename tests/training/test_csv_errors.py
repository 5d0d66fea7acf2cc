"""Bad CSV files get one clear line before anything is fitted; fixable ones a warning.

Each case runs ``iabma train --csv`` as a user would (in process, for speed). Refused
files exit 2 with one line naming the file and the column; files we can read after a
change (rows without a target, an empty column, a column with thousands of levels, a
semicolon delimiter) go on, with a warning line naming the column. ``--dry-run`` stops
before fitting, which is all these cases need.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from training.cli import main


def write(tmp_path: Path, content: str | bytes, name: str = "data.csv") -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


def table(n: int = 80, **columns: object) -> str:
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=n).round(4), "b": rng.choice(["x", "y"], n)})
    df["y"] = (df["a"] > 0).map({True: "yes", False: "no"})
    for name, values in columns.items():
        df[name] = values
    return df.to_csv(index=False)


def train(capsys: pytest.CaptureFixture[str], path: str, *extra: str) -> tuple[int, str, str]:
    args = ["train", "--csv", path, "--name", "t", "--store", str(Path(path).parent / "store")]
    if "--target" not in extra:
        args += ["--target", "y"]
    if "--task" not in extra:
        args += ["--task", "classification"]
    code = main([*args, "--dry-run", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def assert_refused(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("iabma train: error: ") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


REFUSED = {
    "empty file": (b"", [], ["data.csv: is empty"]),
    "header only": ("a,b,y\n", [], ["data.csv: has a header but no data rows"]),
    "target missing": (table(), ["--target", "price"], ["--target 'price' is not a column"]),
    "target constant": (
        table(y=7.5),
        ["--task", "regression"],
        ["column 'y': is constant"],
    ),
    "single class": (table(y="good"), [], ["column 'y': has a single class ('good')"]),
    "class too small for the folds": (
        table(y=["yes"] * 40 + ["no"] * 37 + ["rare"] * 3),
        [],
        ["column 'y': class 'rare' has 3 rows", "5-fold cross-fitting needs at least 5"],
    ),
    "duplicate column names": (
        "a,b,a,y\n" + "\n".join(f"{i},x,{i},yes" for i in range(60)) + "\n",
        [],
        ["column 'a': appears twice in the header"],
    ),
    "not UTF-8": (
        b"a,b,y\n" + "1,caf\u00e9,yes\n".encode("latin-1") * 60,
        [],
        ["data.csv: is not UTF-8 text: byte 0xe9 at offset 11 (line 2)", "--encoding cp1252"],
    ),
    "not the encoding given": (
        b"a,b,y\n" + "1,caf\u00e9,yes\n".encode("utf-8") * 60,
        ["--encoding", "ascii"],
        ["data.csv: is not ascii text: byte 0xc3 at offset 11 (line 2); check --encoding"],
    ),
    "a codec that decodes no text": (
        table(),
        ["--encoding", "hex"],
        ["--encoding='hex' is not a text encoding Python knows"],
    ),
    "a row with more values than the header has names": (
        "a,b,y\n" + "".join(f"{i},x,yes,{i}\n" for i in range(60)),
        [],
        ["data.csv: data row 1 has 4 values but the header names 3 columns"],
    ),
    "a row-names column without a name (R's write.csv)": (
        '"a","y"\n' + "".join(f'"{i}",{i},"yes"\n' for i in range(60)),
        [],
        ["data row 1 has 3 values but the header names 2 columns"],
    ),
    "an encoding Python does not know": (
        table(),
        ["--encoding", "klingon"],
        ["--encoding='klingon' is not a text encoding Python knows"],
    ),
    "regression target with decimal points in a file of decimal commas": (
        "a;y\n" + "".join(f"{i},5;{i}.25\n" for i in range(80)),
        ["--task", "regression"],
        [
            "column 'y': a regression target must be numeric",
            '"0.25" in data row 1',
            "a number with a decimal point, but this file is read with decimal commas",
        ],
    ),
    "regression target given as text": (
        table(y=["12k"] + ["1.5"] * 79),
        ["--task", "regression"],
        ["column 'y': a regression target must be numeric", '"12k" in data row 1'],
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_bad_csv_is_refused_with_one_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    content, extra, fragments = REFUSED[case]
    code, _, err = train(capsys, write(tmp_path, content), *extra)
    assert_refused(code, err, *fragments)


def test_rows_without_a_target_are_dropped_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    y = ["yes", "no"] * 40
    y[3] = y[11] = ""
    y[20] = "NA"
    code, out, err = train(capsys, write(tmp_path, table(y=y)))
    assert code == 0, err
    assert "column 'y': dropped 3 of 80 rows whose target is missing" in err
    assert "62 training rows, 15 test rows" in out


def test_an_empty_column_is_dropped_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = train(capsys, write(tmp_path, table(notes=[""] * 79 + ["NA"])))
    assert code == 0, err
    assert "column 'notes' is empty (every value is missing); dropped it" in err
    assert "notes" not in out


def test_a_column_with_too_many_levels_is_capped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = 1500
    code, out, err = train(capsys, write(tmp_path, table(n, ident=[f"id{i}" for i in range(n)])))
    assert code == 0, err
    assert "column 'ident' has 1500 distinct values; keeping the 1000 most frequent" in err
    assert "1000 (capped; the rest in '__other__')" in out


def test_a_semicolon_file_with_decimal_commas_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = "\n".join(f"{i},5;{'x' if i % 2 else 'y'};{'yes' if i % 3 else 'no'}" for i in range(60))
    code, out, err = train(capsys, write(tmp_path, "a;b;y\n" + rows + "\n"))
    assert code == 0, err
    assert "decimal mark ','" in out
    assert "a                            f_a                          numeric" in out


def test_excel_exports_are_read_with_their_encoding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Excel on Windows writes cp1252 ("ANSI"), whose euro sign latin-1 lacks; its "Unicode
    text" export is UTF-16 with a byte-order mark."""
    towns = ["Orl\u00e9ans", "S\u00e8te"]
    text = "prix (\u20ac);ville;y\n" + "".join(
        f"{i},5;{towns[i % 2]};{'oui' if i % 3 else 'non'}\n" for i in range(60)
    )
    path = write(tmp_path, text.encode("cp1252"))
    code, _, err = train(capsys, path)
    assert_refused(code, err, "--encoding cp1252")
    code, out, err = train(capsys, path, "--encoding", "cp1252")
    assert code == 0, err
    assert "prix (\u20ac)" in out and "decimal mark ','" in out
    code, out, err = train(capsys, write(tmp_path, text.encode("utf-16"), "unicode.txt"))
    assert code == 0, err
    assert "prix (\u20ac)" in out
    # Excel's "CSV UTF-8" starts with a byte-order mark, also when the encoding is named.
    bom = write(tmp_path, b"\xef\xbb\xbf" + table().encode("utf-8"), "bom.csv")
    for extra in ([], ["--encoding", "utf-8"]):
        code, out, err = train(capsys, bom, *extra)
        assert code == 0, err
    # A delimiter closing every row adds empty values, not columns.
    closed = "".join(line + ",\n" for line in table().splitlines()[1:])
    code, out, err = train(capsys, write(tmp_path, "a,b,y\n" + closed, "closed.csv"))
    assert code == 0, err


def test_rows_repeating_the_header_are_dropped_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = table(40)
    header, body = part.split("\n", 1)
    code, out, err = train(capsys, write(tmp_path, part + header + "\n" + body))
    assert code == 0, err
    assert "dropped 1 row repeating the header (data row 41)" in err
    assert "64 training rows, 16 test rows" in out  # 80 rows, not 81


def test_row_numbers_count_the_dropped_header_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "a,y\n1,2\na,y\n" + "".join(f"{i},{i}.5\n" for i in range(60)) + "7,oops\n"
    code, _, err = train(capsys, write(tmp_path, text), "--task", "regression")
    assert code == 2 and "dropped 1 row repeating the header (data row 2)" in err
    assert '"oops" in data row 63' in err.strip().splitlines()[-1]


def test_numbers_grouped_by_spaces_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A French export: no-break spaces between thousands, decimal commas; most amounts
    grouped, so the decimal mark is told from grouped cells too."""
    amounts = [f"{1 + v}\u00a0{v * 7 % 1000:03d},{v % 100:02d}" for v in range(60)]
    amounts[::5] = [f"{v * 3},50" for v in range(12)]
    rows = "".join(
        f"{a};{'x' if i % 2 else 'y'};{'yes' if i % 3 else 'no'}\n" for i, a in enumerate(amounts)
    )
    code, out, err = train(capsys, write(tmp_path, "montant;b;y\n" + rows))
    assert code == 0, err
    assert "decimal mark ','" in out and "numbers written as text" not in err
    assert "montant                      f_montant                    numeric" in out


def test_a_numeric_column_spoilt_by_placeholders_gets_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = [str(v) for v in range(80)]
    values[5] = values[9] = "?"
    code, out, err = train(capsys, write(tmp_path, table(age=values)))
    assert code == 0, err
    assert "column 'age' is numeric except for 2 cells holding '?'" in err
    assert "--na-values" in err
    code, out, err = train(capsys, write(tmp_path, table(age=values)), "--na-values", "?")
    assert code == 0 and "age                          f_age                        numeric" in out


def test_numbers_written_with_units_or_separators_get_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    share = [f"{v / 2:.1f}%" for v in range(80)]
    income = [f"{1000 + 37 * v}.5" for v in range(80)]
    for i in range(0, 80, 7):  # a few rows from a French spreadsheet: "1 259,25"
        income[i] = f"{(1000 + 37 * i) // 1000} {(1000 + 37 * i) % 1000:03d},25"
    code, _out, err = train(capsys, write(tmp_path, table(share=share, income=income)))
    assert code == 0, err
    assert "column 'share' holds numbers written as text in 80 cells (e.g. '0.0%'" in err
    assert "column 'income' holds numbers written as text in 12 cells" in err
    # An accounting export writes negatives in parentheses.
    score = [str(600 + v) for v in range(80)]
    for i in range(0, 80, 9):
        score[i] = f"({600 + i})"
    code, _out, err = train(capsys, write(tmp_path, table(score=score)))
    assert code == 0, err
    assert "column 'score' holds numbers written as text in 9 cells (e.g. '(600)'" in err
    assert "parentheses for negatives" in err
    # Real categories get no such hint.
    code, _out, err = train(capsys, write(tmp_path, table(share=["a", "b"] * 40)))
    assert code == 0 and "numbers written as text" not in err


def test_an_internal_error_is_one_line_and_debug_shows_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import training.commands.train as train_command

    def broken(*_args: object) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(train_command, "describe", broken)
    code, _, err = train(capsys, write(tmp_path, table()))
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "internal error (RuntimeError: simulated bug)" in err and "--debug" in err
    with pytest.raises(RuntimeError, match="simulated bug"):
        main(["--debug", "train", "--csv", write(tmp_path, table()), "--target", "y",
              "--task", "classification", "--name", "t", "--dry-run"])  # fmt: skip


def test_a_constant_column_gets_a_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = train(capsys, write(tmp_path, table(region=["north"] * 80)))
    assert code == 0, err
    assert "column 'region' holds the same value ('north') in every row" in err
    assert "--drop" in err
    code, _out, err = train(capsys, write(tmp_path, table(level=[1.5] * 80)))
    assert code == 0, err
    assert "column 'level' holds the same value (1.5) in every row" in err
    code, _out, err = train(capsys, write(tmp_path, table(region=["north", "south"] * 40)))
    assert code == 0 and "same value" not in err


def test_a_date_column_gets_a_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    days = [f"{1 + v % 28:02d}/{1 + v % 12:02d}/20{10 + v % 14}" for v in range(80)]
    code, _out, err = train(capsys, write(tmp_path, table(opened=days)))
    assert code == 0, err
    assert "column 'opened' looks like dates (e.g. '01/01/2010'); it is read as" in err
    assert "--drop" in err
    iso = [f"2024-{1 + v % 12:02d}-{1 + v % 28:02d}T10:{v % 60:02d}:00Z" for v in range(80)]
    code, _out, err = train(capsys, write(tmp_path, table(stamp=iso)))
    assert code == 0 and "column 'stamp' looks like dates" in err
    # Versions, and a few release days, are categories.
    versions = [f"1.{v % 3}.{10 + v % 20}" for v in range(80)]
    releases = [["2024-01-05", "2024-03-01", "2024-06-30"][v % 3] for v in range(80)]
    code, _out, err = train(capsys, write(tmp_path, table(version=versions, release=releases)))
    assert code == 0 and "looks like dates" not in err


def test_an_identifier_column_gets_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = train(capsys, write(tmp_path, table(customer=range(100001, 100081))))
    assert code == 0, err
    assert "column 'customer' holds a different whole number in every row, in order" in err
    code, _out, err = train(
        capsys, write(tmp_path, table(ref=[f"R-{v * 7919 % 1000}" for v in range(80)]))
    )
    assert code == 0 and "column 'ref' holds a different value in every row" in err
    # Distinct measurements, whole numbers out of order, and repeated codes are features.
    rng = np.random.default_rng(1)
    shuffled = rng.permutation(80) + 1000
    columns = {"price": rng.normal(100, 9, 80).round(2), "rank": shuffled, "code": ["a", "b"] * 40}
    code, _out, err = train(capsys, write(tmp_path, table(**columns)))
    assert code == 0 and "different" not in err


def test_a_cell_beyond_the_csv_modules_limit_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The row-width check reads with the csv module, whose cells stop at 128 KiB; pandas
    reads longer ones, so they must not turn into a refusal."""
    notes = ["short"] * 79 + ["x" * 200_000]
    code, _out, err = train(capsys, write(tmp_path, table(notes=notes)))
    assert code == 0, err


def test_column_names_with_surrounding_spaces_get_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = train(capsys, write(tmp_path, table().replace("a,b,y", " a,b ,y", 1)))
    assert code == 0, err
    assert "column names [' a', 'b '] begin or end with spaces, which clients must send" in err


def test_column_names_with_no_break_spaces_get_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found in a German export: "Score\u00a0%" read as "Score %" in every message.
    renamed = table().replace("a,b,y", "a\u00a0x,b,y", 1)
    code, _out, err = train(capsys, write(tmp_path, renamed))
    assert code == 0, err
    assert "column names ['a\\xa0x'] hold spaces other than the plain one" in err


def test_a_pandas_round_trip_names_its_unnamed_columns_as_pandas_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A frame read with its index and written again: header ",Unnamed: 0,a,b,y".
    frame = pd.read_csv(io.StringIO(table()))
    frame.insert(0, "Unnamed: 0", range(len(frame)))
    path = write(tmp_path, frame.to_csv())
    code, _out, err = train(capsys, path, "--drop", "Unnamed: 0", "Unnamed: 0.1")
    assert code == 0, err
    assert list(pd.read_csv(path).columns[:2]) == ["Unnamed: 0.1", "Unnamed: 0"], "pandas' names"
    assert "appears twice" not in err
    code, _out, err = train(capsys, write(tmp_path, "a,a,y\n" + "1,2,x\n" * 80))
    assert_refused(code, err, "column 'a': appears twice in the header")


def test_na_values_add_up_and_take_a_leading_dash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ratio = [f"{v / 7:.3f}" for v in range(80)]
    ratio[3], ratio[11], ratio[20] = "Inf", "-Inf", "#DIV/0!"  # an R export, a spreadsheet
    path = write(tmp_path, table(ratio=ratio))
    code, _out, err = train(capsys, path)
    assert code == 0 and "--na-values Inf '#DIV/0!' --na-values=-Inf" in err, err
    code, out, err = train(capsys, path, "--na-values", "Inf", "#DIV/0!", "--na-values=-Inf")
    assert code == 0, err
    assert "plus ['#DIV/0!', '-Inf', 'Inf']" in out
    assert "ratio                        f_ratio                      numeric" in out


def test_dashes_for_zero_keep_the_hint_for_numbers_written_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    margin = [f"({v / 3:.1f}%)" if v % 2 else f"{v / 3:.1f}%" for v in range(80)]
    for i in range(0, 80, 6):
        margin[i] = "-"  # 14 of 80 cells: an accounting export's zero
    code, _out, err = train(capsys, write(tmp_path, table(margin=margin)))
    assert code == 0, err
    assert "column 'margin' holds numbers written as text in 66 cells" in err
    assert "and 14 cells of a lone dash (0 in an accounting export)" in err


def test_values_alike_but_for_case_or_unicode_form_get_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    city = ["Z\u00fcrich", "Zu\u0308rich", "K\u00f6ln", "Bern"] * 20  # composed, decomposed
    labels = ["yes", "Yes", "no", "NO "] * 20
    path = write(tmp_path, table(city=city, y=labels))
    code, _out, err = train(capsys, path)
    assert code == 0, err
    assert "column 'city': values that differ only in case, spaces or Unicode form" in err
    assert '"Zu\\u0308rich" / "Z\u00fcrich"' in err
    assert "target 'y': values that differ only in case" in err and '"NO" / "no"' in err


def test_a_dry_run_needs_no_name_and_a_real_run_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, table())
    code = main(["train", "--csv", path, "--target", "y", "--task", "classification", "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "target 'y'" in out
    code = main(["train", "--csv", path, "--target", "y", "--task", "classification", "--quiet"])
    _, err = capsys.readouterr()
    assert_refused(code, err, "--name=None", "--dry-run")
