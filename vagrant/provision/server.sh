#!/bin/sh
# ratelimit lab server: the test files and a web server that serves them.
#
# The same script provisions the Vagrant server VM and, run inside the server
# network namespace by `ratelimit lab up`, the namespace lab's server:
#
#   Vagrant:        RL_LAB_DIR=/srv/ratelimit-lab RL_SRC=/vagrant sh server.sh
#   namespace lab:  ip netns exec NS env RL_INSTALL=0 RL_LAB_DIR=DIR RL_LISTEN=198.18.x.y sh server.sh
#
# It writes the fixed-size files (python3 -m ratelimit.lab.docroot write: 1000.bin,
# 10000.bin -- the 10,000-byte file of the 2000 experiments -- 100000.bin,
# 1000000.bin, index.html) to $RL_LAB_DIR/www and starts nginx with its own
# configuration, pid and log files under $RL_LAB_DIR/nginx (never the system
# nginx's), or the built-in server (python3 -m ratelimit.lab.docroot serve).  Run
# again, it restarts the server: the Vagrantfile runs it on every `vagrant up`.
#
# Environment (all optional):
#   RL_INSTALL     1: apt-get install nginx-light and python3 if missing, and stop
#                  the distribution's nginx service (default 1); 0: touch nothing else
#   RL_SRC         ratelimit checkout (default: two directories above this script)
#   RL_PYTHON      Python 3.11+ interpreter (default python3)
#   RL_LAB_DIR     where files, configuration, pid and logs go (default /srv/ratelimit-lab)
#   RL_LISTEN      address to listen on (default 0.0.0.0: every IPv4 address, and with
#                  nginx every IPv6 address too)
#   RL_PORT        TCP port (default 80)
#   RL_SERVER      nginx, builtin or auto (nginx if installed; default auto)
#   RL_NGINX_USER  user nginx's workers run as (default www-data)
#   RL_WORKERS     nginx worker_processes (default auto)
#   RL_ROUTES      routes to add, ';'-separated, e.g. "198.18.1.0/24 via 198.19.0.11"
set -eu

here=$(cd "$(dirname "$0")" && pwd)
RL_INSTALL=${RL_INSTALL:-1}
RL_SRC=${RL_SRC:-$(cd "$here/../.." && pwd)}
RL_PYTHON=${RL_PYTHON:-python3}
RL_LAB_DIR=${RL_LAB_DIR:-/srv/ratelimit-lab}
RL_LISTEN=${RL_LISTEN:-0.0.0.0}
RL_PORT=${RL_PORT:-80}
RL_SERVER=${RL_SERVER:-auto}
RL_NGINX_USER=${RL_NGINX_USER:-www-data}
RL_WORKERS=${RL_WORKERS:-auto}
RL_ROUTES=${RL_ROUTES:-}

fail() { echo "server.sh: $*" >&2; exit 2; }

