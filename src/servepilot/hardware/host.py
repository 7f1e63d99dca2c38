"""Facts about the machine a command will run on that are not about its GPUs: the port.

Probed once, when the deployment is built, for every command that runs here, whatever
the source of the GPU facts (`--gpu` describes the GPUs; the port is still this
machine's). Rules only read the result, so `check` stays a pure function of the
deployment and a test can hand it any facts it likes.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from servepilot.hardware.probe import port_free

# A connect to a local listener answers in microseconds; 0.2 s is generous on a loaded box
# and short enough that a filtered address does not stall `check`.
CONNECT_TIMEOUT_S = 0.2


@dataclass(frozen=True)
class HostFacts:
    """What servepilot found on this machine for one command."""

    port: int | None = None
    port_host: str | None = None  # the address the engine will bind (0.0.0.0 when not given)
    port_free: bool | None = None  # could the engine bind it now (None: cannot tell here)
    port_listener: bool = False  # something answered a TCP connect on it
    notes: tuple[str, ...] = ()
    source: str = "local probe"

    @property
    def port_busy(self) -> bool:
        return self.port_listener or self.port_free is False


def _connects(address: str, port: int) -> bool:
    target = "127.0.0.1" if address in ("0.0.0.0", "", "*") else "::1" if address in ("::", "[::]") else address
    family = socket.AF_INET6 if ":" in target else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(CONNECT_TIMEOUT_S)
            return s.connect_ex((target, port)) == 0
    except (OSError, OverflowError, ValueError):
        return False


def probe_port(port: int | None, host: str | None = None) -> HostFacts:
    """The port facts for an engine that will bind `host`:`port` on this machine."""
    if port is None or not 0 < port < 65536:
        return HostFacts(port=port, port_host=host)  # an out-of-range port is SP-ARGS's to say
    address = host or "0.0.0.0"
    try:
        free, why = port_free(address, port)
    except (OSError, OverflowError, ValueError) as exc:  # an unresolvable --host
        free, why = None, f"port {port} on {address}: cannot test here ({exc})"
    return HostFacts(port=port, port_host=address, port_free=free,
                     port_listener=_connects(address, port), notes=(why,) if why else ())
