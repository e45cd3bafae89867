"""Sharing agents on the Hugging Face Hub: a repo folder with a model card, one-commit uploads, downloads.

A published repo is a run directory plus what a reader of the Hub needs: ``results.json`` (the evaluation
behind the card's score), ``replay.mp4``, the ONNX policy, the learning curve and ``README.md``, whose YAML
metadata follows the Hub's reinforcement-learning convention (``model-index`` with ``mean_reward`` as
"mean +/- std" on the env id). Pulling it back gives a directory that ``RunDir.open`` reads as any run.

The endpoint is huggingface_hub's own setting, ``HF_ENDPOINT``, read when a call is made (the library reads
it once, at import); the token is the usual one (``hf auth login`` or ``HF_TOKEN``). Every failure of the
Hub or the network becomes a ``HubError``: one line for the command line.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import yaml

import rlcli
from rlcli.config import MultiAgentConfig
from rlcli.envs import env_group
from rlcli.envs.games import game_for
from rlcli.errors import UsageError
from rlcli.runs import checkpoint
from rlcli.runs.rundir import HF_PREFIX, RunDir, eval_history, load_config, run_takes_output, safe_repo_name
from rlcli.share import export
from rlcli.share.video import write_mp4
from rlcli.training.agents import EVAL_ENVS
from rlcli.training.evaluation import match, record_episodes, render_off_screen

LIBRARY_NAME = "rlcli"
RESULTS, README, REPLAY, CURVE, HYPERPARAMS = (
    "results.json", "README.md", "replay.mp4", "learning_curve.png", "hyperparams.yml")
ONNX = "policy.onnx"
# copied as they are: enough for `RunDir.open`, and the training history behind the learning curve
RUN_FILES = (checkpoint.CONFIG, checkpoint.MODEL, checkpoint.META, checkpoint.EVAL, "metrics.csv")
RUN_DIRS = ("tb",)
# what `hf://` needs to act; `rlcli pull` takes the whole repo
ACTING_FILES = (checkpoint.CONFIG, checkpoint.MODEL, checkpoint.META, checkpoint.EVAL, RESULTS)


class HubError(UsageError):
    """The Hub or the network refused or failed; the message says which and what to do."""


class BuiltFolder(NamedTuple):
    folder: Path
    results: dict[str, Any]
    files: list[tuple[str, int]]  # path in the repo, size in bytes; sorted


# ---------------------------------------------------------------------------------------------------
# Names and endpoint


def parse_repo_id(name: str) -> tuple[str, str | None]:
    """``user/name``, ``hf://user/name`` or either with ``@revision`` -> (repo id, revision or None).
    A name the Hub would refuse is a UsageError here, before anything slow is done for it."""
    text = name.removeprefix(HF_PREFIX).strip("/")
    repo_id, _, revision = text.partition("@")
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"'{name}' is not a Hub repo id; expected user/name (e.g. hf://user/ppo-CartPole-v1)")
    _hf()  # its own message when huggingface_hub is missing
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise UsageError(f"'{name}' is not a valid Hub repo id: {_validation_detail(e, repo_id)}") from None
    return repo_id, revision or None


def _validation_detail(error: Exception, repo_id: str) -> str:
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return detail.removesuffix(f": '{repo_id}'.")  # the message ends by quoting the id we already name


def endpoint() -> str:
    """The Hub's URL: ``HF_ENDPOINT`` as it is now, else huggingface_hub's configured default."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def default_folder(run_dir: Path, repo_id: str) -> Path:
    """Where ``rlcli publish`` builds the repo without ``--out``: ``RUN/hub``, or ``./hub/USER__NAME``
    for a run that does not take output (``run_takes_output``)."""
    return run_dir / "hub" if run_takes_output(run_dir) else Path("hub") / safe_repo_name(repo_id)


# ---------------------------------------------------------------------------------------------------
# Building the folder


