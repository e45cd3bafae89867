"""What every algorithm's run must do through the command line: train, evaluate N episodes as JSON, and export
a policy that the exported file reproduces."""

import json

from typer.testing import CliRunner

from rlcli.cli import app

runner = CliRunner()


def train_evaluate_export(tmp_path, train_args: list[str]) -> str:
    """Trains ``rlcli train *train_args`` into ``tmp_path / "run"``, evaluates 2 episodes and exports it;
    returns the export's output (its parity line)."""
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", *train_args, "--eval-episodes", "2", "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["eval", str(run), "-n", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output[result.output.index("{"):])["episodes"] == 2
    result = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / "exported")])
    assert result.exit_code == 0, result.output
    return result.output


def refused(tmp_path, train_args: list[str]) -> str:
    """The one line ``rlcli train *train_args`` is refused with (exit code 2)."""
    result = runner.invoke(app, ["train", *train_args, "--steps", "100", "--run-dir", str(tmp_path / "no")])
    assert result.exit_code == 2, result.output
    return result.output
