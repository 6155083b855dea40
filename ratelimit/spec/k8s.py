"""Kubernetes, the pure parts of the design in docs/fleet.md ("Kubernetes"): a scenario
resource's cohorts select pods, which become one assignment per node (``assign``); the
nodes' reports become one status of the scenario (``status``).  Nothing here talks to an
API server: the inputs are what a controller would list, the outputs what it would write.

    >>> pods = [{"name": "web-1", "namespace": "shop", "labels": {"app": "web"}, "node": "n1",
    ...          "ips": ["198.18.1.2"]}]
    >>> spec = {"cohorts": [{"name": "phones", "selector": {"matchLabels": {"app": "web"}},
    ...                      "profile": "3g"}]}
    >>> assign(spec, pods)["n1"]["cohorts"][0]["hosts"]
    ['198.18.1.2']
"""

from ipaddress import ip_address

from ..errors import FieldError, UsageError

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
COHORT_FIELDS = ("name", "selector", "namespaces", "per", "profile", "rate", "delay", "loss", "queue", "ports")


def selects(selector: dict, labels: dict) -> bool:
    """Whether a label selector (``matchLabels`` and ``matchExpressions``, as Kubernetes
    reads them: every term must hold; an empty selector selects everything) selects a pod
    with ``labels``."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for term in selector.get("matchExpressions") or ():
        key, op, values = term.get("key"), term.get("operator"), term.get("values") or ()
        if op not in OPERATORS:
            raise FieldError("selector: operator", op, f"is not a selector operator ({', '.join(OPERATORS)})")
        have = key in labels
        if (op == "In" and not (have and labels[key] in values)) or (op == "NotIn" and have and labels[key] in values) \
                or (op == "Exists" and not have) or (op == "DoesNotExist" and have):
            return False
    return True


def _check(spec: dict) -> list:
    cohorts = spec.get("cohorts")
    if not isinstance(cohorts, list) or not cohorts:
        raise UsageError("scenario: names no cohort (spec.cohorts: [{name, selector, profile or rate}, ...])")
    names = set()
    for c in cohorts:
        unknown = sorted(set(c) - set(COHORT_FIELDS))
        if unknown:
            raise FieldError(f"cohort {c.get('name')}: {unknown[0]}", c[unknown[0]],
                             f"is not a cohort field ({', '.join(COHORT_FIELDS)})")
        if not c.get("name") or c["name"] in names:
            raise FieldError("cohort: name", c.get("name"), "is missing or named twice")
        if not isinstance(c.get("selector"), dict):
            raise FieldError(f"cohort {c['name']}: selector", c.get("selector"), "is not a label selector")
        names.add(c["name"])
    return cohorts


def assign(spec: dict, pods: list) -> dict:
    """One assignment per node ({node: {"node", "cohorts": [{"name", "hosts", ...}], "pods"}}),
    from a scenario resource's ``spec`` and the pods a controller listed (each: name,
    namespace, labels, node, ips).  A cohort's fields other than its selector go through to
    the node's request; its hosts are the pod addresses on that node, sorted.  Pods not yet
    on a node or without an address are left out (a new assignment follows when they are).
    Refused in one line: a pod two cohorts select, and a shared cohort (``per = "shared"``)
    whose pods run on several nodes."""
    cohorts = _check(spec)
    owner: dict = {}
    out: dict = {}
    for c in cohorts:
        for pod in pods:
            if c.get("namespaces") and pod["namespace"] not in c["namespaces"]:
                continue
            if not selects(c["selector"], pod.get("labels") or {}):
                continue
            key = f"{pod['namespace']}/{pod['name']}"
            if key in owner:
                raise UsageError(f"pod {key}: selected by cohorts {owner[key]} and {c['name']}; a pod is in one "
                                 "cohort (narrow a selector)")
            owner[key] = c["name"]
            if not pod.get("node") or not pod.get("ips"):
                continue
            node = out.setdefault(pod["node"], {"node": pod["node"], "cohorts": {}, "pods": 0})
            node["pods"] += 1
            entry = node["cohorts"].setdefault(c["name"], {k: v for k, v in c.items()
                                                             if k not in ("selector", "namespaces")} | {"hosts": []})
            entry["hosts"] += pod["ips"]
        if c.get("per") == "shared":
            nodes = sorted(n for n, a in out.items() if c["name"] in a["cohorts"])
            if len(nodes) > 1:
                raise UsageError(f"cohort {c['name']}: one shared link for pods on nodes {', '.join(nodes)}; a "
                                 "shared link is on one node (select pods of one node, or use per = \"host\")")
    for node in out.values():
        node["cohorts"] = [dict(entry, hosts=sorted(entry["hosts"], key=lambda a: (ip_address(a).version,
                                                                                  int(ip_address(a)))))
                           for entry in node["cohorts"].values()]
    return dict(sorted(out.items()))


PHASES = ("Pending", "Staged", "Committed", "Failed")


def status(assignments: dict, reports: list) -> dict:
    """The scenario's status from its nodes' reports (each: node, generation, phase in
    ``PHASES``, links, error): its phase -- Committed once every assigned node committed
    this ``generation``, Failed if one failed, Staged once all staged (the controller then
    commits), else Pending -- the nodes per phase, the links summed, and each failure."""
    generation = max((r.get("generation", 0) for r in reports), default=0)
    latest = {r["node"]: r for r in reports if r.get("generation", 0) == generation}
    phases = {node: latest[node]["phase"] if node in latest else "Pending" for node in assignments}
    bad = sorted(set(r["phase"] for r in latest.values()) - set(PHASES))
    if bad:
        raise FieldError("report: phase", bad[0], f"is not a phase ({', '.join(PHASES)})")
    counts = {p: sum(1 for v in phases.values() if v == p) for p in PHASES}
    if counts["Failed"]:
        phase = "Failed"
    elif counts["Committed"] == len(phases):
        phase = "Committed"
    elif counts["Staged"] + counts["Committed"] == len(phases):
        phase = "Staged"
    else:
        phase = "Pending"
    return {"phase": phase, "generation": generation, "nodes": counts,
            "links": sum(latest[n].get("links", 0) for n in phases if n in latest),
            "failures": {n: latest[n].get("error") for n, p in phases.items() if p == "Failed"}}