def evaluate_run(run_dir: Path, episodes: int, seed: int) -> dict[str, Any]:
    """``episodes`` deterministic episodes of the run's last model: the record ``results.json`` keeps
    (mean and std of the returns, each return and length in env steps)."""

    loaded = RunDir.open(run_dir)
    games = game_results(loaded, episodes, seed)
    result = record_episodes(loaded, episodes, seed, num_envs=min(EVAL_ENVS, episodes),
                             opponent=games.get("opponent")).result
    return {"env_id": loaded.cfg.env.id, "algo": loaded.cfg.algo.algo, "deterministic": True, "seed": seed,
            "steps_trained": loaded.meta.get("steps"), **result.as_dict(), **games,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "rlcli_version": rlcli.__version__}


def game_results(run: RunDir, games: int, seed: int) -> dict[str, Any]:
    """A turn-based game's rates against each evaluation opponent (``games`` games from each seat) and
    its self-play rating; empty for other envs."""
    if env_group(run.cfg.env.id) != "games":
        return {}
    names = run.cfg.env.multiagent.eval_opponents or (("scripted", "random") if game_for(run.cfg.env.id)
                                                      else ("random",))
    out: dict[str, Any] = {"opponent": names[0],  # whom the headline return was played against
                           "opponents": {name: match(run, name, games, seed).rates() for name in names}}
    if "selfplay" in run.meta:
        out["elo"] = run.meta["selfplay"]["learner_elo"]
    return out


def record_replay(run_dir: Path, path: Path, seed: int, on_frame: Callable[[int], None] | None = None) -> int:
    """One deterministic episode rendered off-screen to an mp4; returns the number of frames. ``on_frame`` is
    told the count after each (``record_episodes``)."""

    render_off_screen()
    played = record_episodes(RunDir.open(run_dir), 1, seed, render_mode="rgb_array", on_frame=on_frame)
    assert played.fps is not None  # rendered: it has a rate
    write_mp4(path, played.frames, played.fps)
    return len(played.frames)


