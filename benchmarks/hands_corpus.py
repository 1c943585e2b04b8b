"""How the approval decision fares on the test suite's two corpora: evasion forms that must be held, and
everyday commands that must run unasked (tests/hands/test_hands_rules.py holds both).

    python -m benchmarks.hands_corpus

Prints how many evasions would run without a question and how many everyday commands would ask. Run on
an older commit (a worktree, with this file and the test corpora copied in) to compare.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from agent.hands.paths import Confinement
from agent.hands.rules import LABELS, Judge, Places
from tests.hands.test_hands_rules import EVASIONS, HARMLESS, make_home, placed


def main() -> None:
    home = make_home(Path(tempfile.mkdtemp()))
    judge = Judge(list(LABELS), [], Places.of(Confinement.of(home / "workspace"), home))
    unasked = [command for command in EVASIONS if not judge.findings(placed(command, home))]
    asked = [command for command in HARMLESS if judge.findings(command)]
    print(f"evasions run without a question: {len(unasked)} of {len(EVASIONS)}")
    print(f"everyday commands that ask:      {len(asked)} of {len(HARMLESS)}")
    for command in unasked:
        print(f"  unasked: {command}")
    for command in asked:
        print(f"  asked:   {command}")


if __name__ == "__main__":
    main()
