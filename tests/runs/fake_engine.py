"""A stand-in engine for the supervisor tests: prints a canned log, then serves or fails.

    python fake_engine.py --port P [--log FILE] [--exit N] [--hang] [--no-health]
                          [--child] [--ignore-term] [--delay S]

--exit N: exit with code N after the log (before serving). --hang: after the log, neither
serve nor exit. --child: start a child process in the same group (a "worker").
--ignore-term: ignore SIGTERM (so stop must escalate to SIGKILL).
"""

import argparse
import json
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--log")
    ap.add_argument("--exit", type=int)
    ap.add_argument("--hang", action="store_true")
    ap.add_argument("--no-health", action="store_true")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--ignore-term", action="store_true")
    ap.add_argument("--delay", type=float, default=0.0)
    args = ap.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.child:
        # A worker in the same process group, also ignoring SIGTERM when asked.
        code = "import signal,time\n"
        if args.ignore_term:
            code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        code += "time.sleep(600)\n"
        subprocess.Popen([sys.executable, "-c", code])
    if args.log:
        with open(args.log) as f:
            for line in f:
                sys.stdout.write(line)
                sys.stdout.flush()
    time.sleep(args.delay)
    if args.exit is not None:
        sys.stderr.write(f"fake engine: exiting with {args.exit}\n")
        return args.exit
    if args.hang:
        time.sleep(600)
        return 0

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/health" and not args.no_health:
                self._send(200, b"")
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": "fake-model"}]}).encode())
            else:
                self._send(404, b"{}")

        def _send(self, code, body):
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = HTTPServer((args.host, args.port), Handler)
    print("INFO:     Application startup complete.", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
