"""A build killed with SIGKILL (no cleanup code runs) leaves nothing under the final name."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

from conftest import KV_SCHEME_PATCHES, inventory, write_checkpoint
from patience import PATIENCE_S

from servepilot.overlay import overlay_status, plan_overlay

# The child slows each symlink down (2 ms) so the kill lands mid-build on any machine; the
# build code itself is the real one.
CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path

    original, dest, ready, patches = sys.argv[1], sys.argv[2], Path(sys.argv[3]), json.loads(sys.argv[4])
    real_symlink = os.symlink
    made = 0

    def slow_symlink(src, dst):
        global made
        real_symlink(src, dst)
        made += 1
        if made == 100:
            ready.write_text("mid-build")
        time.sleep(0.002)

    os.symlink = slow_symlink
    from servepilot.overlay import plan_overlay

    plan_overlay(original, patches, dest=dest).execute()
    print("finished")
    """
)


def test_sigkill_mid_build_leaves_no_directory_under_the_final_name(tmp_path):
    original = write_checkpoint(tmp_path / "big")
    shards = original / "shards"
    shards.mkdir()
    for i in range(3000):  # a large file-count original: 3000 links at 2 ms each is ~6 s
        (shards / f"part-{i:05d}.bin").write_bytes(b"x")
    before = inventory(original)
    dest = tmp_path / "overlay"
    ready = tmp_path / "ready"

    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(original), str(dest), str(ready), json.dumps(KV_SCHEME_PATCHES)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + PATIENCE_S
    while not ready.exists():
        assert child.poll() is None, child.stderr.read().decode()
        assert time.monotonic() < deadline, "the child never got to building"
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=PATIENCE_S)
    child.stdout.close()
    child.stderr.close()

    assert child.returncode == -signal.SIGKILL
    assert not dest.exists() and not dest.is_symlink()
    partial = [p for p in tmp_path.iterdir() if p.name.startswith(".overlay.partial-")]
    assert len(partial) == 1, "the kill did not land mid-build"
    assert any(partial[0].rglob("*.bin")), "the kill did not land after links were made"
    assert inventory(original) == before

    # the leftover is hidden, named by the next plan, and does not block it
    plan = plan_overlay(original, KV_SCHEME_PATCHES, dest=dest)
    assert plan.leftovers == (str(partial[0]),)
    rebuilt = plan.execute()
    assert overlay_status(rebuilt).clean
    assert len(list((rebuilt / "shards").iterdir())) == 3000
