"""CONTRACT.md JSON: ``Diagnosis.to_dict()``, sorted keys, two-space indent; same bytes for same input."""
from __future__ import annotations

import json

from ..model import Diagnosis


def render_json(d: Diagnosis) -> str:
    """The diagnosis as the JSON object CONTRACT.md describes (newline-terminated)."""
    return json.dumps(d.to_dict(), sort_keys=True, indent=2) + "\n"
