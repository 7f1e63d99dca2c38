"""A stand-in engine for the supervisor tests: prints a canned log, then serves or fails.

    python fake_engine.py --port P [--log FILE] [--exit N] [--hang] [--no-health]
                          [--child] [--ignore-term] [--delay S]

--exit N: exit with code N after the log (before serving). --hang: after the log, neither
serve nor exit. --child: start a child process in the same group (a "worker").
--ignore-term: ignore SIGTERM (so stop must escalate to SIGKILL).

Fault-injection scenarios (tests/runs/test_faults.py):
--setsid-child: a worker that moves to its own session (outside the run's process group).
--daemon-child: a worker that double-forks and setsid()s; its parent exits at once, so no
    snapshot of the engine's children ever sees it (only the inherited run marker does).
--fork-child: a worker started with a bare os.fork() (no exec), in the group.
--pids FILE: append the pid of every process this engine starts, one a line.
--ready-after S: load for S seconds (printing load progress) before serving.
"""

import argparse
import json
import os
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
    ap.add_argument("--setsid-child", action="store_true")
    ap.add_argument("--daemon-child", action="store_true")
    ap.add_argument("--fork-child", action="store_true")
    ap.add_argument("--pids")
    ap.add_argument("--ready-after", type=float, default=0.0)
    args = ap.parse_args()
    workers(args)
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

    deadline = time.monotonic() + args.ready_after
    step = 0
    while time.monotonic() < deadline:
        step += 1
        print(f"INFO fake engine: loading weights, step {step}", flush=True)
        time.sleep(0.05)
    server = HTTPServer((args.host, args.port), Handler)
    print("INFO:     Application startup complete.", flush=True)
    server.serve_forever()
    return 0


def _note_pid(args, pid: int) -> None:
    if args.pids:
        with open(args.pids, "a") as fh:
            fh.write(f"{pid}\n")


def _sleeper_code(args) -> str:
    code = "import signal,time\n"
    if args.ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    return code + "time.sleep(600)\n"


def workers(args) -> None:
    """Start the scenario's extra processes (besides --child, kept as it was)."""
    if args.setsid_child:
        p = subprocess.Popen([sys.executable, "-c", _sleeper_code(args)], start_new_session=True)
        _note_pid(args, p.pid)
    if args.fork_child:
        pid = os.fork()
        if pid == 0:  # the worker: no exec, just this interpreter sleeping
            if args.ignore_term:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(600)
            os._exit(0)
        _note_pid(args, pid)
    if args.daemon_child:
        # The classic daemon: fork, setsid, fork again, the middle exits at once.
        pid = os.fork()
        if pid == 0:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                if args.ignore_term:
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                _note_pid(args, os.getpid())
                time.sleep(600)
            os._exit(0)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    sys.exit(main())