case "$RL_SERVER" in nginx | builtin | auto) ;; *) fail "RL_SERVER: '$RL_SERVER' is not a server (nginx, builtin, auto)" ;; esac
case "$RL_PORT" in '' | *[!0-9]*) fail "RL_PORT: '$RL_PORT' is not a port (1-65535)" ;; esac
[ "$RL_PORT" -ge 1 ] && [ "$RL_PORT" -le 65535 ] || fail "RL_PORT: '$RL_PORT' is not a port (1-65535)"
case "$RL_LAB_DIR" in /*) ;; *) fail "RL_LAB_DIR: '$RL_LAB_DIR' is not an absolute path" ;; esac

if [ "$RL_INSTALL" = 1 ]; then
    need=""
    command -v "$RL_PYTHON" >/dev/null 2>&1 || need="$need python3"
    if [ "$RL_SERVER" != builtin ] && ! command -v nginx >/dev/null 2>&1; then need="$need nginx-light"; fi
    if [ -n "$need" ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        # shellcheck disable=SC2086
        apt-get install -y -q --no-install-recommends $need
    fi
    # the distribution's nginx (started by the package) would hold port 80
    if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled nginx >/dev/null 2>&1; then
        systemctl disable --now nginx >/dev/null 2>&1 || true
    fi
fi

if [ "$RL_SERVER" = auto ]; then
    if command -v nginx >/dev/null 2>&1; then RL_SERVER=nginx; else RL_SERVER=builtin; fi
fi
[ "$RL_SERVER" != nginx ] || command -v nginx >/dev/null 2>&1 \
    || fail "RL_SERVER: nginx is not installed (apt-get install nginx-light, or RL_SERVER=builtin)"

www="$RL_LAB_DIR/www"
run="$RL_LAB_DIR/$RL_SERVER"
mkdir -p "$RL_LAB_DIR" "$run"
chmod 755 "$RL_LAB_DIR"
PYTHONPATH="$RL_SRC${PYTHONPATH:+:$PYTHONPATH}" "$RL_PYTHON" -m ratelimit.lab.docroot write "$www" >/dev/null

# stop a server this script started before (same lab directory)
for pidfile in "$RL_LAB_DIR/nginx/nginx.pid" "$RL_LAB_DIR/builtin/server.pid"; do
    if [ -s "$pidfile" ]; then
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        rm -f "$pidfile"
    fi
done

case "$RL_LISTEN" in *:*) listen="[$RL_LISTEN]:$RL_PORT" ;; *) listen="$RL_LISTEN:$RL_PORT" ;; esac
listen6=""  # 0.0.0.0 means every address: IPv6 as well
[ "$RL_LISTEN" = 0.0.0.0 ] && listen6="        listen [::]:$RL_PORT ipv6only=on reuseport backlog=4096;
"

if [ "$RL_SERVER" = nginx ]; then
    mkdir -p "$run/tmp"
    temp_paths=""
    for kind in client_body proxy fastcgi uwsgi scgi; do
        if ! nginx -V 2>&1 | grep -q -- "--without-http_${kind}_module"; then
            temp_paths="$temp_paths    ${kind}_temp_path $run/tmp/$kind;
"
        fi
    done
    cat > "$run/nginx.conf" <<EOF
# written by ratelimit vagrant/provision/server.sh; a private nginx for the lab
user $RL_NGINX_USER;
worker_processes $RL_WORKERS;
pid $run/nginx.pid;
error_log $run/error.log;
worker_rlimit_nofile 65536;
events { worker_connections 16384; }
http {
    default_type application/octet-stream;
    # the combined format's head, then when the reply ended (ms) and the client's port
    log_format lab '\$remote_addr - \$remote_user [\$time_local] "\$request" \$status \$body_bytes_sent '
                   '"\$http_referer" "\$http_user_agent" \$msec \$remote_port';
    access_log $run/access.log lab;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 65;
    # a persistent connection carries as many calls as its client makes (nginx closes it
    # after 1,000 by default; a benchmark session on a fast link makes more)
    keepalive_requests 1000000;
$temp_paths    server {
        listen $listen reuseport backlog=4096;
$listen6        root $www;
        index index.html;
    }
}
EOF
    nginx -q -t -e "$run/error.log" -c "$run/nginx.conf" -p "$run/" \
        || fail "nginx refused $run/nginx.conf (see above)"
    nginx -e "$run/error.log" -c "$run/nginx.conf" -p "$run/"
else
    PYTHONPATH="$RL_SRC${PYTHONPATH:+:$PYTHONPATH}" setsid "$RL_PYTHON" -m ratelimit.lab.docroot serve \
        --root "$www" --bind "$RL_LISTEN" --port "$RL_PORT" --pidfile "$run/server.pid" \
        --access-log "$run/access.log" </dev/null >>"$run/server.log" 2>&1 &
    started=$!
fi

# ready when something listens on the port
i=0
until ss -Hltn "sport = :$RL_PORT" 2>/dev/null | grep -q .; do
    i=$((i + 1))
    if [ $i -gt 100 ] || { [ -n "${started:-}" ] && ! kill -0 "$started" 2>/dev/null; }; then
        tail -n 3 "$run/error.log" "$run/server.log" 2>/dev/null >&2 || true
        fail "RL_SERVER: $RL_SERVER did not start listening on $listen (logs in $run)"
    fi
    sleep 0.1
done

if [ -n "$RL_ROUTES" ]; then
    echo "$RL_ROUTES" | tr ';' '\n' | while read -r route; do
        # shellcheck disable=SC2086
        [ -z "$route" ] || ip route replace $route
    done
fi

echo "server: $RL_SERVER on http://$listen/ serving $www"
