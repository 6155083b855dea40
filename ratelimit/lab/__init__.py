"""Labs on one machine and what runs on them: the namespace topology, the ``Lab`` (bring up,
apply a link, measure, remove), its command line (``ratelimit lab``, registered as a
subcommand), the docroot server of the 2000 experiments, and the pytest fixtures.

May import: errors, spec, traces, profiles, plan, kernel, state, driver, service, containers.
"""
