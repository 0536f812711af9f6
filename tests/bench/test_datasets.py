"""benchmarks.datasets.shared_data_dir: $BERTSERVE_EVAL_DATA first, else shared/data above the working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.datasets import DATA_DIR_ENV, DataDirNotFound, shared_data_dir


def make_shared_data(root: Path) -> Path:
    data = root / "shared" / "data"
    data.mkdir(parents=True)
    return data


def test_the_variable_names_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = tmp_path / "elsewhere"
    chosen.mkdir()
    make_shared_data(tmp_path)
    monkeypatch.chdir(tmp_path)  # a shared/data here too: the variable wins
    monkeypatch.setenv(DATA_DIR_ENV, str(chosen))
    assert DATA_DIR_ENV == "BERTSERVE_EVAL_DATA"
    assert shared_data_dir() == chosen


def test_a_missing_folder_in_the_variable_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "no-such-folder"
    monkeypatch.setenv(DATA_DIR_ENV, str(missing))
    with pytest.raises(DataDirNotFound, match="set BERTSERVE_EVAL_DATA") as error:
        shared_data_dir()
    assert str(missing) in str(error.value)
    assert isinstance(error.value, FileNotFoundError)


def test_a_file_in_the_variable_is_not_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_a_folder = tmp_path / "data.tsv"
    not_a_folder.write_text("sentence\tlabel\n")
    monkeypatch.setenv(DATA_DIR_ENV, str(not_a_folder))
    with pytest.raises(DataDirNotFound, match="set BERTSERVE_EVAL_DATA"):
        shared_data_dir()


def test_unset_finds_shared_data_above_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_shared_data(tmp_path)
    inside = tmp_path / "clone" / "benchmarks"
    inside.mkdir(parents=True)
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.chdir(inside)
    assert shared_data_dir().resolve() == data.resolve()
    monkeypatch.chdir(tmp_path)  # in the working directory itself
    assert shared_data_dir().resolve() == data.resolve()


def test_an_empty_variable_counts_as_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_shared_data(tmp_path)
    monkeypatch.setenv(DATA_DIR_ENV, "")
    monkeypatch.chdir(tmp_path)
    assert shared_data_dir().resolve() == data.resolve()


def test_unset_and_nothing_found_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if any((folder / "shared" / "data").is_dir() for folder in (tmp_path, *tmp_path.resolve().parents)):
        pytest.skip("a shared/data folder sits above the temporary directory on this machine")
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataDirNotFound, match="set BERTSERVE_EVAL_DATA"):
        shared_data_dir()
