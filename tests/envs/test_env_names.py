"""What a new user types for an environment: bare names, Atari or MuJoCo ids without their packages, and
custom envs whose own code fails, each answered with one line."""

import subprocess
import sys
from importlib.util import find_spec

import gymnasium as gym
import pytest
from gymnasium.envs.classic_control import CartPoleEnv
from gymnasium.envs.registration import EnvSpec
from typer.testing import CliRunner

from rlcli.cli import app
from rlcli.envs import env_group, make_vec_env, registry
from rlcli.envs.atari_games import ATARI_GAMES
from rlcli.envs.registry import looks_atari, resolve_backend, resolve_env_id, unknown_env_message
from rlcli.errors import UsageError

runner = CliRunner()
ATARI_INSTALLED = find_spec("ale_py") is not None or find_spec("envpool") is not None


def _register(monkeypatch, env_id: str, entry_point) -> None:
    monkeypatch.setitem(gym.registry, env_id, EnvSpec(env_id, entry_point=entry_point))


def _clear_caches() -> None:
    registry.envpool_ids.cache_clear()
    registry._envpool_domains.cache_clear()
    registry._register_atari.cache_clear()


def _hide(monkeypatch, *packages: str) -> None:
    """Imports of ``packages`` fail as if they were not installed, submodules an earlier test imported too
    (``importlib.import_module`` returns those straight from ``sys.modules``)."""
    for module in [m for m in sys.modules if m.split(".")[0] in packages] + list(packages):
        monkeypatch.setitem(sys.modules, module, None)


@pytest.fixture
def without_atari_packages(monkeypatch):
    """As on a machine without ale-py and envpool: their imports fail and ale-py's ids are not registered."""
    _clear_caches()
    _hide(monkeypatch, "ale_py", "envpool")
    for env_id in [k for k, spec in gym.registry.items() if "ale_py" in str(spec.entry_point)]:
        monkeypatch.delitem(gym.registry, env_id)
    yield
    _clear_caches()  # the next caller, after monkeypatch's undo, sees the real packages again


@pytest.fixture
def without_mujoco(monkeypatch):
    _clear_caches()
    _hide(monkeypatch, "mujoco", "envpool")
    yield
    _clear_caches()


def _one_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


# --- bare names -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, full", [
    ("Ant", "Ant-v5"), ("Hopper", "Hopper-v5"), ("HumanoidStandup", "HumanoidStandup-v5"),
    ("CartPole", "CartPole-v1"),  # not ambiguous with gymnasium's phys2d/CartPole-v1: a namespace must be asked for
    ("Pendulum", "Pendulum-v1"), ("cartpole", "CartPole-v1"),  # case only matters where it decides
    ("Pong", "Pong-v5"), ("ALE/Pong", "ALE/Pong-v5"), ("BeamRider", "BeamRider-v5"),
])
def test_a_bare_name_resolves_to_its_newest_version(name, full):
    assert resolve_env_id(name) == (full, f"{name} resolves to {full}")


@pytest.mark.parametrize("env_id", ["Ant-v4", "CartPole-v1", "ALE/Pong-v5", "NoSuchEnv-v3"])
def test_a_full_id_is_kept_without_a_note(env_id):
    assert resolve_env_id(env_id) == (env_id, None)  # an unknown one is resolve_backend's to report


def test_versions_compare_as_numbers_and_custom_ids_count(monkeypatch):
    for version in (0, 9, 10):
        _register(monkeypatch, f"MyWalker-v{version}", "my_walkers:Walker")
    assert resolve_env_id("MyWalker") == ("MyWalker-v10", "MyWalker resolves to MyWalker-v10")
    _register(monkeypatch, "Unversioned", "my_walkers:Walker")
    assert resolve_env_id("Unversioned") == ("Unversioned", None)


def test_a_name_of_different_environments_lists_them(monkeypatch):
    _register(monkeypatch, "labA/Twin-v0", "lab_a:Twin")
    _register(monkeypatch, "labB/Twin-v2", "lab_b:Twin")
    with pytest.raises(UsageError) as e:
        resolve_env_id("Twin")
    assert str(e.value) == "'Twin' names different environments: labA/Twin-v0 (lab_a), labB/Twin-v2 (lab_b); " \
                           "give one of these ids"
    assert resolve_env_id("labB/Twin") == ("labB/Twin-v2", "labB/Twin resolves to labB/Twin-v2")


@pytest.mark.skipif(not ATARI_INSTALLED, reason="needs ale-py or envpool for the Atari Blackjack")
def test_the_card_game_and_the_atari_game_are_both_named_blackjack():
    with pytest.raises(UsageError, match=r"'Blackjack' names different environments: Blackjack-v1 \(toy_text\), "
                                         r"Blackjack-v5 \(atari\); give one of these ids"):
        resolve_env_id("Blackjack")


def test_an_unknown_bare_name_suggests_the_newest_ids_of_close_names():
    with pytest.raises(UsageError) as e:
        resolve_env_id("Antt")
    assert str(e.value) == "unknown environment 'Antt'; did you mean Ant-v5?"
    with pytest.raises(UsageError) as e:
        resolve_backend("Ant", "auto")  # a caller that does not resolve names first
    assert str(e.value) == "unknown environment 'Ant'; did you mean Ant-v5?"


