"""The static driver (fixed hosts)."""
