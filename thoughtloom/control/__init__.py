"""Self-aware search control: depth policy, budget negotiation, compromises, failure anticipation."""

from .controller import ControlSettings, Controller
from .feedback import AutomaticHandler, CallbackHandler, FeedbackHandler, InteractiveHandler
from .profiles import PROFILES, DomainChecks, DomainProfile, get_profile

__all__ = [
    "PROFILES",
    "AutomaticHandler",
    "CallbackHandler",
    "ControlSettings",
    "Controller",
    "DomainChecks",
    "DomainProfile",
    "FeedbackHandler",
    "InteractiveHandler",
    "get_profile",
]