def test_existing_callers_still_take_full_ids():
    assert resolve_backend("CartPole-v1", "auto") == "gymnasium"
    assert env_group("Hopper-v5") == "mujoco" and env_group("CartPole-v1") == "classic"
    with pytest.raises(UsageError, match="unknown environment 'CartPol-v1'; did you mean CartPole-v1"):
        resolve_backend("CartPol-v1", "auto")


# --- Atari and MuJoCo ids without their packages -----------------------------------------------------------

@pytest.mark.parametrize("env_id, atari", [
    ("Pong-v5", True), ("ALE/BeamRider-v5", True), ("PongNoFrameskip-v4", True), ("Breakout-ram-v5", True),
    ("Pong", False), ("Pongo-v5", False), ("CartPole-v1", False), ("ALE/CartPole-v5", False),
])
def test_atari_ids_are_recognised_by_their_spelling(env_id, atari):
    assert looks_atari(env_id) is atari


def test_the_game_list_is_that_of_the_installed_atari_packages():
    games: set[str] = set()
    if find_spec("ale_py") is not None:
        import ale_py

        gym.register_envs(ale_py)
        games |= {spec.name for spec in gym.registry.values() if spec.namespace == "ALE" and "-ram" not in spec.name}
    if find_spec("envpool") is not None:
        games |= {env_id.removesuffix("-v5") for env_id, domain in registry._envpool_domains().items()
                  if domain == "atari"}
    if not games:
        pytest.skip("neither ale-py nor envpool is installed")
    assert games <= ATARI_GAMES
    if find_spec("ale_py") is not None and find_spec("envpool") is not None:
        assert games == ATARI_GAMES  # nothing in the list that neither package has


@pytest.mark.parametrize("env_id", ["BeamRider-v5", "ALE/Pong-v5", "PongNoFrameskip-v4"])
def test_an_atari_id_without_its_packages_names_the_extra(without_atari_packages, env_id):
    assert unknown_env_message(env_id) == f"{env_id} needs ale-py, which is not installed: pip install 'rlcli[atari]'"
    assert env_group(env_id) == "atari"  # its hyperparameters still the Atari ones


def test_other_unknown_ids_still_get_close_matches(without_atari_packages):
    assert unknown_env_message("CartPol-v1").startswith("unknown environment 'CartPol-v1'; did you mean CartPole-v1")
    assert resolve_env_id("Pong") == ("Pong-v5", "Pong resolves to Pong-v5")  # then made: the extra to install


def test_benchmark_of_the_atari_suite_without_its_packages(without_atari_packages, tmp_path):
    result = runner.invoke(app, ["benchmark", "--envs", "atari", "--dry-run", "--out", str(tmp_path / "b")])
    assert _one_line(result) == "error: BeamRider-v5 needs ale-py, which is not installed: pip install 'rlcli[atari]'"


def test_train_on_an_atari_id_without_its_packages(without_atari_packages, tmp_path):
    result = runner.invoke(app, ["train", "ALE/Pong-v5", "--run-dir", str(tmp_path / "r")])
    assert _one_line(result) == "error: ALE/Pong-v5 needs ale-py, which is not installed: pip install 'rlcli[atari]'"


def test_a_mujoco_id_without_mujoco_names_the_extra_before_anything_is_made(without_mujoco):
    message = "Hopper-v5 needs MuJoCo, which is not installed: pip install 'rlcli[mujoco]'"
    for backend in ("auto", "gymnasium"):
        with pytest.raises(UsageError) as e:
            resolve_backend("Hopper-v5", backend)
        assert str(e.value) == message


def test_benchmark_of_the_mujoco_suite_without_mujoco(without_mujoco, tmp_path):
    result = runner.invoke(app, ["benchmark", "--envs", "mujoco", "--dry-run", "--out", str(tmp_path / "b")])
    assert _one_line(result) == "error: Hopper-v5 needs MuJoCo, which is not installed: pip install 'rlcli[mujoco]'"


# --- custom envs whose own code fails ----------------------------------------------------------------------

class NoRenderMode(CartPoleEnv):
    def __init__(self) -> None:  # gymnasium's Env API wants render_mode
        super().__init__()


class RaisesInInit(CartPoleEnv):
    def __init__(self, render_mode: str | None = None) -> None:
        raise RuntimeError("the simulator's licence file is missing")


def test_a_constructor_that_raises_is_one_line_naming_the_id(monkeypatch):
    _register(monkeypatch, "RaisesInInit-v0", RaisesInInit)
    with pytest.raises(UsageError) as e:
        make_vec_env("RaisesInInit-v0", 2, 0)
    assert str(e.value) == ("environment 'RaisesInInit-v0' could not be made: RuntimeError: the simulator's licence "
                            "file is missing (rlcli --debug shows the traceback)")
    assert isinstance(e.value.__cause__, RuntimeError)  # what --debug shows


