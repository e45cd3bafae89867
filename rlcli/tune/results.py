"""What a study leaves: ``best.yml`` (hyperparameter-file entries, ready to paste), ``summary.json``, the
figures, and with ``--write`` the best entry put into ``hyperparams/ALGO.yml``.

An entry is the env's current entry with the best trial's sampled values merged in, so that default <-
group <- entry gives exactly the configuration the trial trained (its budget aside). ``--write`` edits the
file's text: only that env's entry (and a comment line above it naming the study) changes, every other
line and comment stays as it was.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from rlcli import config
from rlcli.algos import hyperparams_file
from rlcli.config import deep_merge
from rlcli.errors import UsageError
from rlcli.runs.checkpoint import atomic_write
from rlcli.tune.objective import stored_overrides
from rlcli.tune.plots import importances, save_plots
from rlcli.tune.spec import BEST, SUMMARY, TuneSpec
from rlcli.tune.storage import redact
from rlcli.tune.study import TrialRow, trial_rows

TUNE_COMMENT = "# rlcli tune"
TUNE_CONTINUED = "#   "


class Summary(NamedTuple):
    """The outcome of a study, as ``summary.json`` holds it."""

    counts: dict[str, int]  # trials by state
    best: TrialRow | None
    importances: dict[str, float]
    failed: list[TrialRow]
    plots: list[Path]
    best_yml: Path | None
    written: Path | None  # the hyperparameter file --write updated


def summarize(spec: TuneSpec, study: Any, write: bool = False) -> Summary:
    """Writes best.yml, summary.json and the figures into the study directory (and with ``write`` the
    best entries into ``hyperparams/ALGO.yml``); returns what they hold."""
    spec.study_dir.mkdir(parents=True, exist_ok=True)
    rows = trial_rows(study)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    scored = [(r.value, r) for r in rows if r.state == "complete" and r.value is not None]
    best = max(scored, key=lambda pair: pair[0])[1] if scored else None
    best_yml = written = None
    if best is not None:
        trial = next(t for t in study.get_trials(deepcopy=False) if t.number == best.number)
        entries = best_entries(spec, stored_overrides(trial.user_attrs, spec.env_ids))
        comment = describe(spec, best, counts)
        best_yml = spec.study_dir / BEST
        _write_text(best_yml, "\n".join(comment) + "\n" + "".join(
            "\n".join(entry_lines(env_id, entry)) + "\n" for env_id, entry in entries.items()))
        if write:
            written = hyperparams_file(spec.algo)
            apply_entries(written, entries, comment)
    found = importances(study)
    plots = save_plots(study, spec.study_dir)
    failed = [r for r in rows if r.state == "fail"]
    summary = Summary(counts, best, found, failed, plots, best_yml, written)
    _write_text(spec.study_dir / SUMMARY, json.dumps({
        "study": spec.study_name, "storage": redact(spec.storage), "env_ids": list(spec.env_ids), "algo": spec.algo,
        "steps": spec.steps, "seeds_per_trial": spec.seeds_per_trial, "sampler": spec.sampler, "pruner": spec.pruner,
        "trials": counts,
        "best": None if best is None else {"number": best.number, "value": best.value, "hyperparams": best.hyperparams},
        "importances": found,
        "failed": [{"number": r.number, "reason": r.reason} for r in failed],
        "plots": [p.name for p in plots], "best_yml": best_yml.name if best_yml else None,
        "written": str(written) if written else None,
    }, indent=2) + "\n")
    return summary


def best_entries(spec: TuneSpec, overrides: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per env id: its current hyperparameter entry with its ``overrides`` (per env id) merged in."""
    table = config.load_yaml(hyperparams_file(spec.algo))
    return {env_id: _plain(deep_merge(table.get(env_id) or {}, overrides[env_id])) for env_id in spec.env_ids}


