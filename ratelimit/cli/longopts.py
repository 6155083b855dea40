"""v0.3's command line as Perl's Getopt::Long read it, rewritten for argparse.

The 2000 script parsed its options with Getopt::Long in its default configuration: a
long option takes one dash or two (``-interface eth0`` is ``--interface eth0``), its
value is the next word or follows '=' (``-rate=28800``), a unique prefix of its name
will do (``-int``), case does not matter, and a mandatory value is taken whatever it
looks like.  argparse knows two dashes only, so ``long_options`` rewrites every long
option to its two-dash form with its value joined by '=' (so a value that starts
with '-' stays a value).  The one-letter options (``-h`` hosts, ``-p``, ``-r``,
``-b``, ``-d``, ``-v``) and anything that names no option are left as they are, for
argparse to read or refuse.
"""

import argparse
import re

_NUMBER = re.compile(r"-\d[\d.]*\Z")


def _options(parser: argparse.ArgumentParser):
    """{long name (lower case): (its two-dash spelling, action)}, {short option: action}."""
    longs, shorts = {}, {}
    for action in parser._actions:
        for opt in action.option_strings:
            if opt.startswith("--"):
                longs[opt[2:].lower()] = (opt, action)
            else:
                shorts[opt] = action
    return longs, shorts


def _takes_value(action) -> bool:
    return action.nargs != 0


def _match(name: str, longs: dict):
    """The long option ``name`` spells, exactly or as a prefix of one option's names; None if
    it names none or several."""
    if name in longs:
        return longs[name]
    hits = {id(action): (opt, action) for key, (opt, action) in longs.items() if key.startswith(name)}
    if len(name) >= 2 and len(hits) == 1:
        return next(iter(hits.values()))
    return None


def long_options(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` with Getopt::Long's spellings of long options turned into argparse's."""
    longs, shorts = _options(parser)
    out: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--":
            out.append(arg)
            out.extend(args)
            break
        if arg in shorts:
            value = next(args, None) if _takes_value(shorts[arg]) else None
            if value is None:
                out.append(arg)
            else:
                out += [arg + value] if value.startswith("-") else [arg, value]
            continue
        if not arg.startswith("-") or arg == "-" or _NUMBER.match(arg):
            out.append(arg)
            continue
        name, eq, value = arg[2 if arg.startswith("--") else 1:].partition("=")
        hit = _match(name.lower(), longs)
        if hit is None:
            out.append(arg)
            continue
        opt, action = hit
        if eq:
            out.append(f"{opt}={value}")
        elif _takes_value(action):
            value = next(args, None)
            out.append(opt if value is None else f"{opt}={value}")
        else:
            out.append(opt)
    return out
