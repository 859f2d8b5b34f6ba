"""Small voluptuous helpers shared by the driver schemas."""

from __future__ import annotations

import voluptuous as vs


def scalar_or_list(validator):
    return vs.Any(validator, [validator])


# A regex filter value: a string, or {regex: str, negate: bool} (released
# Zuul's form for "anything but").
REGEX = vs.Any(str, {vs.Required('regex'): str, 'negate': bool})


def regex_or_list():
    return scalar_or_list(REGEX)
