"""frontier.out_path: output paths checked before a command's work, one line each, nothing created."""

import pytest
from typer.testing import CliRunner

from frontier.cli import app
from frontier.out_path import check_dir_path, check_file_path


def test_folder_and_file_options(tmp_path):
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    check_dir_path("--out", tmp_path)                       # an existing folder
    check_dir_path("--out", tmp_path / "new" / "deeper")     # a folder that can be created
    check_file_path("--out", tmp_path / "new" / "b.joblib")  # a file in such a folder
    check_file_path("--out", a_file)                         # a file to replace
    cases = [(check_dir_path, a_file, f"--out {a_file} exists and is not a directory"),
             (check_dir_path, a_file / "sub", f"--out: {a_file} is not a directory, so {a_file / 'sub'} cannot be created"),
             (check_file_path, tmp_path, f"--out {tmp_path} is a directory; give a file path"),
             (check_file_path, a_file / "b.joblib", f"--out: {a_file} is not a directory")]
    for check, path, message in cases:
        with pytest.raises(ValueError) as err:
            check("--out", path)
        assert str(err.value) == message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]     # nothing created


def test_calibrate_and_import_refuse_their_out_before_working(tmp_path):
    """Both ended in a traceback (IsADirectoryError, NotADirectoryError) after the fit / import."""
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    runner = CliRunner()
    res = runner.invoke(app, ["calibrate", "--profiles", str(tmp_path), "--gpu", "H100", "--out", str(tmp_path)])
    assert res.exit_code == 2 and res.output == f"error: --out {tmp_path} is a directory; give a file path\n"
    res = runner.invoke(app, ["import-profiles", "--source", "aiconfigurator", "--out", str(a_file)])
    assert res.exit_code == 2 and res.output == f"error: --out {a_file} exists and is not a directory\n"
