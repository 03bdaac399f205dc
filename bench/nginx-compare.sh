#!/usr/bin/env bash
# /metrics and /healthz of `flowscope serve` against nginx serving the same bytes with the same
# certificate, both on this machine, measured with wrk in alternating rounds.
#
#   apt-get install -y nginx wrk           # Debian's packages
#   bash bench/nginx-compare.sh [FLOWSCOPE_BINARY] [ROUNDS] [SECONDS]
#
# Defaults: .build/release/flowscope, 5 rounds, 8 s per wrk run (wrk -t2 -c50, keep-alive).
# How: a first `serve` with demo traffic writes ~15 s of events; a second `serve --no-demo` (fresh
# state) ingests them, so /metrics has a realistic body that no live traffic changes during the
# runs. Its /metrics body and /healthz body are copied into nginx's root; nginx gets serve's
# certificate and key, `worker_processes 2` (one per core, as libmicrohttpd's thread pool) and
# the same request headers. Each round runs wrk against flowscope then nginx for each path,
# recording requests/s and the server's CPU time per request (user + system of its processes, from
# /proc/PID/stat); the script prints every round, the medians per path and the median of the
# per-round ratios.
# Everything started here is ended on exit, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-.build/release/flowscope}")
rounds=${2:-5}
seconds=${3:-8}
for tool in nginx wrk curl; do
    command -v "$tool" >/dev/null 2>&1 || { echo "needs $tool: apt-get install -y nginx wrk curl" >&2; exit 2; }
done
[ -x "$bin" ] || { echo "no flowscope binary at $bin (swift build -c release --product flowscope)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/flowscope-nginx-XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    [ -f "$work/nginx.pid" ] && kill -QUIT "$(cat "$work/nginx.pid")" 2>/dev/null || true
    sleep 1
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# Waits for serve's ready line in $1 and prints its port.
port_of() {
    for _ in $(seq 100); do
        port=$(sed -n 's|.*serving https://localhost:\([0-9]*\)/.*|\1|p' "$1" | head -n 1)
        [ -n "$port" ] && { echo "$port"; return 0; }
        sleep 0.1
    done
    echo "serve did not start: $(cat "$1")" >&2
    return 1
}

# 1. Events from the demo.
"$bin" serve --port 0 --state-dir "$work/demo" >"$work/demo.log" 2>&1 &
demo=$!; pids+=("$demo")
port_of "$work/demo.log" >/dev/null
sleep 15
kill -INT "$demo"; wait "$demo" || true

# 2. The measured server: no demo, the metrics and memory sinks only, the events ingested once.
# wrk -c50 opens 50 connections from one address: past serve's default limit of 32 per address the
# rest would be refused and reopened in a loop (nginx has no such limit), so the limit is 64.
cat >"$work/flowscope.json5" <<CONF
{
  server: { limits: { maxConnectionsPerIP: 64 } },
  sinks: [{ type: "metrics" }, { type: "memory" }],
  demo: { enabled: false },
}
CONF
"$bin" serve --config "$work/flowscope.json5" --port 0 --no-demo --state-dir "$work/state" >"$work/serve.log" 2>&1 &
fpid=$!; pids+=("$fpid")
fport=$(port_of "$work/serve.log")
token=$(cat "$work/state/token")
ca="$work/state/tls/cert.pem"
curl -sS --fail --cacert "$ca" -H "Authorization: Bearer $token" -H "Content-Type: application/x-ndjson" \
    --data-binary @"$work/demo/events.jsonl" "https://localhost:$fport/api/ingest" >/dev/null
sleep 1

# 3. nginx with the same certificate and the same bytes.
mkdir -p "$work/www" "$work/nginx"
# nginx workers run as an unprivileged user: they read only the two copied bodies.
chmod 755 "$work" "$work/www"
curl -sS --fail --cacert "$ca" "https://localhost:$fport/metrics" -o "$work/www/metrics"
curl -sS --fail --cacert "$ca" "https://localhost:$fport/healthz" -o "$work/www/healthz"
# serve's header fields (but those both servers write themselves), as nginx add_header lines.
headers=$(curl -sS --fail --cacert "$ca" -D - -o /dev/null "https://localhost:$fport/metrics" | tr -d '\r' \
    | awk -F': ' 'NR > 1 && NF >= 2 && tolower($1) !~ /^(content-length|content-type|date|connection|server)$/ {
        printf "add_header %s \"%s\" always; ", $1, $2 }')
nport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/nginx.conf" <<CONF
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/nginx; proxy_temp_path $work/nginx; fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx; scgi_temp_path $work/nginx;
    server {
        listen 127.0.0.1:$nport ssl;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_certificate $ca;
        ssl_certificate_key $work/state/tls/key.pem;
        root $work/www;
        keepalive_requests 100000;
        location = /metrics { default_type "text/plain; version=0.0.4; charset=utf-8"; $headers }
        location = /healthz { default_type "application/json"; $headers }
    }
}
CONF
nginx -c "$work/nginx.conf" -p "$work/nginx"
chmod 644 "$work/www/metrics" "$work/www/healthz"
for _ in $(seq 50); do [ -f "$work/nginx.pid" ] && break; sleep 0.1; done
cmp -s "$work/www/metrics" <(curl -sS --fail -k "https://127.0.0.1:$nport/metrics") \
    || { echo "nginx does not serve the same bytes" >&2; exit 1; }