def describe(spec: TuneSpec, best: TrialRow, counts: dict[str, int]) -> list[str]:
    """Comment lines naming where an entry came from (the first starts with TUNE_COMMENT, the others
    with TUNE_CONTINUED, so that a later --write finds and replaces them)."""
    what = "mean normalised score" if len(spec.env_ids) > 1 else "mean evaluated return"
    states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    return [f"{TUNE_COMMENT} {' '.join(spec.env_ids)} --algo {spec.algo} --steps {spec.steps}: best trial "
            f"{best.number} of {sum(counts.values())} ({states}),",
            f"{TUNE_CONTINUED}{what} {best.value:.4g} over {spec.seeds_per_trial} seed(s); study {spec.study_name} "
            f"in {redact(spec.storage)}."]


def entry_lines(env_id: str, entry: dict[str, Any]) -> list[str]:
    """``env_id``'s entry as hyperparams/*.yml writes them: block mappings, flow lists, 3.0e-4 floats."""
    key = env_id if yaml.safe_load(f"{env_id}: 0") == {env_id: 0} else json.dumps(env_id)
    if not entry:
        return [f"{key}: {{}}"]
    lines = [f"{key}:"] + _mapping_lines(entry, "  ")
    text = "\n".join(lines) + "\n"
    if yaml.safe_load(text) != {env_id: entry}:  # never write what would read back as something else
        text = yaml.safe_dump({env_id: entry}, sort_keys=False, default_flow_style=None)
        lines = text.rstrip("\n").splitlines()
    return lines


def apply_entries(path: Path, entries: dict[str, dict[str, Any]], comment: list[str]) -> None:
    """Replaces (or appends) each env's entry in the YAML file at ``path``, with ``comment`` above it,
    leaving every other line as it was."""
    try:
        text = path.read_text()
    except OSError as e:
        raise UsageError(f"cannot read {path} to write the tuned hyperparameters into it ({e.strerror})") from None
    before = yaml.safe_load(text) or {}
    lines = text.splitlines()
    for env_id, entry in entries.items():
        new = [*comment, *entry_lines(env_id, entry)]
        start = _entry_start(lines, env_id)
        if start is None:
            lines += ["", *new]
            continue
        end = start + 1
        while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
            end += 1
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1
        first = start  # an earlier tune's note above the entry goes too
        while first > 0 and lines[first - 1].startswith(TUNE_CONTINUED):
            first -= 1
        first = first - 1 if first > 0 and lines[first - 1].startswith(TUNE_COMMENT) else start
        lines[first:end] = new
    result = "\n".join(lines) + "\n"
    after = yaml.safe_load(result)
    expected = {**before, **entries}
    if after != expected:
        raise UsageError(f"could not edit {path} safely (its entries for {', '.join(entries)} are not plain "
                         "top-level mappings); paste best.yml into it by hand")
    _write_text(path, result)


def _entry_start(lines: list[str], env_id: str) -> int | None:
    for i, line in enumerate(lines):
        if not line or line[0] in " \t#":
            continue
        key = line.split(":", 1)[0].strip() if not line.startswith(('"', "'")) else None
        if key == env_id or (key is None and yaml.safe_load(line.rsplit(":", 1)[0] + ": 0") == {env_id: 0}):
            return i
    return None


def _mapping_lines(mapping: dict[str, Any], indent: str) -> list[str]:
    lines = []
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            lines += [f"{indent}{key}:", *_mapping_lines(value, indent + "  ")]
        else:
            lines.append(f"{indent}{key}: {_scalar(value)}")
    return lines


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in value.items()) + "}"
    text = str(value)
    return text if yaml.safe_load(text) == text and ":" not in text and "#" not in text else json.dumps(text)


def _float(value: float) -> str:
    """``0.98``, ``3.0e-4``, ``1.0e+6``: a dot and a signed exponent, which YAML 1.1 (PyYAML) needs to
    read a float back as a float."""
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        text = repr(float(value))
        if "e" not in text:
            return text
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    text_digits = "".join(map(str, digits))
    power = len(text_digits) - 1 + int(exponent)
    mantissa = text_digits[0] + "." + (text_digits[1:] or "0")
    return f"{'-' if sign else ''}{mantissa}e{'-' if power < 0 else '+'}{abs(power)}"


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _write_text(path: Path, text: str) -> None:
    """Atomic and safe against a second ``rlcli tune`` summarising the same study at the same moment:
    each writer has its own temporary file, and the last rename wins whole."""
    atomic_write(path, text.encode())