def plot_learning_curve(run_dir: Path, path: Path) -> bool:
    """Evaluation return (mean ± std band) and recent training return against env steps, as a PNG;
    False when the run has neither."""
    evals = eval_history(run_dir)
    training = _training_returns(run_dir)
    if not evals and not training:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    if training:
        ax.plot([s for s, _ in training], [r for _, r in training], color="tab:gray", linewidth=1,
                label="training return (last 100 episodes)")
    if evals:
        steps = [e["step"] for e in evals]
        mean = [e["mean_return"] for e in evals]
        std = [e.get("std_return", 0.0) for e in evals]
        line, = ax.plot(steps, mean, marker="o", markersize=3, label="evaluation return")
        ax.fill_between(steps, [m - s for m, s in zip(mean, std, strict=True)],
                        [m + s for m, s in zip(mean, std, strict=True)],
                        color=line.get_color(), alpha=0.25, linewidth=0)
    cfg = load_config(run_dir)
    ax.set_title(f"{cfg.algo.algo} on {cfg.env.id}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    checkpoint.atomic_write(path, buffer.getvalue())
    return True


def _training_returns(run_dir: Path) -> list[tuple[int, float]]:
    path = run_dir / "metrics.csv"
    if not path.is_file():
        return []
    points = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            value = row.get("charts/episode_return")
            if value:
                points.append((int(float(row["step"])), float(value)))
    return points


def hyperparameters(run_dir: Path) -> dict[str, Any]:
    """The algorithm's resolved hyperparameters, as ``rlcli train --config`` takes them, with the env's
    keywords and multi-agent settings where the run set them."""
    cfg = load_config(run_dir)
    values = cfg.algo.model_dump(mode="json")
    values.pop("algo")
    if cfg.env.kwargs:
        values["env_kwargs"] = dict(cfg.env.kwargs)
    if cfg.env.multiagent != MultiAgentConfig():
        values["multiagent"] = cfg.env.multiagent.model_dump(mode="json", exclude_defaults=True)
    return values


def retrain_command(run_dir: Path, hyperparams_path: str) -> str:
    """An ``rlcli train`` command line that trains the same configuration again from scratch."""
    cfg = load_config(run_dir)
    parts = ["rlcli train", cfg.env.id, "--algo", cfg.algo.algo, "--config", hyperparams_path,
             "--seed", str(cfg.seed)]
    if cfg.env.backend != "auto":
        parts += ["--backend", cfg.env.backend]
    if cfg.env.env_module:
        parts += ["--env-module", cfg.env.env_module]
    parts += ["--eval-every", str(cfg.eval.every), "--eval-episodes", str(cfg.eval.episodes)]
    return " ".join(parts)


def build_folder(run_dir: Path, repo_id: str, out: Path, *, episodes: int = 10, video: bool = True,
                 seed: int = 12345, on_frame: Callable[[int], None] | None = None) -> BuiltFolder:
    """Evaluates the run over ``episodes`` episodes, records a replay (``video``; ``on_frame`` is told each
    frame's count), exports the ONNX policy and writes the whole repo, model card included, into ``out``
    (replacing an earlier build).

    The folder is built beside ``out`` and renamed into place once complete, so a build that fails
    or is interrupted leaves ``out`` as it was; ``out`` that cannot be created is a UsageError."""

    if out.resolve() in (run_dir.resolve(), *run_dir.resolve().parents):  # a pulled run has a results.json too
        raise UsageError(f"--out {out} is the run directory or holds it, and would be replaced; choose another")
    if out.exists() and (not out.is_dir() or any(out.iterdir()) and not (out / RESULTS).is_file()):
        raise UsageError(f"{out} exists and is not a folder built by rlcli publish; choose another --out")
    staging = _staging_folder(out)
    if video:
        render_off_screen()  # before evaluation makes the first env: renderers read it once, at import
    try:
        for name in RUN_FILES:
            if (run_dir / name).is_file():
                shutil.copy2(run_dir / name, staging / name)
        for name in RUN_DIRS:
            if (run_dir / name).is_dir():
                shutil.copytree(run_dir / name, staging / name)
        checkpoint.atomic_write(staging / HYPERPARAMS,
                                yaml.safe_dump(hyperparameters(run_dir), sort_keys=False).encode())
        results = evaluate_run(run_dir, episodes, seed)
        checkpoint.write_json(staging / RESULTS, results)
        if video:
            record_replay(run_dir, staging / REPLAY, seed, on_frame)
        exported = export.export_policy(run_dir, "onnx", staging / ONNX)
        plot_learning_curve(run_dir, staging / CURVE)
        card = model_card(run_dir, repo_id, results, has_video=video, has_curve=(staging / CURVE).is_file(),
                          onnx_spec=exported.spec_path.name)
        checkpoint.atomic_write(staging / README, card.encode())
        _replace_folder(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BuiltFolder(out, results, folder_files(out))


def _staging_folder(out: Path) -> Path:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = out.with_name(f".{out.name}.partial-{uuid.uuid4().hex[:8]}")
        staging.mkdir()  # not mkdtemp: its 0700 would stay on the published folder
        return staging
    except OSError as e:  # e.g. a run directory inside an installed package
        raise UsageError(f"cannot build the repo folder in {out.parent} ({e.strerror or e}); "
                         "choose another place with --out") from None


def _replace_folder(new: Path, out: Path) -> None:
    """Puts the complete folder ``new`` at ``out``: an earlier build is moved aside first (a rename
    cannot land on a folder that has files) and deleted only once ``new`` is in place."""
    old = out.with_name(f"{new.name}.old") if out.exists() else None
    if old is not None:
        os.replace(out, old)
    try:
        os.replace(new, out)
    except BaseException:
        if old is not None:
            os.replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def folder_files(folder: Path) -> list[tuple[str, int]]:
    """Every file under ``folder`` as (POSIX path relative to it, size in bytes), sorted."""
    return sorted((p.relative_to(folder).as_posix(), p.stat().st_size) for p in folder.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------------------
# The model card


def card_metadata(env_id: str, algo: str, mean: float, std: float) -> dict[str, Any]:
    """The card's YAML metadata, as the Hub's reinforcement-learning models carry it."""
    return {
        "library_name": LIBRARY_NAME,
        "tags": [env_id, "reinforcement-learning", "deep-reinforcement-learning", algo, LIBRARY_NAME],
        "model-index": [{
            "name": f"{algo}-{env_id}",
            "results": [{
                "task": {"type": "reinforcement-learning", "name": "reinforcement-learning"},
                "dataset": {"name": env_id, "type": env_id},
                "metrics": [{"type": "mean_reward", "value": f"{mean:.2f} +/- {std:.2f}",
                             "name": "mean_reward", "verified": False}],
            }],
        }],
    }


def model_card(run_dir: Path, repo_id: str, results: dict[str, Any], *, has_video: bool = True,
               has_curve: bool = True, onnx_spec: str | None = None) -> str:
    """``README.md``: YAML metadata, then the result, how to pull, play and retrain the agent with
    rlcli, its hyperparameters, the learning curve and the versions it was trained with. ``onnx_spec``
    names the exported policy's spec file, when there is one."""
    loaded_cfg = load_config(run_dir)
    meta = json.loads((run_dir / checkpoint.META).read_text()) if (run_dir / checkpoint.META).is_file() else {}
    env_id, algo = loaded_cfg.env.id, loaded_cfg.algo.algo
    mean, std, n = results["mean_return"], results["std_return"], results["episodes"]
    steps = meta.get("steps")
    front = yaml.safe_dump(card_metadata(env_id, algo, mean, std), sort_keys=False, allow_unicode=True)
    local = safe_repo_name(repo_id)
    trained = f" for {steps:,} env steps" if isinstance(steps, int) else ""
    lines = [
        "---", front.rstrip(), "---", "",
        f"# {algo.upper()} agent for {env_id}", "",
        f"A {algo.upper()} agent trained on `{env_id}`{trained} (seed {loaded_cfg.seed}) with rlcli, "
        "a command-line reinforcement-learning toolkit (PyTorch).", "",
        "## Result", "",
        f"**{mean:.2f} ± {std:.2f}**: mean and standard deviation of the return over {n} deterministic "
        f"evaluation episodes{against(results)} (seed {results['seed']}, mean length "
        f"{results['mean_length']:.1f} steps), "
        f"after {steps:,} training steps. Each episode's return and length are in `{RESULTS}`."
        if isinstance(steps, int) else
        f"**{mean:.2f} ± {std:.2f}** over {n} deterministic evaluation episodes; details in `{RESULTS}`.",
        "",
    ]
    lines += game_lines(results)
    if has_video:
        url = f"{endpoint()}/{repo_id}/resolve/main/{REPLAY}"
        lines += [f'<video src="{url}" controls autoplay loop muted></video>', "",
                  f"One deterministic episode: [`{REPLAY}`]({REPLAY}).", ""]
    lines += [
        "## Usage", "",
        "```bash",
        'pip install "rlcli[hub]"',
        f"rlcli pull {repo_id} --run-dir {local}      # the whole repo, as a run directory",
        f"rlcli play hf://{repo_id} --video agent.mp4  # or a window, where there is a display",
        f"rlcli eval hf://{repo_id} --episodes {n}",
        "```", "",
        "Train the same configuration again from scratch (after the `pull` above):", "",
        "```bash",
        retrain_command(run_dir, f"{local}/{HYPERPARAMS}"),
        "```", "",
    ]
    if onnx_spec is not None:
        lines += [f"`{ONNX}` is the deterministic policy as an ONNX graph (observation in, action out, "
                  f"normalisation included; a recurrent policy's state in and out, a masked one's action mask "
                  f"in), for acting without rlcli or torch; `{onnx_spec}` describes its inputs and outputs.", ""]
    lines += [
        "## Hyperparameters", "",
        f"As `rlcli train --config` takes them (`{HYPERPARAMS}`); the full run configuration is in "
        f"`{checkpoint.CONFIG}`.", "",
        "```yaml", yaml.safe_dump(hyperparameters(run_dir), sort_keys=False).rstrip(), "```", "",
    ]
    if has_curve:
        lines += ["## Learning curve", "", f"![learning curve]({CURVE})", "",
                  "Evaluation return (mean ± std over the evaluation episodes) and the mean return of the "
                  "last 100 training episodes; TensorBoard logs in `tb/`, the same numbers in `metrics.csv`.", ""]
    versions = meta.get("versions", {})
    if versions:
        lines += ["## Versions", "", "| package | trained with |", "| --- | --- |"]
        lines += [f"| {name} | {version} |" for name, version in versions.items()]
        lines += ["", f"Published with rlcli {rlcli.__version__} on {results['date'][:10]}."]
    return "\n".join(lines) + "\n"


def against(results: dict[str, Any]) -> str:
    """`` against the scripted player`` where a game's headline was played against a fixed opponent."""
    return f" against the {results['opponent']} player, seats alternating" if "opponent" in results else ""


def game_lines(results: dict[str, Any]) -> list[str]:
    """The model card's table of a game's win, draw and loss rates per opponent and seat, and its rating."""
    if "opponents" not in results:
        return []
    lines = [f"Against fixed opponents ({results['episodes']} games from each seat, deterministic play):", "",
             "| opponent | seat | win | draw | loss |", "| --- | --- | ---: | ---: | ---: |"]
    for name, rates in results["opponents"].items():
        for seat in ("first_", "second_", ""):
            label = seat.rstrip("_") or "both"
            lines.append(f"| {name} | {label} | {rates[seat + 'win']:.1%} | {rates[seat + 'draw']:.1%} | "
                         f"{rates[seat + 'loss']:.1%} |")
    lines.append("")
    if "elo" in results:
        lines += [f"Self-play Elo rating at the end of training: {results['elo']:.0f} (its snapshots started at "
                  "1200; ratings are relative to the run's own pool).", ""]
    return lines


# ---------------------------------------------------------------------------------------------------
# Talking to the Hub


def _hf() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise UsageError('the Hub needs huggingface_hub: pip install "rlcli[hub]"') from None
    return huggingface_hub


def _network_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:  # huggingface_hub 2.x speaks HTTP through httpx2, whose errors are not OSErrors
        import httpx2

        errors.append(httpx2.TransportError)
    except ImportError:
        pass
    return tuple(errors)


@contextmanager
def _hub_errors(repo_id: str, doing: str) -> Iterator[None]:
    from huggingface_hub import errors

    where = endpoint()
    try:
        yield
    except UsageError:
        raise
    except (errors.RepositoryNotFoundError, errors.RevisionNotFoundError) as e:
        what = "revision" if isinstance(e, errors.RevisionNotFoundError) else "model"
        raise HubError(f"no such {what}: {repo_id} on {where} (or it is private and the token cannot read it)"
                       ) from None
    except errors.HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else None
        lines = (e.server_message or str(e)).strip().splitlines()
        detail = lines[0] if lines else "no detail"
        if status == 401:
            raise HubError(f"{where} rejected the Hugging Face token (401) while {doing}; log in again with "
                           "`hf auth login` or set HF_TOKEN") from None
        if status == 403:
            raise HubError(f"{where} refused {doing} (403: {detail}); the token needs write access there"
                           ) from None
        raise HubError(f"{where} answered {status} while {doing}: {detail}") from None
    except errors.HFValidationError as e:  # e.g. a revision or file name the library refuses to send
        raise HubError(f"huggingface_hub refused {doing}: {_validation_detail(e, repo_id)}") from None
    except errors.LocalEntryNotFoundError:
        raise HubError(f"cannot reach {where} and {repo_id} is not in the local cache; check the network "
                       "or HF_ENDPOINT") from None
    except _network_errors() as e:
        raise HubError(f"cannot reach the Hub at {where} ({type(e).__name__}) while {doing}; check the "
                       "network or HF_ENDPOINT") from None


def _api() -> Any:
    """An HfApi on the current endpoint with the user's token; raises HubError when there is none."""
    hf = _hf()
    token = hf.get_token()
    if token is None:
        raise HubError("no Hugging Face token: log in with `hf auth login` or set HF_TOKEN "
                       "(a token with write access)")
    return hf.HfApi(endpoint=endpoint(), token=token, library_name=LIBRARY_NAME,
                    library_version=rlcli.__version__)


def check_login() -> str:
    """The name of the user the token belongs to; HubError when there is no token, the Hub rejects
    it or cannot be reached."""
    api = _api()
    with _hub_errors("", "checking the token"):
        return api.whoami()["name"]


def upload(folder: Path, repo_id: str, *, private: bool = False, message: str | None = None) -> str:
    """Creates the model repo ``user/name`` if needed and uploads every file of ``folder`` in one
    commit; returns the repo's URL."""
    hf = _hf()
    parse_repo_id(repo_id)
    api = _api()
    check_login()  # a rejected token fails here, before anything is created
    with _hub_errors(repo_id, f"creating {repo_id}"):
        _create_model_repo(api, repo_id, private)
    operations = [hf.CommitOperationAdd(path_in_repo=path, path_or_fileobj=folder / path)
                  for path, _ in folder_files(folder)]
    with _hub_errors(repo_id, f"uploading to {repo_id}"):
        api.create_commit(repo_id, operations, repo_type="model",
                          commit_message=message or f"Upload rlcli agent from {folder.name}")
    return f"{endpoint()}/{repo_id}"


def _create_model_repo(api: Any, repo_id: str, private: bool) -> None:
    from huggingface_hub import errors

    try:
        api.create_repo(repo_id, repo_type="model", private=private)
        return
    except errors.HfHubHTTPError as e:
        if e.response is None or e.response.status_code != 409:
            raise
    # 409: the name is taken, by our model (publish again) or by a dataset or space of the same name
    if _exists(api, repo_id, "model"):
        return
    other = next((kind for kind in ("dataset", "space") if _exists(api, repo_id, kind)), "repo of another type")
    raise HubError(f"{repo_id} already exists on {endpoint()} as a {other}, not a model; "
                   "choose another --repo-id")


def _exists(api: Any, repo_id: str, repo_type: str) -> bool:
    from huggingface_hub import errors

    try:
        api.repo_info(repo_id, repo_type=repo_type)
    except errors.RepositoryNotFoundError:
        return False
    return True


@contextmanager
def _progress_bars_on_terminals_only() -> Iterator[None]:
    """huggingface_hub draws its bars wherever stderr goes; in a log or a pipe they are noise."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    if sys.stderr.isatty() or are_progress_bars_disabled():
        yield
        return
    disable_progress_bars()
    try:
        yield
    finally:
        enable_progress_bars()


def download(name: str, local_dir: Path | None = None, *, acting_only: bool = False) -> Path:
    """The run directory of a published agent (``user/name``, ``hf://user/name``, ``@revision``
    allowed): into ``local_dir``, or huggingface_hub's cache (which also serves it offline) when None.
    ``acting_only`` fetches only what eval and play need."""
    hf = _hf()
    repo_id, revision = parse_repo_id(name)
    if (local_dir is not None and (local_dir / checkpoint.CONFIG).exists()
            and not (local_dir / ".cache" / "huggingface").is_dir()):  # snapshot_download's own bookkeeping
        raise UsageError(f"{local_dir} already holds a run that was not pulled from the Hub; "
                         "choose another --run-dir")
    with _hub_errors(repo_id, f"downloading {repo_id}"), _progress_bars_on_terminals_only():
        path = hf.snapshot_download(
            repo_id, repo_type="model", revision=revision, local_dir=local_dir, endpoint=endpoint(),
            allow_patterns=list(ACTING_FILES) if acting_only else None,
            library_name=LIBRARY_NAME, library_version=rlcli.__version__)
    run_dir = Path(path)
    if not (run_dir / checkpoint.CONFIG).is_file():
        raise HubError(f"{repo_id} is not an rlcli agent: it has no {checkpoint.CONFIG}")
    return run_dir
