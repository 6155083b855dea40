"""ratelimit's benchmarks (project issue #6): ``python -m bench all [--quick]``.

Module map (who knows what):
  common     results files, progress lines, percentiles and ratios, flow sets,
             throwaway namespaces and timed commands, the VM hand-off
  setup      time to install N flows: our executor vs tc -batch vs one tc per
             rule vs tcconfig
  packet     forwarding rate of small UDP packets with 1 .. 65,536 flows
             installed: our hashed u32 tree vs a flat filter list
  stats      time to read every flow's counters: ours vs tc -s
  fidelity   K concurrent TCP downloads over 28.8 kbit/s links: goodput per
             link / configured; RTT / configured for the latency classes
  dialup     the 2000 experiment: x simultaneous 10,000-byte fetches through
             28.8 kbit/s links, httperf against nginx and a prefork server
  httperf    running httperf and parsing what it prints
  prefork    a process-per-connection HTTP server capped at N workers
  blast      the UDP sender of ``packet`` (a small C program, Python fallback)
  report     results JSON -> docs/benchmarks.md and PNG plots

Every benchmark writes ``bench/results/<name>-<where>[-quick].json`` (where:
``host`` or ``vm``); ``report`` reads whatever is there.  Speed is reported as
ratios measured side by side in one run, never asserted in tests.
"""
