"""Read synthesized CloudFormation expressions as text (for checks and messages)."""

from __future__ import annotations

import json


def render(value) -> str:
    """A CloudFormation string expression as readable text (Ref → ${X}, GetAtt → ${A.B})."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (key, arg), = value.items()
        if key == "Ref":
            return "${%s}" % arg
        if key == "Fn::GetAtt":
            return "${%s}" % ".".join(arg)
        if key == "Fn::ImportValue":
            return "${Import:%s}" % render(arg)
        if key == "Fn::Join":
            separator, parts = arg
            return separator.join(render(p) for p in parts)
    return json.dumps(value, sort_keys=True)
