#!/usr/bin/env python3
"""What `qtune record` costs a client: latency per request and streamed tokens/s, through the
proxy against straight to the same llama-server, in alternating (ABBA) order.

A benchmark, not a test: it asserts nothing. It starts its own upstream and `qtune record`
(both on loopback ports) and stops them at the end. Two upstreams:
  --upstream real   the real llama-server with a model (SmolLM2 by default): what a user sees,
                    but on a busy CPU its own noise (milliseconds per token) hides the proxy's;
  --upstream fake   a stand-in that answers at once and streams --fake-tps events per second
                    (threads, stdlib only): the proxy's own cost, with little else to hide it.

Usage:
  scripts/bench-record-proxy.py [--upstream real|fake] [--qtune target/release/qtune]
                                [--server PATH] [--model M.gguf] [--requests 200] [--rounds 6]
                                [--stream-tokens 256] [--fake-tps 500]

Measures, each through a fresh keep-alive connection per phase:
  1. per request: GET /health (forwarded, not recorded) and a one-token /completion of a
     cached prompt (recorded: its trace line and the /tokenize that follows happen after the
     answer), median and p90 of the client's latency; the cost is the difference of medians.
  2. streaming: a /completion of --stream-tokens tokens (ignore_eos), server-sent events; the
     client's tokens/s between the first and last event; per round, proxy / direct.
Prints a table and the raw numbers as JSON on the last line.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Conn(http.client.HTTPConnection):
    """A keep-alive connection with Nagle off (else a request's second write waits ~40 ms for
    a delayed ACK), reopened as http.client does when the server closes it (llama-server's
    HTTP library closes a keep-alive connection after a few requests)."""

    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def conn(port, timeout=60):
    return Conn("127.0.0.1", port, timeout=timeout)


def wait_health(port, secs=300):
    deadline = time.time() + secs
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"nothing healthy on port {port} after {secs} s")


def timed(conn, method, path, body=None):
    h = {"Content-Type": "application/json"} if body else {}
    for attempt in range(2):
        t0 = time.perf_counter()
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            r.read()
            break
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The server closed the idle connection without saying so: open a new one.
            conn.close()
            if attempt:
                raise
    dt = time.perf_counter() - t0
    if r.status != 200:
        sys.exit(f"{path}: status {r.status}")
    return dt


def stream_tps(port, n):
    c = conn(port, 600)
    body = json.dumps(
        {"prompt": "def quicksort(xs):", "n_predict": n, "ignore_eos": True,
         "temperature": 0, "stream": True, "cache_prompt": True}
    )
    c.request("POST", "/completion", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    times = []
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if ev.startswith(b"data: ") and b'"content"' in ev:
                times.append(time.perf_counter())
    c.close()
    if len(times) < 2:
        sys.exit("the stream carried fewer than 2 events")
    return (len(times) - 1) / (times[-1] - times[0])


def fake_upstream(port, tps):
    """A stand-in llama-server: /health, /props, /v1/models, /tokenize, /completion (JSON, or
    server-sent events at `tps` events per second, timings in the last)."""
    import http.server
    import threading

    timings = {"cache_n": 3, "prompt_n": 0, "prompt_ms": 0.1, "predicted_n": 1,
               "predicted_ms": 0.1}

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *a):
            pass

        def send_json(self, v):
            b = json.dumps(v).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)

        def do_GET(self):
            if self.path == "/v1/models":
                self.send_json({"data": [{"meta": {"n_vocab": 1000, "n_ctx": 100000}}]})
            elif self.path == "/props":
                self.send_json({"model_path": "/fake.gguf", "total_slots": 1})
            else:
                self.send_json({"status": "ok"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/tokenize":
                return self.send_json({"tokens": [1, 2, 3]})
            n = int(body.get("n_predict", 1))
            t = dict(timings, predicted_n=n)
            if not body.get("stream"):
                return self.send_json({"content": "x" * n, "timings": t})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            next_at = time.perf_counter()
            for i in range(n):
                ev = {"content": "x", "stop": False} if i < n - 1 else {"content": "x", "stop": True, "timings": t}
                data = b"data: " + json.dumps(ev).encode() + b"\n\n"
                next_at += 1.0 / tps
                delay = next_at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qtune", default="target/release/qtune")
    ap.add_argument("--server", default=os.environ.get("QTUNE_LLAMA_SERVER"))
    ap.add_argument("--model")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--stream-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gap-ms", type=float, default=5.0,
                    help="pause between requests, uncounted: lets the proxy's post-answer "
                         "/tokenize of a recorded request finish, as a generation's length would")
    ap.add_argument("--upstream", choices=["real", "fake"], default="real")
    ap.add_argument("--fake-tps", type=float, default=500.0)
    a = ap.parse_args()
    server = a.upstream == "real" and (a.server or subprocess.run(
        [a.qtune, "server", "path"], capture_output=True, text=True, check=True).stdout.strip())
    model = a.model or os.path.expanduser("~/.cache/qtune/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    tmp = tempfile.mkdtemp(prefix="qtune-bench-")
    sport, pport = free_port(), free_port()
    procs = []
    try:
        if a.upstream == "real":
            procs.append(subprocess.Popen(
                [server, "-m", model, "-c", "4096", "-np", "1", "-t", str(a.threads),
                 "--host", "127.0.0.1", "--port", str(sport)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        else:
            fake_upstream(sport, a.fake_tps)
        wait_health(sport)
        rec = subprocess.Popen(
            [a.qtune, "record", "--upstream", f"http://127.0.0.1:{sport}",
             "--listen", f"127.0.0.1:{pport}", "--out", os.path.join(tmp, "bench.jsonl")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(rec)
        wait_health(pport)

        one = json.dumps({"prompt": "x = 1", "n_predict": 1, "temperature": 0, "cache_prompt": True})
        lat = {("health", "direct"): [], ("health", "proxy"): [],
               ("gen1", "direct"): [], ("gen1", "proxy"): []}
        for what, method, path, body in [("health", "GET", "/health", None),
                                          ("gen1", "POST", "/completion", one)]:
            conns = {"direct": conn(sport), "proxy": conn(pport)}
            for k in conns:  # warm up each connection
                for _ in range(5):
                    timed(conns[k], method, path, body)
            for i in range(a.requests):
                order = ["direct", "proxy"] if i % 2 == 0 else ["proxy", "direct"]
                for k in order:
                    time.sleep(a.gap_ms / 1000)
                    lat[(what, k)].append(timed(conns[k], method, path, body))
            for c in conns.values():
                c.close()

        tps = {"direct": [], "proxy": []}
        stream_tps(sport, 16)
        stream_tps(pport, 16)
        for i in range(a.rounds):
            order = ["direct", "proxy"] if i % 2 == 0 else ["proxy", "direct"]
            for k in order:
                tps[k].append(stream_tps(sport if k == "direct" else pport, a.stream_tokens))
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGINT)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    ms = lambda xs: statistics.median(xs) * 1000
    p90 = lambda xs: sorted(xs)[int(0.9 * (len(xs) - 1))] * 1000
    print(f"upstream: {a.upstream}; qtune: {a.qtune}")
    print(f"per request ({a.requests} each, alternating; client latency in ms):")
    out = {"upstream": a.upstream, "qtune": a.qtune, "requests": a.requests, "rounds": a.rounds,
           "stream_tokens": a.stream_tokens}
    for what in ["health", "gen1"]:
        d, p = lat[(what, "direct")], lat[(what, "proxy")]
        cost = ms(p) - ms(d)
        print(f"  {what:7s} direct median {ms(d):7.3f} p90 {p90(d):7.3f} | proxy median "
              f"{ms(p):7.3f} p90 {p90(p):7.3f} | cost {cost:+.3f} ms")
        out[what] = {"direct_ms": [x * 1000 for x in d], "proxy_ms": [x * 1000 for x in p],
                     "cost_median_ms": cost}
    ratios = [p / d for d, p in zip(tps["direct"], tps["proxy"])]
    print(f"streamed tokens/s ({a.rounds} rounds of {a.stream_tokens} tokens, ABBA):")
    print(f"  direct {statistics.median(tps['direct']):.1f}  proxy {statistics.median(tps['proxy']):.1f}"
          f"  proxy/direct per round: median {statistics.median(ratios):.4f} "
          f"(min {min(ratios):.4f}, max {max(ratios):.4f})")
    out["stream"] = {"direct_tps": tps["direct"], "proxy_tps": tps["proxy"], "ratios": ratios}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
