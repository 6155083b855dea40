"""``/api/stream``: Server-Sent Events, one message per statistics poll.

``event: tick`` after every poll: ``{"seq", "time", "targets": [target_info...]}``
-- for each watched interface what is applied, the aggregate, the link states
and the distributions of rate share and queueing delay (``api.target_info``).
No per-link rows: a page asks for the rows it shows with ``/api/links`` (one
page of the filtered, sorted table), so what a browser receives does not grow
with the number of links.

A comment line is sent every 15 s when nothing else was, so proxies keep the
connection.  The number of open streams is capped (STREAM_LIMIT, 503 beyond).
"""

import json
import threading

from flask import Blueprint, Response, current_app, stream_with_context

from .api import TARGET_QUERY, target_info
from .errors import WebError
from .params import check_query, resolve_target, snapshots, source

bp = Blueprint("live", __name__, url_prefix="/api")
_lock = threading.Lock()


def _event(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


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
            seen = 0
            while not src.stopped:
                now = src.wait(seen, timeout=15)
                if now == seen:
                    yield ": idle\n\n"
                    continue
                seen = now
                snap = src.snapshot(*target)
                yield _event("tick", {"seq": snap.seq, "time": snap.time,
                                      "targets": [target_info(s) for s in snapshots(src)]})
        finally:
            release()

    response = Response(stream_with_context(generate()), mimetype="text/event-stream",
                        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
    response.call_on_close(release)
    return response
