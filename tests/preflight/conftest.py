import pytest
from builders import Said, request

from preflight import ExecutionRequest


@pytest.fixture
def alice() -> Said:
    return Said("Send 120 from DE11 to Bob's account DE02 1203 0000 0000 2020 51 now")


@pytest.fixture
def grounded(alice: Said) -> ExecutionRequest:
    return request(
        alice,
        {
            "amount": (120, "120"),
            "from_account": ("DE11", "DE11"),
            "to_account": ("DE02120300000000202051", "DE02 1203 0000 0000 2020 51"),
        },
    )
