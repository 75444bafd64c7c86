"""Unit: `python -m diskless.mirror` refuses a bad flag in one line naming it (exit status 2),
before anything starts, as the broker's command does; its storage flags are the broker's."""

from __future__ import annotations

from pathlib import Path

import pytest

from diskless.mirror.__main__ import main

SOURCE = ["--source", "127.0.0.1:1", "--topic", "t"]


def _refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m diskless.mirror: error: ")
    return line.removeprefix("python -m diskless.mirror: error: ")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["--topic", "t"], "the following arguments are required: --source"),
        (["--source", "127.0.0.1:1"], "the following arguments are required: --topic"),
        (["--source", "nowhere", "--topic", "t"], "--source: 'nowhere' is not HOST:PORT"),
        ([*SOURCE, "--group-include", "("], "--group-include: '(' is not a regular expression"),
        ([*SOURCE, "--group-exclude", "[a"], "--group-exclude: '[a' is not a regular expression"),
        ([*SOURCE, "--fetchers", "0"], "--fetchers: 0 is outside 1..64"),
        ([*SOURCE, "--fetch-max-bytes", "x"], "--fetch-max-bytes: 'x' is not an integer"),
        ([*SOURCE, "--metrics-address", "here"], "--metrics-address: 'here' is not HOST:PORT"),
        ([*SOURCE, "--stop", "--status"], "--status: not allowed with argument --stop"),
        (SOURCE, "--data-dir is needed unless both --coordinator and --bucket are given"),
        ([*SOURCE, "--s3-endpoint", "http://s3"], "--s3-endpoint needs --bucket"),
        ([*SOURCE, "--coordinator", "mysql://x"], "--coordinator"),
    ],
)
def test_a_bad_flag_is_one_line(
    arguments: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _refusal(arguments, capsys).startswith(expected)


def test_a_data_dir_that_is_a_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    line = _refusal([*SOURCE, "--data-dir", str(tmp_path / "file")], capsys)
    assert line.startswith("--data-dir: ") and "is not a directory" in line
