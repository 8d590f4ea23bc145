"""Cost override files: a chip's CostModel figures in JSON, as `ascend-sim calibrate` writes them and
`ascend-sim profile --cost-file`, `tiling.get_soc(name, cost="file.json")` read them.

The file is one JSON object. Its "cost" member maps CostModel field names to values (numbers; a
(call name, cycles) table as a list of pairs); every other member ("soc", "fitted", "rows", ...) is a note
for people and is ignored. A bare {field: value} object is read as the "cost" member. Values are turned
into the field's type (a whole number of cycles stays an int, a float figure a float), so what the file
says is exactly what `CostModel.with_overrides` gets; the CostModel checks their ranges.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import fields

from .cost import CostModel
from .errors import ConfigError

COST_KEY = "cost"


def _field_kinds() -> dict[str, type]:
    stock = CostModel()
    return {f.name: type(getattr(stock, f.name)) for f in fields(CostModel)}


def coerce_figure(name: str, value, where: str = "") -> object:
    """`value` as CostModel field `name`'s type; ConfigError (naming `where` and the field) when it is not one."""
    kinds = _field_kinds()
    at = f"{where}: " if where else ""
    if name not in kinds:
        raise ConfigError(f"{at}unknown cost parameter {name!r}; known: {', '.join(kinds)}")
    kind = kinds[name]
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{at}cost parameter {name} must be true or false, got {value!r}")
        return value
    if kind is tuple:
        try:
            return tuple((str(call), int(cycles)) for call, cycles in value)
        except (TypeError, ValueError):
            raise ConfigError(f"{at}cost parameter {name} must be a list of [call name, cycles] pairs, "
                              f"got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{at}cost parameter {name} must be a finite number, got {value!r}")
    if kind is int:
        if value != int(value):
            raise ConfigError(f"{at}cost parameter {name} is a whole number of cycles, got {value!r}")
        return int(value)
    return float(value)


def load_cost_file(path) -> dict:
    """The {field: value} overrides of the cost file at `path` (module docstring); ConfigError naming the file
    (and the line, for bad JSON) when it cannot be read or a figure is unknown or of the wrong kind."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ConfigError(f"cost file {name}: cannot read it ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"cost file {name}, line {e.lineno}: not JSON ({e.msg})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"cost file {name}: not UTF-8 text") from None
    if not isinstance(data, dict):
        raise ConfigError(f"cost file {name}: expected a JSON object, got {type(data).__name__}")
    figures = data.get(COST_KEY, data) if COST_KEY in data else data
    if not isinstance(figures, dict):
        raise ConfigError(f"cost file {name}: \"{COST_KEY}\" must be an object of cost figures")
    return {key: coerce_figure(key, value, f"cost file {name}") for key, value in figures.items()}


def cost_file_text(figures: dict, **notes) -> str:
    """The JSON text of a cost file holding `figures` ({field: value}) and the `notes` members."""
    body = {k: v for k, v in notes.items() if k != COST_KEY}
    body[COST_KEY] = {k: (list(map(list, v)) if isinstance(v, tuple) else v) for k, v in figures.items()}
    return json.dumps(body, indent=2) + "\n"
