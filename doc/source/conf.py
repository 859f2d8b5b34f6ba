"""Sphinx configuration for the gatekeep-ci documentation.

Only Sphinx's built-in features are used and nothing is fetched from the
network, so ``sphinx-build -W`` works offline (tests/unit/test_docs.py
builds it that way).
"""

project = 'gatekeep-ci'
author = 'The gatekeep-ci developers'
copyright = '2026, The gatekeep-ci developers'
release = '0.1.0'
version = release

extensions = []
root_doc = 'index'
source_suffix = {'.rst': 'restructuredtext'}
exclude_patterns = []
language = 'en'

# Literal blocks carry YAML, INI, shell sessions and log excerpts: no
# guessing of a lexer per block.
highlight_language = 'none'

html_title = 'gatekeep-ci documentation'
html_static_path = []
html_show_sourcelink = False
