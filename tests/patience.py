"""How long a test waits for something that must happen (a process to exit, a server to
answer) before calling the build broken.

A cap, not a timing: every wait ends as soon as its condition holds, and on a quiet box
that is well under a second. CI is a loaded 2-core machine where a Python process can take
tens of seconds to start, so the cap is generous; speed belongs in bench/, never here.
"""

PATIENCE_S = 300.0
