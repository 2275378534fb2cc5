"""A search space shared by the optimizer's tests: a hybrid MTP model on a Blackwell GPU, seven knobs (speculation
method and depth, async scheduling, slots, batched tokens, CUDA-graph capture size)."""

from __future__ import annotations

from controller.policy import parse_policy

#: the target (a hybrid MTP model on a Blackwell GPU) and the speculation knobs each optimizer test's space starts with
MTP_SPACE = (
    "target: {gpu_family: blackwell, hybrid: true, has_mtp: true, gpu_memory_gib: 252}\n"
    "space:\n"
    "  speculative_method: [none, mtp]\n"
    "  num_speculative_tokens: {min: 1, max: 3}\n"
    "  async_scheduling: [true, false]\n"
)
POLICY = parse_policy(
    MTP_SPACE + "  max_num_seqs: [64, 128, 256, 512]\n"
    "  max_num_batched_tokens: [4096, 8192, 16384]\n"
    "  max_cudagraph_capture_size: [null, 1024, 2048]\n"
)
CONFIGS = list(POLICY.space.configs())
