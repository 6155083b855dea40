"""ratelimit: make a Linux router emulate thousands of slow or distant links.

Module map (who knows what):
  errors    the one exception family users see, with exit codes
  units     parsing and formatting of rates, sizes, times and percentages
  model     the frozen inputs: link parameters, profiles, a request
  profiles  finding and loading profile TOML files
  plan      the operations a plan is made of, and their tc -batch text
  compile   request -> plan, pure (no I/O): the u32 hash tree lives here
  netlink   the executor: the only module that talks to the kernel
  service   apply/clean/list/stats glue used by the CLI, web UI and lab
  cli       the command line (compatible with ratelimit v0.3)
"""

__version__ = "0.4.0"
