"""Patterns from configuration (zuul/lib/regex.py): a pattern with no
special character is matched as plain text, with the same answers the
engine gives, negated or not; anything else goes to the engine."""

from __future__ import annotations

import re

import pytest

from zuul.lib.regex import compile_regex

PLAIN = ['patchset-created', 'master', 'stable/2024 x', '', 'refs/tags/v1', 'ä-ß']
SPECIAL = ['master$', '^stable/', 'a.b', 'x*', '(?i)recheck', 'a|b', r'a\.b', '[ab]', 'a{2}',
           'a+', 'a?', '^(?!stable/).*$']
TEXTS = ['', 'patchset-created', 'xpatchset-created-y', 'master', 'masters', 'stable/2024.1 x',
         'refs/tags/v10', 'stable/2024 x', 'ä-ß', 'a.b', 'axb', 'recheck', 'aa', 'b', None]


@pytest.mark.parametrize('pattern', PLAIN)
@pytest.mark.parametrize('negate', [False, True])
def test_a_plain_pattern_answers_as_the_engine_does(pattern, negate):
    regex, warning = compile_regex({'regex': pattern, 'negate': negate})
    assert warning is None and regex._literal == pattern
    engine = re.compile(re.escape(pattern))
    for text in TEXTS:
        t = text or ''
        assert regex.search(text) == ((engine.search(t) is not None) != negate), text
        assert regex.match(text) == ((engine.match(t) is not None) != negate), text
        assert regex.fullmatch(text) == ((engine.fullmatch(t) is not None) != negate), text


@pytest.mark.parametrize('pattern', SPECIAL)
def test_a_pattern_with_a_special_character_goes_to_the_engine(pattern):
    regex, _ = compile_regex(pattern, trusted=True)
    assert regex._literal is None
    assert regex.search('a.b') == (pattern in ('a.b', r'a\.b', 'x*', '[ab]', 'a+', 'a?',
                                               'a|b', '^(?!stable/).*$'))
