"""ratelimit's benchmarks (project issue #6): ``python -m bench all [--quick]``.

Module map (who knows what):
  common     progress lines, percentiles and ratios, flow sets, timed commands
  sandbox    throwaway namespaces and their clean-up, the VM hand-off
  results    results files, with the machine and the commit they measured
  setup      time to install N flows: our executor vs tc -batch vs one tc per
             rule vs tcconfig
  packet     forwarding rate of small UDP packets with 1 .. 65,536 flows
             installed: our hashed u32 tree vs a flat filter list
  stats      time to read every flow's counters: ours vs tc -s
  fidelity   K concurrent TCP downloads over 28.8 kbit/s links: goodput per
             link / configured; RTT / configured for the latency classes
  dialup     the 2000 experiment: x simultaneous 10,000-byte fetches through
             28.8k modems, the 2000 way (httperf sessions), and wrk beside it
  httperf    running httperf and parsing what it prints
  blast      the UDP sender of ``packet`` (a small C program, Python fallback)
  report     results JSON -> docs/benchmarks.md (sections: tables and readings;
             plots: the PNGs)

Every benchmark writes ``bench/results/<name>-<where>[-quick].json`` (where:
``host`` or ``vm``); ``report`` reads whatever is there.  Speed is reported as
ratios measured side by side in one run, never asserted in tests.
"""