echo "body: /metrics $(wc -c <"$work/www/metrics") bytes ($(grep -vc '^#' "$work/www/metrics") samples), /healthz $(wc -c <"$work/www/healthz") bytes"
echo "cipher: flowscope $(openssl s_client -connect 127.0.0.1:$fport </dev/null 2>/dev/null | sed -n 's/.*Cipher is //p' | head -n 1)," \
     "nginx $(openssl s_client -connect 127.0.0.1:$nport </dev/null 2>/dev/null | sed -n 's/.*Cipher is //p' | head -n 1)"

# CPU time (user + system, clock ticks) of the given processes and their threads so far.
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }
hz=$(getconf CLK_TCK)
# One wrk run against $1 while measuring the processes $2...: prints req/s and us of CPU per request.
measure() {
    local url=$1; shift
    local before after out
    before=$(ticks "$@")
    out=$(wrk -t2 -c50 -d"${seconds}s" -H "Accept: text/plain" "$url")
    after=$(ticks "$@")
    echo "$out" | awk -v cpu=$((after - before)) -v hz="$hz" '
        /requests in/ { n = $1 } /^Requests\/sec/ { r = $2 }
        END { printf "%s %.1f\n", r, (n > 0 ? cpu / hz * 1e6 / n : 0) }'
}
nginx_pids=$(cat "$work/nginx.pid" && pgrep -P "$(cat "$work/nginx.pid")")
declare -A results
for round in $(seq "$rounds"); do
    for path in metrics healthz; do
        read -r f fc <<<"$(measure "https://127.0.0.1:$fport/$path" "$fpid")"
        # shellcheck disable=SC2086
        read -r n nc <<<"$(measure "https://127.0.0.1:$nport/$path" $nginx_pids)"
        results[$path]+="$f $n $fc $nc;"
        printf 'round %d /%s: flowscope %s req/s %s us CPU/request, nginx %s req/s %s us CPU/request, ratio %.2f\n' \
            "$round" "$path" "$f" "$fc" "$n" "$nc" "$(echo "$f / $n" | bc -l)"
    done
done
for path in metrics healthz; do
    echo "${results[$path]}" | tr ';' '\n' | awk -v path="$path" 'NF == 4 { f[++n] = $1; g[n] = $2; r[n] = $1 / $2; fc[n] = $3; gc[n] = $4 }
        function median(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        END { printf "/%s: median flowscope %.0f req/s %.1f us CPU/request, nginx %.0f req/s %.1f us CPU/request, median ratio %.2fx over %d rounds\n",
                  path, median(f, n), median(fc, n), median(g, n), median(gc, n), median(r, n), n }'
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
