"""``rlcli play --video``: a path no video can be written to is one line and exit code 2, before any episode; the
frames' count is reported as they are rendered."""

import pytest
from typer.testing import CliRunner

from rlcli.cli import app
from rlcli.errors import UsageError
from rlcli.share.video import check_video_path

runner = CliRunner()
SUFFIXES = "give a path ending in .mp4 (or .mkv, .mov, .avi)"


@pytest.fixture
def file_in_the_way(tmp_path):
    path = tmp_path / "notes"
    path.write_text("a file, not a directory")
    return path


def test_a_writable_path_passes_and_is_left_as_it_was(tmp_path):
    video = tmp_path / "new" / "deeper" / "agent.MP4"
    check_video_path(video)
    assert not video.exists() and video.parent.is_dir()  # write_mp4 would make the directory anyway
    existing = tmp_path / "old.mkv"
    existing.write_bytes(b"kept")
    check_video_path(existing)
    assert existing.read_bytes() == b"kept"


@pytest.mark.parametrize("name, expected", [
    ("out.txt", "cannot write a video to a '.txt' file; " + SUFFIXES),
    ("agent.gif", "cannot write a video to a '.gif' file; " + SUFFIXES),
    ("agent", "cannot write a video to a path without an extension; " + SUFFIXES),
])
def test_an_extension_without_an_h264_container(tmp_path, name, expected):
    with pytest.raises(UsageError) as e:
        check_video_path(tmp_path / name)
    assert str(e.value) == f"--video {tmp_path / name}: {expected}"


def test_a_directory_or_a_file_in_the_way(tmp_path, file_in_the_way):
    with pytest.raises(UsageError, match="is a directory; give a file path such as"):
        check_video_path(tmp_path)
    with pytest.raises(UsageError) as e:
        check_video_path(file_in_the_way / "x.mp4")
    assert str(e.value) == f"--video {file_in_the_way / 'x.mp4'}: {file_in_the_way} is a file, not a directory; " \
                           "give a path in a directory"


def test_a_directory_that_refuses_files(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("pathlib.Path.open", refuse)  # as a read-only directory would, for root too
    with pytest.raises(UsageError) as e:
        check_video_path(tmp_path / "x.mp4")
    assert str(e.value) == (f"--video {tmp_path / 'x.mp4'}: cannot write there (Permission denied); "
                            "give a path in a directory you can write to")


@pytest.mark.parametrize("name, expected", [
    ("out.txt", "cannot write a video to a '.txt' file; " + SUFFIXES),
    ("notes/x.mp4", "is a file, not a directory; give a path in a directory"),
])
def test_play_checks_the_video_path_before_playing(tmp_path, monkeypatch, file_in_the_way, name, expected):
    def play_nothing(*args, **kwargs):
        raise AssertionError("episodes were played before the video path was checked")

    monkeypatch.setattr("rlcli.training.evaluation.record_episodes", play_nothing)
    video = tmp_path / name
    result = runner.invoke(app, ["play", "CartPole-v1", "--video", str(video)])  # the zoo's CartPole agent
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith(f"error: --video {video}") and lines[0].endswith(expected)


def test_a_recording_reports_each_frame_it_keeps():
    from rlcli.runs.rundir import RunDir
    from rlcli.share.names import resolve_run
    from rlcli.training.evaluation import record_episodes, render_off_screen

    render_off_screen()
    counts: list[int] = []
    played = record_episodes(RunDir.open(resolve_run("CartPole-v1")), 1, 0, render_mode="rgb_array",
                             on_frame=counts.append)  # the zoo's CartPole agent
    assert len(played.frames) == played.result.lengths[0]  # a frame a step
    assert counts == list(range(1, len(played.frames) + 1))


def test_the_frame_count_shows_on_a_terminal_only(monkeypatch):
    from rich.console import Console

    from rlcli.cli.frames import frame_counter

    with frame_counter(True) as counted:  # the test's stderr is no terminal
        assert counted is None
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    with frame_counter(False) as counted:
        assert counted is None
    with frame_counter(True) as counted:
        assert counted is not None
        for frames in range(1, 4):
            counted(frames)
