"""Preflight: the gate between an LLM agent and a consequential tool call.

Pure Python, usable on its own (embedded mode): compile a tool contract into a plan once, then evaluate
candidate executions against it cheaply.
"""

from .approvals import Approval, approve
from .checklist import Checklist, load_rules
from .contract import ToolContract, contract_from_mcp
from .engine import Plan, compile_plan, preflight, select_tool
from .errors import ChecklistError, ContractError, ExpressionError, GrantError, PreflightError, RequestError
from .grants import GrantClaims, GrantExpectation, GrantSigner, verify_grant
from .pointers import Span, Turn
from .record import Record
from .request import Answer, Candidate, Evidence, ExecutionRequest, Observation, Preset, PriorValue, Timing
from .runner import run_frontier, settle

__all__ = [
    "Answer",
    "Approval",
    "Candidate",
    "Checklist",
    "ChecklistError",
    "ContractError",
    "Evidence",
    "ExecutionRequest",
    "ExpressionError",
    "GrantClaims",
    "GrantError",
    "GrantExpectation",
    "GrantSigner",
    "Observation",
    "Plan",
    "PreflightError",
    "Preset",
    "PriorValue",
    "Record",
    "RequestError",
    "Span",
    "Timing",
    "ToolContract",
    "Turn",
    "approve",
    "compile_plan",
    "contract_from_mcp",
    "load_rules",
    "preflight",
    "run_frontier",
    "select_tool",
    "settle",
    "verify_grant",
]
