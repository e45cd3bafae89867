"""Gymnasium envs' state as plain data, so that a checkpoint resumes in the middle of their episodes.

``capture`` walks a SyncVectorEnv, each of its envs' wrappers and the unwrapped env, and keeps every attribute
that is data: numpy arrays, Python and numpy scalars, strings, None, and tuples, lists, deques and dicts of
those (of exactly those types); a numpy random generator as its bit generator's state (a space as its
generator's); MuJoCo's MjData as its integration state (``mj_getState``, what ``mj_step`` needs to repeat a
step to the bit) with every array derived from it (what an env reads of the last step before stepping again,
such as a body's position). Attributes that configure an env rather than hold its state (the wrapped envs,
specs, enums, dtypes, callables, MuJoCo's model and renderer) are passed over, and so is a container holding
one. Any other object is state this cannot read: ``capture`` raises EnvStateUnreadable naming it, and a resume
restarts the episodes.

Nothing is pickled: the arrays' bytes go into one tensor, everything else into JSON.
"""

from __future__ import annotations

import sys
import types
from collections import OrderedDict, deque
from collections.abc import Mapping
from enum import Enum
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

# modules whose objects configure an env (its renderer) rather than hold its state
CONFIGURATION_MODULES = ("gymnasium.envs.mujoco.mujoco_rendering",)


class Snapshot(NamedTuple):
    """Live state as JSON values and tensors (a checkpoint's ``resume.safetensors`` holds both)."""

    values: dict[str, Any]
    tensors: dict[str, torch.Tensor]

    @staticmethod
    def of(parts: Mapping[str, Snapshot]) -> Snapshot:
        """One snapshot of named parts, which ``part`` gives back."""
        return Snapshot({name: part.values for name, part in parts.items()},
                        {f"{name}/{key}": t for name, part in parts.items() for key, t in part.tensors.items()})

    def cpu(self) -> Snapshot:
        return Snapshot(self.values, {key: t.cpu() for key, t in self.tensors.items()})

    def part(self, name: str) -> Snapshot:
        prefix = f"{name}/"
        tensors = {key[len(prefix):]: t for key, t in self.tensors.items() if key.startswith(prefix)}
        return Snapshot(self.values[name], tensors)


class EnvStateUnreadable(Exception):
    """An env holds state that cannot be saved as data, or a saved state does not fit the env; the message
    says which."""


SKIPPED = object()  # an attribute that configures the env


def capture(vector: gym.vector.VectorEnv) -> Snapshot:
    """The state of ``vector`` (its autoreset flags and last results) and of each of its envs (a vector env
    that holds no envs, such as one stepping arrays, is one layer); raises EnvStateUnreadable where some of
    it cannot be read."""
    encoder = _Encoder()
    values = {"vector_class": _name(vector), "vector": encoder.layer(vector),
              "envs": [[{"class": _name(layer), "attrs": encoder.layer(layer)} for layer in _chain(env)]
                       for env in _envs(vector)]}
    blob = np.frombuffer(bytes(encoder.blob), dtype=np.uint8).copy()
    return Snapshot(values, {"bytes": torch.from_numpy(blob)})


def restore(vector: gym.vector.VectorEnv, snapshot: Snapshot) -> None:
    """Sets ``vector`` and its envs to a captured state; raises EnvStateUnreadable, before changing anything,
    where the envs are not those the state was captured from (their number or wrappers differ)."""
    saved = snapshot.values["envs"]
    # snapshots from before the class was recorded were all of a SyncVectorEnv
    saved_class = snapshot.values.get("vector_class", "gymnasium.vector.sync_vector_env.SyncVectorEnv")
    if saved_class != _name(vector):
        raise EnvStateUnreadable(f"the saved envs were a {saved_class.rsplit('.', 1)[-1]}, this is a "
                                 f"{_name(vector).rsplit('.', 1)[-1]}")
    chains = [_chain(env) for env in _envs(vector)]
    found = [[_name(layer) for layer in chain] for chain in chains]
    wanted = [[layer["class"] for layer in env] for env in saved]
    if found != wanted:
        raise EnvStateUnreadable(f"the saved envs were {_describe(wanted)}, these are {_describe(found)}")
    count = snapshot.values["vector"].get("num_envs")  # what tells a vector env of arrays' size
    if count is not None and count != vector.num_envs:
        raise EnvStateUnreadable(f"the saved envs were {count}, these are {vector.num_envs}")
    blob = snapshot.tensors["bytes"].numpy().tobytes()
    _restore_layer(vector, snapshot.values["vector"], blob)
    for chain, layers in zip(chains, saved, strict=True):
        for layer, state in zip(chain, layers, strict=True):
            _restore_layer(layer, state["attrs"], blob)


