"""Shared leaf types for configuration objects."""

from __future__ import annotations

from dataclasses import dataclass, field

from zuul.model.errors import SourceContext


@dataclass(eq=False)
class ConfigObject:
    """Something defined by one stanza of in-repo configuration: it knows
    where it came from so errors and the web API can point at it."""

    name: str
    source_context: SourceContext = field(default_factory=SourceContext)
    start_line: int | None = None

    @property
    def location(self) -> str:
        line = f':{self.start_line}' if self.start_line else ''
        return f'{self.source_context}{line}'

    def same_definition(self, other) -> bool:
        """True if ``other`` defines the same thing with the same content;
        used to allow one object on several branches of one project."""
        return type(self) is type(other) and self.content() == other.content()

    def content(self):
        """A comparable summary of what the stanza says (without where)."""
        return None
