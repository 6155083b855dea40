"""The vocabulary, pure: units and their parsing, names, link layers, a link's parameters,
profiles, cohorts and requests as frozen values, host and port selectors, the link model of
how long a transfer takes, and a request described as data (``summary``).

May import: errors.
"""
