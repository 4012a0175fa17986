"""Self-aware search control: depth policy, budget negotiation, compromises, failure anticipation."""

from .controller import Controller, ControlSettings
from .feedback import AutomaticHandler, CallbackHandler, FeedbackHandler
from .profiles import PROFILES, DomainChecks, DomainProfile, get_profile
from .report import ControlReport

__all__ = [
    "PROFILES",
    "AutomaticHandler",
    "CallbackHandler",
    "ControlReport",
    "ControlSettings",
    "Controller",
    "DomainChecks",
    "DomainProfile",
    "FeedbackHandler",
    "get_profile",
]