def _envs(vector: gym.vector.VectorEnv) -> list[gym.Env]:
    return list(vector.envs) if isinstance(vector, gym.vector.SyncVectorEnv) else []


def _chain(env: gym.Env) -> list[Any]:
    """The env's wrappers, outermost first, then the unwrapped env."""
    layers = [env]
    while isinstance(layers[-1], gym.Wrapper):
        layers.append(layers[-1].env)
    return layers


def _name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _describe(chains: list[list[str]]) -> str:
    kinds = {" < ".join(name.rsplit(".", 1)[-1] for name in chain) for chain in chains}
    return f"{len(chains)} of {', '.join(sorted(kinds))}"


def _is_configuration(value: Any) -> bool:
    mujoco = sys.modules.get("mujoco")
    return (isinstance(value, gym.Env | Enum | np.dtype | type | types.ModuleType | gym.envs.registration.EnvSpec)
            or callable(value) or (mujoco is not None and isinstance(value, mujoco.MjModel))
            or type(value).__module__.startswith(CONFIGURATION_MODULES))


class _Encoder:
    """Values -> JSON nodes, array bytes appended to one blob."""

    def __init__(self) -> None:
        self.blob = bytearray()

    def layer(self, obj: Any) -> dict[str, Any]:
        """The state of one object's own attributes (a wrapper's ``env`` is the next layer)."""
        out = {}
        for name, value in vars(obj).items():
            where = f"{type(obj).__name__}.{name}"
            try:
                node = self.encode(value, where)
            except EnvStateUnreadable:
                raise
            except Exception as e:  # an object of the user's that will not be read: no exact resume, no crash
                raise EnvStateUnreadable(f"{where} could not be read ({type(e).__name__}: {e})") from e
            if node is not SKIPPED:
                out[name] = node
        return out

    def encode(self, value: Any, where: str) -> Any:
        if isinstance(value, np.generic):
            return {"kind": "scalar", "value": self.array(np.asarray(value), where)}
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, np.ndarray):
            return self.array(value, where)
        # these types exactly: a subclass (a named tuple, a defaultdict) would come back as its base
        if type(value) in (list, tuple, deque):
            items = [self.encode(item, f"{where}[{i}]") for i, item in enumerate(value)]
            if any(item is SKIPPED for item in items):
                return SKIPPED
            kind = type(value).__name__
            return {"kind": kind, "items": items, **({"maxlen": value.maxlen} if kind == "deque" else {})}
        if type(value) in (dict, OrderedDict):
            return self.mapping(value, where)
        if isinstance(value, np.random.Generator):
            return {"kind": "generator", "state": self.encode(value.bit_generator.state, where)}
        if isinstance(value, np.random.RandomState):
            return {"kind": "random_state", "state": self.encode(value.get_state(legacy=False), where)}
        if isinstance(value, gym.spaces.Space):
            return {"kind": "space", "rng": self.encode(value._np_random, f"{where}.np_random")}
        mujoco = sys.modules.get("mujoco")
        if mujoco is not None and isinstance(value, mujoco.MjData):
            return self.mjdata(value, mujoco, where)
        if _is_configuration(value):
            return SKIPPED
        raise EnvStateUnreadable(f"{where} ({type(value).__name__}) cannot be saved as data")

    def mapping(self, value: dict, where: str) -> Any:
        items = []
        for key, item in value.items():
            if not isinstance(key, str | int) or isinstance(key, bool):
                raise EnvStateUnreadable(f"{where} has a {type(key).__name__} key, which cannot be saved as data")
            node = self.encode(item, f"{where}[{key!r}]")
            if node is SKIPPED:
                return SKIPPED
            items.append([key, node])
        return {"kind": type(value).__name__, "items": items}

    def array(self, value: np.ndarray, where: str) -> dict[str, Any]:
        if value.dtype.hasobject or value.dtype.fields is not None:
            raise EnvStateUnreadable(f"{where} (an array of {value.dtype}) cannot be saved as data")
        data = np.ascontiguousarray(value).tobytes()
        node = {"kind": "array", "at": [len(self.blob), len(data)], "dtype": value.dtype.str,
                "shape": list(value.shape)}
        self.blob += data
        return node

    def mjdata(self, data: Any, mujoco: Any, where: str) -> dict[str, Any]:
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.empty(mujoco.mj_stateSize(data.model, spec))
        mujoco.mj_getState(data.model, data, state, spec)
        fields = {name: self.array(array, f"{where}.{name}") for name, array in _mjdata_arrays(data).items()}
        return {"kind": "mjdata", "integration": self.array(state, where), "fields": fields}


