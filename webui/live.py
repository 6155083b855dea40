"""``/api/stream``: Server-Sent Events, one message per statistics poll.

Events (``data:`` is one line of JSON):

* ``layout`` -- the selected target's links, sent first and again whenever
  the applied configuration changes: ``{"interface", "netns", "layout",
  "applied", "keys": [[direction, host, port, dev, rate_bps], ...]}`` (port 0:
  a per-host link, all its host's ports).
* ``tick`` -- every poll: ``{"seq", "time", "targets": [target_info...],
  "links": {"layout", "full", "rows": [i...], <column>: [...]}}`` where the
  columns hold the values of ``rows`` only -- every row when ``full`` is true
  (first tick, or the client missed a poll), else only the rows that changed
  since the previous poll.  Idle links therefore cost nothing on the wire.

A comment line is sent every 15 s when nothing else was, so proxies keep the
connection.  The number of open streams is capped (STREAM_LIMIT, 503 beyond).
"""

import json
import threading

from flask import Blueprint, Response, current_app, stream_with_context

from .api import TARGET_QUERY, target_info
from .errors import WebError
from .params import check_query, resolve_target, source
from .stats import COLUMNS

bp = Blueprint("live", __name__, url_prefix="/api")
_lock = threading.Lock()


def _event(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _rows(snap, full: bool) -> dict:
    rows = range(len(snap.layout)) if full else snap.changed
    out = {"layout": snap.layout.id, "full": full, "rows": list(rows)}
    for name in COLUMNS:
        col = snap.columns[name]
        if name in ("throughput_bps", "drops_per_s"):
            out[name] = [round(col[i], 1) for i in rows]
        else:
            out[name] = [col[i] for i in rows]
    return out


def _layout_event(snap) -> dict:
    return {"interface": snap.interface, "netns": snap.netns, "layout": snap.layout.id,
            "applied": snap.applied,
            "keys": [[*k, r] for k, r in zip(snap.layout.keys, snap.layout.rate_bps)]}


@bp.get("/stream")
def stream():
    args = check_query(TARGET_QUERY)
    target = resolve_target(args.get("interface"), args.get("netns"))
    src = source()
    counter = current_app.extensions["ratelimit_streams"]
    limit = current_app.config["STREAM_LIMIT"]
    with _lock:
        if counter["open"] >= limit:
            raise WebError(503, f"streams: {limit} already open (the most at once); close a dashboard tab")
        counter["open"] += 1

    closed = []

    def release():
        with _lock:
            if not closed:
                closed.append(True)
                counter["open"] -= 1

    def generate():
        try:
            yield "retry: 2000\n\n"
            seen, sent_layout, last = 0, None, None
            while not src.stopped:
                now = src.wait(seen, timeout=15)
                if now == seen:
                    yield ": idle\n\n"
                    continue
                seen = now
                snap = src.snapshot(*target)
                if snap.seq == last:
                    continue
                full = sent_layout != snap.layout.id or last is None or snap.seq != last + 1
                if sent_layout != snap.layout.id:
                    yield _event("layout", _layout_event(snap))
                    sent_layout = snap.layout.id
                tick = {"seq": snap.seq, "time": snap.time,
                        "targets": [target_info(src.snapshot(n, i)) for n, i in src.targets()],
                        "links": _rows(snap, full)}
                last = snap.seq
                yield _event("tick", tick)
        finally:
            release()

    response = Response(stream_with_context(generate()), mimetype="text/event-stream",
                        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
    response.call_on_close(release)
    return response
