"""Engine log → Diagnosis: the root cause, its explanation and fixes; signatures are data.

Public API (used by `servepilot triage` and by the launch supervisor):
    triage_file(path, engine=None, since=None) -> Diagnosis
    triage_text(text, engine=None) -> Diagnosis
    parse_line(raw) -> LogLine
"""

from servepilot.triage.api import triage_file, triage_text
from servepilot.triage.diagnosis import Cause, Diagnosis
from servepilot.triage.lines import LogLine, parse_line
from servepilot.triage.signatures import TriageRemedy

__all__ = ["Cause", "Diagnosis", "LogLine", "TriageRemedy", "parse_line", "triage_file", "triage_text"]
