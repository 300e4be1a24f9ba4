"""The recovery state machine: its states and the only transitions allowed between them.

A recovery is created once the policy decides to act on a fault report. Each step is persisted
before the side effect that follows it, so a controller that restarts finds where it was and
either finishes the step (isolation is checked with the backend first, never repeated) or rolls
back.
"""

from __future__ import annotations

from enum import Enum

from recovery.errors import TransitionError


class State(str, Enum):
    DECIDED = "decided"              # the policy chose a node to isolate
    ISOLATING = "isolating"          # about to ask the backend to isolate the node
    ISOLATED = "isolated"            # the backend confirms the node is isolated
    RESTARTING = "restarting"        # restart requested; waiting for the job to stop
    STOPPED = "stopped"              # the job's processes are gone
    RELAUNCHED = "relaunched"        # the job runs again without the node
    RESUMED = "resumed"              # its first training step after the restart is done
    FAILED = "failed"                # a step failed or timed out; the reason is recorded
    ROLLED_BACK = "rolled_back"      # abandoned before isolation took effect

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({State.RESUMED, State.FAILED, State.ROLLED_BACK})

#: Every allowed move. Anything else is a bug (or a corrupted journal) and raises.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.DECIDED: frozenset({State.ISOLATING, State.ROLLED_BACK}),
    State.ISOLATING: frozenset({State.ISOLATED, State.FAILED, State.ROLLED_BACK}),
    State.ISOLATED: frozenset({State.RESTARTING, State.FAILED}),
    # a supervisor may stop and relaunch between two polls of the controller
    State.RESTARTING: frozenset({State.STOPPED, State.RELAUNCHED, State.RESUMED, State.FAILED}),
    State.STOPPED: frozenset({State.RELAUNCHED, State.RESUMED, State.FAILED}),
    State.RELAUNCHED: frozenset({State.RESUMED, State.FAILED}),
    State.RESUMED: frozenset(),
    State.FAILED: frozenset(),
    State.ROLLED_BACK: frozenset(),
}


def check_transition(src: State, dst: State) -> None:
    """Raise TransitionError unless ``src -> dst`` is in the table."""
    if dst not in TRANSITIONS[src]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[src])) or "none (terminal)"
        raise TransitionError(f"a recovery cannot go from {src.value} to {dst.value}; "
                              f"allowed from {src.value}: {allowed}")
