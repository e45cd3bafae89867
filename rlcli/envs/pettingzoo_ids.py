"""PettingZoo environments by name: a module path (``pettingzoo.classic.connect_four_v3``,
``mpe2.simple_spread_v3``, or any package's module with PettingZoo's ``env``/``parallel_env``), or
PettingZoo's own bare names (``connect_four_v3``), found among the packages below without importing them."""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import re
from functools import lru_cache
from importlib.util import find_spec
from types import ModuleType

from rlcli.errors import UsageError

# bare names of the environments each package ships (mpe2 1.1, PettingZoo 1.27), to name the extra that a
# name needs where its package is not installed
KNOWN_NAMES = {
    "mpe2": frozenset((
        "collect_treasure_v1", "simple_adversary_v3", "simple_crypto_v3", "simple_formation_v1", "simple_line_v1",
        "simple_push_v3", "simple_reference_v3", "simple_speaker_listener_v4", "simple_spread_v3", "simple_tag_v3",
        "simple_v3", "simple_world_comm_v3",
    )),
    "pettingzoo": frozenset((
        "basketball_pong_v3", "boxing_v2", "chess_v6", "combat_plane_v2", "combat_tank_v2", "connect_four_v3",
        "cooperative_pong_v6", "double_dunk_v3", "entombed_competitive_v3", "entombed_cooperative_v3",
        "flag_capture_v2", "foozpong_v3", "go_v5", "hanabi_v5", "ice_hockey_v2", "joust_v3",
        "knights_archers_zombies_v11", "leduc_holdem_v4", "mario_bros_v3", "maze_craze_v3", "multiwalker_v9",
        "othello_v3", "pistonball_v6", "pong_v3", "pursuit_v5", "quadrapong_v4", "rps_v2", "space_invaders_v2",
        "space_war_v2", "surround_v2", "tennis_v3", "texas_holdem_no_limit_v6", "texas_holdem_v4", "tictactoe_v3",
        "video_checkers_v4", "volleyball_pong_v3", "warlords_v3", "wizard_of_wor_v3",
    )),
}

# where bare names are looked for, in this order; mpe2 holds the particle worlds PettingZoo moved out
PACKAGES = ("pettingzoo.classic", "mpe2", "pettingzoo.butterfly", "pettingzoo.sisl", "pettingzoo.atari")
_NAME = re.compile(r"[a-z0-9_]+_v\d+")
_MODULE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+")


@lru_cache(maxsize=1)
def _bare_names() -> dict[str, str]:
    """{bare name: module path} for the environment modules of ``PACKAGES`` that are installed."""
    names: dict[str, str] = {}
    for package in PACKAGES:
        try:
            spec = find_spec(package)
        except ModuleNotFoundError:
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        for info in pkgutil.iter_modules(spec.submodule_search_locations):
            if _NAME.fullmatch(info.name):
                names.setdefault(info.name, f"{package}.{info.name}")
    return names


def pettingzoo_path(env_id: str) -> str | None:
    """The module path of a PettingZoo environment named ``env_id``, or None where it names none (a
    gymnasium or envpool id). Looks only at names: nothing is imported."""
    if _NAME.fullmatch(env_id):
        return _bare_names().get(env_id)
    if _MODULE.fullmatch(env_id) and _NAME.fullmatch(env_id.rsplit(".", 1)[1]):
        try:
            return env_id if find_spec(env_id) is not None else None
        except ModuleNotFoundError:
            return None
    return None


def close_pettingzoo_ids(env_id: str) -> list[str]:
    """PettingZoo ids spelled like ``env_id`` (a bare name or a module path ending in ``NAME_vN``), closest
    first; empty for an id of another form."""
    last = env_id.rsplit(".", 1)[-1]
    if not re.fullmatch(r"[A-Za-z0-9_]+_v\d+", last):
        return []
    installed = _bare_names()
    shipped = {f"{package}.{name}" if package == "mpe2" else name
               for package, names in KNOWN_NAMES.items() for name in names}
    known = sorted(set(installed) | set(installed.values()) | shipped)
    return difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)


def is_pettingzoo(env_id: str) -> bool:
    return pettingzoo_path(env_id) is not None


def resolve_pettingzoo_id(name: str) -> tuple[str, str | None] | None:
    """(the full module path, a note saying what a bare name resolved to), or None where ``name`` is no
    PettingZoo environment."""
    path = pettingzoo_path(name)
    if path is None:
        return None
    return path, (None if path == name else f"{name} resolves to {path}")


def pettingzoo_module(env_id: str) -> ModuleType:
    """The environment's module (with ``env()`` and, for simultaneous games, ``parallel_env()``)."""
    path = pettingzoo_path(env_id)
    if path is None:
        raise UsageError(f"unknown PettingZoo environment '{env_id}'")
    try:
        module = importlib.import_module(path)
    except ImportError as e:
        raise UsageError(f"{path} could not be imported: {e} (PettingZoo's games: pip install "
                         "'pettingzoo[classic]'; the particle worlds: pip install mpe2)") from None
    if not hasattr(module, "env") and not hasattr(module, "parallel_env"):
        raise UsageError(f"{path} has neither env() nor parallel_env(): it is not a PettingZoo environment")
    return module


def is_turn_based(env_id: str) -> bool:
    """Whether agents take turns (PettingZoo's AEC games without a parallel form, such as board games)."""
    return not hasattr(pettingzoo_module(env_id), "parallel_env")


def pettingzoo_group(env_id: str) -> str:
    """Hyperparameter group: ``games`` for turn-based games, ``mpe`` for the particle worlds, else
    ``multiagent``."""
    path = pettingzoo_path(env_id) or env_id
    if path.startswith("mpe2.") or path.startswith("pettingzoo.mpe."):
        return "mpe"
    return "games" if is_turn_based(env_id) else "multiagent"
