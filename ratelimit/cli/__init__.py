"""The ``ratelimit`` command line: v0.3's options and their spellings, the dispatch of every
action, what ``--list`` and ``--stats`` print, the subcommands (others register through the
entry-point group ``ratelimit.subcommands``: ``lab``, ``web``), and save and restore.

May import: errors, spec, traces, profiles, plan, kernel, state, driver, service, containers.
"""
