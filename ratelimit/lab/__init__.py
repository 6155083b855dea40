"""Labs: a client-router-server topology on one machine, and what runs on it.

  topology       namespaces, veths, the bridge, addresses, routes (Topology)
  core           Lab: bring up, provision, apply a link, measure, remove
  cli            ``ratelimit lab ...`` and its demo
  docroot        the fixed-size files of the 2000 experiments, and a small server for them
  pytest_plugin  the ``emulated_link`` fixtures (entry point ``pytest11``)
"""
