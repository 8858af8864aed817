"""The process transport's weights on CUDA: the generator process decodes the trainer's device memory through CUDA
IPC (tests/transport/test_weights.py: the model that shows it, and the same on the CPU)."""

import pytest

from weights_helpers import check_versions

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.gpu
@pytest.mark.parametrize("alias, bf16", [(False, False), (True, False), (True, True)])
def test_on_cuda_the_generator_process_decodes_the_trainers_device_memory(alias, bf16):
    """tests/transport/test_weights.py's check on CUDA: the buffer reaches the generator process through CUDA
    IPC (device to device)."""
    check_versions("cuda", alias, bf16)