def test_an_entry_point_without_render_mode_trains_and_rendering_it_says_what_to_add(monkeypatch):
    _register(monkeypatch, "NoRenderMode-v0", NoRenderMode)
    env = make_vec_env("NoRenderMode-v0", 1, 0, backend="gymnasium")  # render_mode is passed only to render
    assert env.reset().shape[0] == 1
    env.close()
    with pytest.raises(UsageError) as e:
        make_vec_env("NoRenderMode-v0", 1, 0, render_mode="rgb_array")
    message = str(e.value)
    assert message.startswith("environment 'NoRenderMode-v0' could not be made: TypeError: ")
    assert "unexpected keyword argument 'render_mode'" in message and "\n" not in message
    assert "its constructor must take render_mode=None" in message


def test_an_entry_point_that_cannot_be_imported(monkeypatch):
    _register(monkeypatch, "Elsewhere-v0", "no_such_module_for_rlcli:Env")
    with pytest.raises(UsageError, match="^environment 'Elsewhere-v0' could not be made: ModuleNotFoundError: "
                                         "No module named 'no_such_module_for_rlcli'"):
        make_vec_env("Elsewhere-v0", 1, 0)


@pytest.mark.skipif(find_spec("envpool") is None, reason="envpool is not installed")
def test_a_keyword_envpool_does_not_take_is_one_line():
    with pytest.raises(UsageError, match="^environment 'CartPole-v1' could not be made: TypeError: .*'foo'"):
        make_vec_env("CartPole-v1", 1, 0, "envpool", kwargs={"foo": 1})


def test_train_on_a_failing_env_is_one_line_and_debug_shows_the_traceback(monkeypatch, tmp_path):
    _register(monkeypatch, "RaisesInInit-v0", RaisesInInit)
    monkeypatch.setenv("RLCLI_DEBUG", "")  # --debug sets it; monkeypatch puts it back
    args = ["train", "RaisesInInit-v0", "--steps", "64", "--run-dir", str(tmp_path / "r")]
    assert _one_line(runner.invoke(app, args)) == (
        "error: environment 'RaisesInInit-v0' could not be made: RuntimeError: the simulator's licence file is "
        "missing (rlcli --debug shows the traceback)")
    debug = runner.invoke(app, ["--debug", *args[:-1], str(tmp_path / "r2")])
    assert isinstance(debug.exception, UsageError) and isinstance(debug.exception.__cause__, RuntimeError)


@pytest.fixture
def without_pettingzoo(monkeypatch):
    from rlcli.envs import pettingzoo_ids

    pettingzoo_ids._bare_names.cache_clear()
    _hide(monkeypatch, "pettingzoo", "mpe2")
    yield
    pettingzoo_ids._bare_names.cache_clear()


@pytest.mark.parametrize("env_id", ["mpe2.simple_spread_v3", "pettingzoo.classic.connect_four_v3", "tictactoe_v3",
                                    "simple_spread_v3"])
def test_a_pettingzoo_id_without_its_packages_names_the_extra(without_pettingzoo, tmp_path, env_id):
    result = runner.invoke(app, ["train", env_id, "--run-dir", str(tmp_path / "r")])
    assert _one_line(result) == (f"error: {env_id} needs PettingZoo, which is not installed: "
                                 "pip install 'rlcli[multiagent]'")


def test_other_names_without_pettingzoo_still_get_close_matches(without_pettingzoo):
    assert unknown_env_message("cartpole_v1").startswith("unknown environment 'cartpole_v1'; did you mean CartPole")


def test_a_particle_world_without_mpe2_names_the_extra(monkeypatch):
    from rlcli.envs import pettingzoo_ids

    pettingzoo_ids._bare_names.cache_clear()
    _hide(monkeypatch, "mpe2")
    try:
        assert unknown_env_message("simple_spread_v3") == (
            "simple_spread_v3 needs PettingZoo, which is not installed: pip install 'rlcli[multiagent]'")
    finally:
        pettingzoo_ids._bare_names.cache_clear()


@pytest.mark.skipif(find_spec("mujoco") is None or find_spec("envpool") is None, reason="needs MuJoCo and envpool")
def test_the_gymnasium_backend_resolves_trains_and_steps_without_importing_envpool():
    """Asked for gymnasium's env, envpool is never imported to see whether it has the task too (its import takes a
    process 2.5 s), and envpool's tasks still resolve to it."""
    code = ("import sys; from rlcli.algos import resolve; from rlcli.envs import make_vec_env; "
            "from rlcli.envs.registry import resolve_backend; "
            "assert resolve_backend('Hopper-v5', 'gymnasium') == 'gymnasium'; "
            "cfg = resolve('sac', 'Hopper-v5', backend='gymnasium'); "
            "env = make_vec_env('Hopper-v5', 2, 0, 'gymnasium'); env.reset(); env.close(); "
            "print(cfg.env.backend, sorted(m for m in sys.modules if m.split('.')[0] == 'envpool'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "gymnasium []"
    assert resolve_backend("Hopper-v5", "auto") == resolve_backend("Hopper-v5", "envpool") == "envpool"