def _mjdata_arrays(data: Any) -> dict[str, np.ndarray]:
    """Every array an MjData exposes: the state and what MuJoCo derived from it."""
    arrays = {}
    for name in dir(data):
        if not name.startswith("_"):
            value = getattr(data, name)
            if isinstance(value, np.ndarray):
                arrays[name] = value
    return arrays


def _restore_layer(obj: Any, attrs: dict[str, Any], blob: bytes) -> None:
    for name, node in attrs.items():
        setattr(obj, name, _decode(node, blob, getattr(obj, name, None)))


def _decode(node: Any, blob: bytes, current: Any = None) -> Any:
    """The value of a node; arrays, generators, spaces and MjData are restored into ``current`` where it
    fits (other objects may hold it too)."""
    if not isinstance(node, dict):
        return node
    kind = node["kind"]
    if kind == "array":
        offset, size = node["at"]
        value = np.frombuffer(blob, dtype=np.dtype(node["dtype"]), count=size // np.dtype(node["dtype"]).itemsize,
                              offset=offset).reshape(node["shape"]).copy()
        if isinstance(current, np.ndarray) and current.shape == value.shape and current.dtype == value.dtype \
                and current.flags.writeable:
            current[...] = value
            return current
        return value
    if kind == "scalar":
        return _decode(node["value"], blob)[()]
    if kind in ("list", "tuple", "deque"):
        items = [_decode(item, blob) for item in node["items"]]
        return items if kind == "list" else tuple(items) if kind == "tuple" else deque(items, node["maxlen"])
    if kind in ("dict", "OrderedDict"):
        return (dict if kind == "dict" else OrderedDict)((key, _decode(item, blob)) for key, item in node["items"])
    if kind == "generator":
        return _generator(_decode(node["state"], blob), current)
    if kind == "random_state":
        state = current if isinstance(current, np.random.RandomState) else np.random.RandomState()
        state.set_state(_decode(node["state"], blob))
        return state
    if kind == "space":
        if isinstance(current, gym.spaces.Space):
            current._np_random = _decode(node["rng"], blob, current._np_random)
        return current
    if kind == "mjdata":
        return _restore_mjdata(current, node, blob)
    raise EnvStateUnreadable(f"a saved env state holds an unknown kind of value, {kind!r}")


def _generator(state: dict[str, Any], current: Any) -> np.random.Generator:
    kind = state["bit_generator"]
    if not (isinstance(current, np.random.Generator) and type(current.bit_generator).__name__ == kind):
        current = np.random.Generator(getattr(np.random, state["bit_generator"])())
    current.bit_generator.state = state
    return current


def _restore_mjdata(data: Any, node: dict[str, Any], blob: bytes) -> Any:
    import mujoco

    if not isinstance(data, mujoco.MjData):
        raise EnvStateUnreadable(f"a saved MjData does not fit this env's {type(data).__name__}")
    mujoco.mj_setState(data.model, data, _decode(node["integration"], blob), mujoco.mjtState.mjSTATE_INTEGRATION)
    arrays = _mjdata_arrays(data)
    for name, field in node["fields"].items():
        array = arrays.get(name)
        # arrays sized by this step's contacts and constraints fit only where their number is the same; the
        # next step computes them again before reading them
        if array is not None and list(array.shape) == field["shape"] and array.dtype.str == field["dtype"] \
                and array.flags.writeable:
            array[...] = _decode(field, blob)
    return data
