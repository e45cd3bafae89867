"""Which env ids exist, on which backend, and which hyperparameter group they belong to."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from functools import lru_cache
from importlib.util import find_spec
from typing import NamedTuple

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, parse_env_id

from rlcli.envs import masked, partial  # noqa: F401  (register the velocity-hidden and masked tasks)
from rlcli.envs.atari_games import ATARI_GAMES
from rlcli.envs.envpool_import import import_envpool
from rlcli.envs.modules import import_user_module
from rlcli.envs.pettingzoo_ids import (
    KNOWN_NAMES,
    close_pettingzoo_ids,
    is_pettingzoo,
    pettingzoo_group,
    resolve_pettingzoo_id,
)
from rlcli.errors import UsageError

ATARI_PREFIX = "ALE/"
MJLAB_PREFIX = "Mjlab-"  # every task MJLab ships is named so
POPGYM_PREFIX = "popgym-"  # POPGym's partially observed tasks, registered when popgym is imported
# what each extra installs, as the messages name it
EXTRA_PACKAGES = {"atari": "ale-py", "mujoco": "MuJoCo", "memory": "POPGym", "multiagent": "PettingZoo"}
_VERSIONED = re.compile(r".+-v\d+")
# ale-py's spellings: Pong-v5, ALE/Pong-v5, Pong-ram-v5, PongNoFrameskip-v4, PongDeterministic-v4
_ATARI_ID = re.compile(r"(?:ALE/)?(?P<game>[A-Za-z0-9]+?)(?:-ram)?(?:NoFrameskip|Deterministic)?-v\d+")


@lru_cache(maxsize=1)
def envpool_ids() -> frozenset[str]:
    try:
        envpool = import_envpool()
    except ImportError:
        return frozenset()
    return frozenset(envpool.list_all_envs())


@lru_cache(maxsize=1)
def _envpool_domains() -> dict[str, str]:
    """{envpool id: what kind of task it is, spelled like gymnasium's env packages (atari, mujoco,
    classic_control, ...)}. envpool keeps the module of each task in its registry; an envpool without
    that table gives {} and its ids count as one kind."""
    try:
        import_envpool()
        from envpool.registration import registry
    except ImportError:
        return {}
    domains = {}
    for env_id, spec in getattr(registry, "specs", {}).items():
        module = str(spec[0]) if isinstance(spec, tuple) and spec else "envpool"
        domain = module.removeprefix("envpool.")
        domains[env_id] = "mujoco" if domain == "mujoco.gym" else domain  # gymnasium's MuJoCo tasks
    return domains


@lru_cache(maxsize=1)
def _register_atari() -> bool:
    try:
        import ale_py
    except ImportError:
        return False
    gym.register_envs(ale_py)
    return True


@lru_cache(maxsize=1)
def _register_popgym() -> bool:
    try:
        import popgym  # noqa: F401  (registers its ids with gymnasium)
    except ImportError:
        return False
    return True


def gymnasium_ids() -> list[str]:
    _register_atari()
    return list(gym.registry.keys())


def atari_available() -> bool:
    """Whether gymnasium can make Atari games (ale-py is installed; its ids are then registered)."""
    return _register_atari()


def import_env_module(module: str | None) -> None:
    """Import a user module that registers custom gymnasium ids (``--env-module``)."""
    if module is None:
        return
    import_user_module(module, "--env-module")


def envpool_name(env_id: str) -> str | None:
    """The envpool id for a gymnasium id, or None where envpool lacks the task."""
    name = env_id[len(ATARI_PREFIX):] if env_id.startswith(ATARI_PREFIX) else env_id
    return name if name in envpool_ids() else None


def entry_id(env_id: str) -> str:
    """The id a hyperparameter entry for ``env_id`` is keyed by: envpool's ``MuJoCoPlayground/X-v1`` is its
    ``X-v1``."""
    from rlcli.envs.playground_backend import PREFIX

    return env_id.removeprefix(PREFIX)


def gymnasium_name(env_id: str) -> str | None:
    """The gymnasium id for an id (envpool's ``Pong-v5`` is gymnasium's ``ALE/Pong-v5``)."""
    if env_id in gym.registry:  # before registering Atari: a CartPole process need not import ale_py
        return env_id
    if env_id.startswith(POPGYM_PREFIX) and _register_popgym() and env_id in gym.registry:
        return env_id
    ids = gymnasium_ids()
    if env_id in ids:
        return env_id
    if ATARI_PREFIX + env_id in ids:
        return ATARI_PREFIX + env_id
    return None


def resolve_backend(env_id: str, backend: str) -> str:
    """``auto`` picks envpool where it has the task, except classic control, where gymnasium's vector
    env is the faster one (8 CartPoles: 100k random steps/s against envpool's 73k); for those, for the
    ids only gymnasium can have (``_gymnasium_only``) and under ``--backend gymnasium`` envpool is not
    imported (2.5 s of a process: its XLA interface imports JAX). A PettingZoo environment's is
    ``pettingzoo``; an id no backend knows is a UsageError. ``torch`` (tasks written in torch, on the
    training device) is chosen by name alone; ``playground`` (MuJoCo Playground's MJX tasks, on the training
    device) by name, or by ``auto`` for a name only it has; ``mjlab`` (MJLab's tasks on MuJoCo Warp, on the
    training device) by name, or by ``auto`` for an ``Mjlab-`` id."""
    if is_pettingzoo(env_id):
        if backend != "auto":
            raise UsageError(f"{env_id} is a PettingZoo environment, which rlcli steps itself; "
                             f"drop --backend {backend}")
        return "pettingzoo"
    if backend == "torch":
        from rlcli.envs.torch_backend import torch_task

        torch_task(env_id)  # a UsageError naming the tasks it has
        return backend
    if backend == "playground":
        from rlcli.envs.playground_backend import playground_available, playground_name

        if playground_name(env_id) is None:
            hint = "" if playground_available() else " (it is not installed: pip install 'rlcli[playground]')"
            raise UsageError(f"MuJoCo Playground has no task '{env_id}'{hint}")
        return backend
    if backend == "mjlab" or (backend == "auto" and is_mjlab_id(env_id)):
        from rlcli.envs.mjlab_backend import check_task

        check_task(env_id)  # a UsageError where MJLab is missing or lacks the task
        return "mjlab"
    if backend == "auto" and _is_classic_control(env_id):
        return "gymnasium"
    on_envpool = backend != "gymnasium" and not _gymnasium_only(env_id) and envpool_name(env_id) is not None
    on_gym = backend != "envpool" and not on_envpool and gymnasium_name(env_id) is not None
    if backend == "envpool" and not on_envpool:
        hint = " (envpool is not installed: pip install 'rlcli[envpool]')" if not envpool_ids() else ""
        raise UsageError(f"envpool has no environment '{env_id}'{hint}; use --backend gymnasium")
    if backend == "gymnasium" and not on_gym:
        raise UsageError(unknown_env_message(env_id))
    if backend == "auto":
        if not (on_envpool or on_gym) and _playground_only(env_id):
            return "playground"
        if not (on_envpool or on_gym):
            raise UsageError(unknown_env_message(env_id))
        backend = "envpool" if on_envpool else "gymnasium"
    extra = missing_extra(env_id) if backend == "gymnasium" else None
    if extra is not None:  # gymnasium lists MuJoCo ids without MuJoCo; say so now, not when the env is made
        raise UsageError(missing_extra_message(env_id, extra))
    return backend


def is_mjlab_id(env_id: str) -> bool:
    """Whether ``env_id`` is spelled as MJLab names its tasks (``Mjlab-...``), asked without importing it."""
    return env_id.startswith(MJLAB_PREFIX)


def _playground_only(env_id: str) -> bool:
    """Whether MuJoCo Playground has ``env_id``, asked only of an unversioned name (Playground's spelling):
    its registry imports JAX, seconds that a mistyped gymnasium id should not wait for."""
    from rlcli.envs.playground_backend import playground_name

    return not _VERSIONED.fullmatch(env_id) and playground_name(env_id) is not None


def _is_classic_control(env_id: str) -> bool:
    # gym.registry directly: the id check must not import envpool or ale_py, whose cost it saves
    spec = gym.registry.get(env_id)
    return spec is not None and ".classic_control" in str(spec.entry_point)


def _gymnasium_only(env_id: str) -> bool:
    """Whether the id is one that envpool cannot have: rlcli's own tasks (MaskedChoice-v0, the NoVel ones)
    and POPGym's, which register with gymnasium alone."""
    if env_id.startswith(POPGYM_PREFIX):
        return True
    spec = gym.registry.get(env_id)
    entry = None if spec is None else spec.entry_point
    module = entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
    return module.startswith("rlcli.")


def unknown_env_message(env_id: str) -> str:
    """What to tell a user whose ``env_id`` no backend has: the extra to install where the id is one of a
    simulator that is missing, else close ids (the newest of close names, for a name without version)."""
    extra = missing_extra(env_id)
    if extra is not None:
        return missing_extra_message(env_id, extra)
    many = close_pettingzoo_ids(env_id)
    if many:
        return f"unknown environment '{env_id}'; did you mean {', '.join(many)}?"
    if _VERSIONED.fullmatch(env_id):
        known = sorted(set(gymnasium_ids()) | envpool_ids())
        close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
    else:  # close names, each as its newest id: what to type
        registered = _registered()
        names = sorted({f"{r.namespace}/{r.name}" if r.namespace else r.name for r in registered})
        close_names = difflib.get_close_matches(env_id, names, n=3, cutoff=0.6)
        close = [newest.env_id for name in close_names for newest in _families(name, registered)]
    hint = f"did you mean {', '.join(close)}?" if close else "see gymnasium.pprint_registry() for ids"
    return f"unknown environment '{env_id}'; {hint}"


def looks_atari(env_id: str) -> bool:
    """Whether ``env_id`` is spelled as an id of an ALE game (``Pong-v5``, ``ALE/Pong-v5``,
    ``PongNoFrameskip-v4``), by a game list shipped with rlcli: ale-py may not be there to ask."""
    match = _ATARI_ID.fullmatch(env_id)
    return match is not None and match["game"] in ATARI_GAMES


def missing_extra(env_id: str) -> str | None:
    """The rlcli extra ("atari", "mujoco") that the gymnasium backend needs for ``env_id`` and that is not
    installed, or None."""
    spec = gym.registry.get(env_id)
    if spec is not None:  # registered: an Atari id is registered only by ale-py itself
        return "mujoco" if _domain(spec) == "mujoco" and find_spec("mujoco") is None else None
    if looks_atari(env_id) and not atari_available():
        return "atari"
    if env_id.startswith(POPGYM_PREFIX) and find_spec("popgym") is None:
        return "memory"
    package = env_id.split(".", 1)[0] if "." in env_id else next(
        (package for package, names in KNOWN_NAMES.items() if env_id in names), None)
    if package in KNOWN_NAMES and find_spec(package) is None:
        return "multiagent"
    return None


def missing_extra_message(env_id: str, extra: str) -> str:
    """One line naming the package ``env_id`` needs and the pip command that installs it."""
    return f"{env_id} needs {EXTRA_PACKAGES[extra]}, which is not installed: pip install 'rlcli[{extra}]'"


class _Registered(NamedTuple):
    """One registered id, split as gymnasium parses ids."""

    env_id: str  # as rlcli spells it: envpool's Pong-v5 for gymnasium's ALE/Pong-v5
    namespace: str | None  # None for ALE/ too: rlcli takes Pong-v5 and ALE/Pong-v5 as one id
    name: str
    version: int
    domain: str  # atari, mujoco, classic_control, ...: which simulator, as ids of one name may differ in it


def resolve_env_id(name: str) -> tuple[str, str | None]:
    """The full env id for ``name`` and a one-line note of what it resolved to (None where ``name`` is an
    id already). A bare name resolves to its newest version on gymnasium or envpool: ``Ant`` to ``Ant-v5``,
    ``Pong`` and ``ALE/Pong`` to ``Pong-v5`` and ``ALE/Pong-v5``; an ALE game name to its v5 id even where
    no Atari package is installed (making it then says which to install). Call ``import_env_module``
    first for custom ids. PettingZoo's environments resolve by module path or bare name (``connect_four_v3``
    to ``pettingzoo.classic.connect_four_v3``); an ``Mjlab-`` id is MJLab's, as it is. A UsageError where no
    id, or ids of different environments, have that name."""
    if _VERSIONED.fullmatch(name) or name in gym.registry or is_mjlab_id(name):
        return name, None
    multiagent = resolve_pettingzoo_id(name)
    if multiagent is not None:
        return multiagent
    atari_only = name.startswith(ATARI_PREFIX)
    families = _families(name.removeprefix(ATARI_PREFIX), _registered(), atari_only)
    if not families:
        game = name.removeprefix(ATARI_PREFIX)
        if game not in ATARI_GAMES:
            raise UsageError(unknown_env_message(name))
        env_id = f"{game}-v5"
    elif len(families) > 1:
        listed = ", ".join(f"{newest.env_id} ({newest.domain})" for newest in families)
        raise UsageError(f"'{name}' names different environments: {listed}; give one of these ids")
    else:
        env_id = families[0].env_id
    env_id = ATARI_PREFIX + env_id if atari_only else env_id
    return env_id, f"{name} resolves to {env_id}"


def _families(name: str, registered: Iterable[_Registered], atari_only: bool = False) -> list[_Registered]:
    """The newest id of each environment named ``name`` (namespace, name and domain equal), sorted by id.
    Ids without a namespace hide namespaced ones (CartPole-v1 over phys2d/CartPole-v1); the name is
    matched exactly, else ignoring case."""
    namespace, _, bare = name.rpartition("/")
    candidates = [r for r in registered if not atari_only or r.domain == "atari"]
    if namespace:
        candidates = [r for r in candidates if r.namespace == namespace]
    else:
        plain = [r for r in candidates if r.namespace is None]
        candidates = plain if any(r.name.lower() == bare.lower() for r in plain) else candidates
    matches = [r for r in candidates if r.name == bare] or [r for r in candidates if r.name.lower() == bare.lower()]
    newest: dict[tuple[str | None, str, str], _Registered] = {}
    for r in matches:
        key = (r.namespace, r.name, r.domain)
        if key not in newest or r.version > newest[key].version:
            newest[key] = r
    return sorted(newest.values(), key=lambda r: r.env_id)


def _registered() -> list[_Registered]:
    """Every versioned id gymnasium (with Atari registered) and envpool know, once: an id on both is
    gymnasium's (envpool labels its copies of gymnasium's tasks by its own modules)."""
    found: dict[str, _Registered] = {}
    for env_id in gymnasium_ids():
        domain = _domain(gym.registry[env_id])
        if domain is not None:
            registered = _split(env_id, domain)
            found[registered.env_id] = registered
    domains = _envpool_domains()
    for env_id in envpool_ids() - found.keys():
        found[env_id] = _split(env_id, domains.get(env_id, "envpool"))
    return [r for r in found.values() if r.version >= 0]


def _split(env_id: str, domain: str) -> _Registered:
    namespace, name, version = parse_env_id(env_id)
    if namespace == "ALE":
        namespace, env_id = None, env_id.removeprefix(ATARI_PREFIX)
    return _Registered(env_id, namespace, name, -1 if version is None else version, domain)


def _domain(spec: EnvSpec) -> str | None:
    """Which simulator a gymnasium id runs on: atari, a gymnasium env package (mujoco, box2d,
    classic_control, ...) or the top package of a custom entry point; None for the placeholders gymnasium
    keeps for ids it can no longer make (mujoco-py's v2/v3), which only raise."""
    entry = spec.entry_point
    if callable(entry) and entry.__module__.startswith("gymnasium") and entry.__name__.startswith("_raise"):
        return None
    module = entry.split(":")[0] if isinstance(entry, str) else str(getattr(entry, "__module__", ""))
    if module.startswith("ale_py"):
        return "atari"
    parts = module.split(".")
    return parts[2] if parts[:2] == ["gymnasium", "envs"] and len(parts) > 2 else parts[0]


def env_group(env_id: str) -> str:
    """Hyperparameter group: atari, mujoco, dmc, playground, mjlab, box2d or classic; for PettingZoo's, games, mpe
    or multiagent."""
    if is_pettingzoo(env_id):
        return pettingzoo_group(env_id)
    if is_mjlab_id(env_id):
        return "mjlab"
    gym_id = gymnasium_name(env_id)
    if env_id.startswith(ATARI_PREFIX) or (gym_id or "").startswith(ATARI_PREFIX):
        return "atari"
    if gym_id is None:  # envpool's alone, or an Atari id whose packages are missing
        # a MuJoCo Playground name without envpool's -v1 (CartpoleBalance) takes its envpool task's group
        domain = _envpool_domains().get(env_id) or _envpool_domains().get(f"{env_id}-v1")
        if domain == "atari" or (domain is None and looks_atari(env_id)):
            return "atari"
        if domain == "mujoco.dmc":  # DeepMind Control Suite tasks, as envpool ships them
            return "dmc"
        if domain == "mujoco.playground":  # MuJoCo Playground's robots, as envpool ships them
            return "playground"
        return domain if domain in ("mujoco", "box2d") else "classic"
    entry = str(gym.spec(gym_id).entry_point)
    for group in ("mujoco", "box2d", "classic_control"):
        if f".{group}" in entry:
            return "classic" if group == "classic_control" else group
    return "classic"
