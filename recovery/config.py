"""The settings of ``c4 recover``, declared once: the policy's (``recovery.policy.Policy``) and
the controller's, each field with its flag, ``C4_*`` environment variable, help and range
(``c4.settings``). The command's options are derived from them. Kept apart from the controller
so that building the command imports no gRPC."""

from __future__ import annotations

from dataclasses import dataclass

from c4.settings import positive, setting, validate
from recovery.errors import ConfigError
from recovery.policy import Policy


@dataclass(frozen=True)
class ControllerConfig:
    restart_timeout_s: float = setting(600.0, flag="--restart-timeout",
                                       env="C4_RECOVER_RESTART_TIMEOUT", check=positive,
                                       help="Seconds from restart request to first step "
                                            "before the recovery counts as failed.")
    #: How often active recoveries are advanced while no report arrives.
    poll_s: float = setting(0.2, check=positive)
    #: Longest wait between reconnections to the daemon.
    reconnect_max_s: float = setting(5.0, check=positive)

    def __post_init__(self) -> None:
        validate(self, ConfigError)


@dataclass(frozen=True)
class RecoverConfig:
    """Everything ``c4 recover`` decides by: which reports it acts on and how much it may do,
    and how the controller follows a recovery."""

    policy: Policy = setting(default_factory=Policy)
    controller: ControllerConfig = setting(default_factory=ControllerConfig)
