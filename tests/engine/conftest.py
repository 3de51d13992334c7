import pytest
from builders import Said, request

from preflight import ExecutionRequest


@pytest.fixture
def alice() -> Said:
    return Said("Send 120 from DE11 to Bob's account DE02 1203 0000 now")


@pytest.fixture
def grounded(alice: Said) -> ExecutionRequest:
    return request(
        alice,
        {
            "amount": (120, "120"),
            "from_account": ("DE11", "DE11"),
            "to_account": ("DE0212030000", "DE02 1203 0000"),
        },
    )
