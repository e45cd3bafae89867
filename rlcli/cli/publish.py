"""``rlcli publish``: evaluate an agent, build its Hub repo (model card, replay, ONNX) and upload it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rlcli.cli.app import app
from rlcli.cli.frames import frame_counter
from rlcli.cli.options import Episodes, Run, Seed
from rlcli.share.names import resolve_run


@app.command(help="Evaluate an agent and publish it to the Hugging Face Hub in one commit. "
                  "Example: rlcli publish runs/CartPole-v1__ppo__s0__... --repo-id user/ppo-CartPole-v1")
def publish(
    run: Run,
    repo_id: Annotated[str, typer.Option("--repo-id", help="The Hub model repo: user/name.",
                                         show_default=False)],
    private: Annotated[bool, typer.Option("--private", help="Create the repo private.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Build and show the folder; upload nothing.")
                       ] = False,
    episodes: Episodes = 10,
    video: Annotated[bool, typer.Option("--video/--no-video", help="Record replay.mp4.")] = True,
    seed: Seed = 12345,
    out: Annotated[Optional[Path], typer.Option(
        help="Where to build the repo folder \\[default: RUN/hub, or ./hub/USER__NAME for a run in the Hub's "
             "cache or one that cannot be written].", show_default=False)] = None,
) -> None:
    import torch

    from rlcli.share import hub
    from rlcli.share.export import require_onnx

    torch.set_num_threads(1)
    # everything that can refuse at once does so before minutes of evaluation, not after
    hub.parse_repo_id(repo_id)
    require_onnx()
    run_dir = resolve_run(run)
    if not dry_run:
        hub.check_login()
    with frame_counter(video) as counted:
        built = hub.build_folder(run_dir, repo_id, out or hub.default_folder(run_dir, repo_id), episodes=episodes,
                                 video=video, seed=seed, on_frame=counted)
    r = built.results
    typer.echo(f"{r['env_id']} ({r['algo']}, {r['steps_trained'] or 0:,} steps): {r['mean_return']:.2f} ± "
               f"{r['std_return']:.2f} over {r['episodes']} episodes")
    typer.echo(format_tree(built.folder, built.files))
    if dry_run:
        typer.echo(f"dry run: nothing uploaded to {repo_id}")
        return
    url = hub.upload(built.folder, repo_id, private=private,
                     message=f"{r['algo']} on {r['env_id']}: {r['mean_return']:.2f} +/- {r['std_return']:.2f}")
    typer.echo(f"published {url} ({len(built.files)} files in one commit)")


def format_tree(root: Path, files: list[tuple[str, int]]) -> str:
    """``root`` and its files as an indented tree, each file with its size, the total on top."""
    total = sum(size for _, size in files)
    width = max((2 * (path.count("/") + 1) + len(path.rsplit("/", 1)[-1]) for path, _ in files), default=0) + 2
    lines = [f"{root}/  ({len(files)} files, {human_size(total)})"]
    shown: set[str] = set()
    for path, size in files:
        *parents, name = path.split("/")
        for depth, parent in enumerate(parents):
            key = "/".join(parents[: depth + 1])
            if key not in shown:
                shown.add(key)
                lines.append(f"{'  ' * (depth + 1)}{parent}/")
        entry = "  " * (len(parents) + 1) + name
        lines.append(f"{entry:<{width}}{human_size(size):>9}")
    return "\n".join(lines)


def human_size(n: int) -> str:
    scaled: float = n
    for unit in ("B", "kB", "MB"):
        if scaled < 1000 or unit == "MB":
            return f"{n:,} {unit}" if unit == "B" else f"{scaled:.1f} {unit}"
        scaled /= 1000
    return f"{scaled:.1f} GB"
