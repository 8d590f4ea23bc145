"""T-G, the host tiling of kernel G: the real ops' UT figures, hand-worked degenerate cases (tiny UB, negative
hidden length, no tokens, INT8 tokens), and the UB plan it implies."""
from __future__ import annotations

import itertools

import pytest

from ascend_sim import UBOverflowError, plan_pipe
from tiling.unpermute_gather import (
    GATHER_FIELDS,
    align_n,
    gather_buffers,
    gather_tiling,
    gather_ub_plan,
    unit_token_bytes,
)

# id: (gather_tiling arguments, expected 12 fields as the UT prints them, used_core_num)
FIGURES = {
    # §1.5 worked example (UT, PermuteGrad-style, no probs): tokens = 196608 / 512
    "worked-example-ub32768-bf16-h5120-k512": (
        dict(ub_bytes=32768, core_num=64, token_bytes=2, num_tokens=384, top_k=512, hidden=5120,
             num_out_tokens=196608, index_bytes=4),
        "5120 512 196608 1536 3 512 6 0 3 2 0 3", 64),
    # §8.d PWRM-grad UT bf16_mix (non-pad): Gp [1024, 7168], tokens_num 512 -> topK 2
    "pwrm-grad-bf16-mix": (
        dict(ub_bytes=261888, core_num=64, token_bytes=2, num_tokens=512, top_k=2, hidden=7168, num_out_tokens=1024,
             index_bytes=4),
        "7168 2 1024 7168 1 0 8 0 8 1 0 4", 64),
    # §9.d UWRM UT key 1: fp16 P [327744, 7168], probs fp16 [4096, 8] -> topK 80 (used_core_num 64 is field 12)
    "uwrm-key1-fp16-probs": (
        dict(ub_bytes=261888, core_num=64, token_bytes=2, num_tokens=4096, top_k=80, hidden=7168,
             num_out_tokens=327744, index_bytes=4, prob_bytes=2),
        "7168 80 327744 7168 1 0 64 0 64 1 0 4", 64),
    # §5.d Unpermute UT prob_none_bf16: P bf16 [6144, 20480], no probs (K = 1)
    "unpermute-prob-none-bf16": (
        dict(ub_bytes=261888, core_num=64, token_bytes=2, num_tokens=6144, top_k=1, hidden=20480, num_out_tokens=6144,
             index_bytes=4),
        "20480 1 6144 17920 1 2560 96 0 96 1 0 2", 64),
    # §4.d PermuteGrad UT: bf16 H 5120, K 64, R 49152 on a 65536-byte UB
    "permute-grad-ub65536": (
        dict(ub_bytes=65536 - 256, core_num=64, token_bytes=2, num_tokens=768, top_k=64, hidden=5120,
             num_out_tokens=49152, index_bytes=4),
        "5120 64 49152 4096 1 1024 12 0 12 1 0 2", 64),
    # §4.d PermuteGrad UT split_hidden_fp32_large
    "permute-grad-split-hidden-fp32": (
        dict(ub_bytes=261888, core_num=64, token_bytes=4, num_tokens=6144, top_k=8, hidden=32768,
             num_out_tokens=49152, index_bytes=4),
        "32768 8 49152 20992 1 11776 96 0 96 1 0 2", 64),
    # §5.d UT prob_small_ub_token_split: maxH(2) = AlignN(201 - 512) = 0 -> hidden length / num / remain 0
    "unpermute-small-ub-hidden-zero": (
        dict(ub_bytes=8192 - 256, core_num=48, token_bytes=2, num_tokens=64, top_k=8, hidden=4096, num_out_tokens=512,
             index_bytes=4, prob_bytes=2),
        "4096 8 512 0 0 0 1 16 1 1 0 4", 48),
    # §8.d UT non_pad_small_ub: fp16 [512, 8192], topK 4
    "pwrm-grad-small-ub-hidden-zero": (
        dict(ub_bytes=8192 - 256, core_num=48, token_bytes=2, num_tokens=128, top_k=4, hidden=8192, num_out_tokens=512,
             index_bytes=4),
        "8192 4 512 0 0 0 2 32 2 1 0 4", 48),
    # hand-worked: UB - 5120 < 0: maxH = AlignN(-80 - 512, 512) = -512 (the bit trick rounds toward +inf);
    # num = 1000 / -512 = -1, remain = 1000 % -512 = 488; maxH(4) = -512 too, so 4 buffers;
    # remainUB = 4000 + 512 * 18 - 256 = 12960 holds the chunk
    "negative-hidden-length-ub4000": (
        dict(ub_bytes=4000, core_num=4, token_bytes=2, num_tokens=10, top_k=2, hidden=1000, num_out_tokens=20,
             index_bytes=4),
        "1000 2 20 -512 -1 488 2 2 2 1 0 4", 4),
    # hand-worked token chunks: maxH(2) = 512, 3 buffers (maxH(4) = 0, maxH(3) = 512), remainUB = 13520 - 512 * 16
    # - 256 = 5072 < 20 * 80 * 10 -> chunks of 5072 / 800 = 6 tokens: 3 of them and 2 left
    "token-chunks-bf16-probs": (
        dict(ub_bytes=13520, core_num=2, token_bytes=2, num_tokens=41, top_k=80, hidden=40, num_out_tokens=3230,
             index_bytes=4, prob_bytes=2),
        "40 80 3230 40 1 0 20 1 6 3 2 3", 2),
    # INT8 tokens: the size table gives 0 bytes, so only the two fp32 casts count (unitH = 8)
    "int8-tokens-size-zero": (
        dict(ub_bytes=261888, core_num=48, token_bytes=0, num_tokens=100, top_k=2, hidden=4096, num_out_tokens=200,
             index_bytes=4),
        "4096 2 200 4096 1 0 2 4 2 1 0 4", 48),
    # no tokens: no cores, every division by 0 gives 0
    "no-tokens": (
        dict(ub_bytes=196352, core_num=48, token_bytes=2, num_tokens=0, top_k=4, hidden=128, num_out_tokens=0,
             index_bytes=4, prob_bytes=4),
        "128 4 0 128 1 0 0 0 0 1 0 4", 0),
}


@pytest.mark.parametrize("case", FIGURES)
def test_figures(case):
    kwargs, data, used = FIGURES[case]
    result = gather_tiling(**kwargs)
    assert tuple(result.fields) == GATHER_FIELDS
    assert list(result.fields.values()) == [int(v) for v in data.split()]
    assert result.used_core_num == used


def test_field_names_follow_the_struct():
    assert GATHER_FIELDS == (
        "hidden_size", "top_k", "num_out_tokens", "hidden_splited_length", "hidden_splited_num",
        "hidden_splited_remain", "tokens_core_length", "tokens_core_remain", "tokens_splited_length",
        "tokens_splited_num", "tokens_splited_remain", "buffer_num")


@pytest.mark.parametrize("x,expected", [(0, 0), (1, 512), (512, 512), (513, 1024), (-1, 0), (-511, 0), (-512, -512),
                                        (-513, -512), (-1024, -1024)])
def test_align_n_is_the_bit_trick(x, expected):
    assert align_n(x, 512) == expected


@pytest.mark.parametrize("index_bytes,prob_bytes,expected", [(4, None, 4), (4, 2, 10), (4, 4, 8), (8, 2, 14)],
                         ids=["no-probs", "2-byte-probs-plus-fp32-copy", "fp32-probs", "int64-indices"])
def test_unit_token_bytes(index_bytes, prob_bytes, expected):
    assert unit_token_bytes(index_bytes, prob_bytes) == expected


def test_ub_plan_rows_of_the_uwrm_example():
    """fp16 tokens, fp16 probs (UWRM UT key 1): every InitBuffer of Init() with its size and kind."""
    f = gather_tiling(**FIGURES["uwrm-key1-fp16-probs"][0]).fields
    plan = gather_ub_plan(f, token_bytes=2, prob_bytes=2, tokens_fp32=False, pipe="p")
    rows = [(b.name, b.bytes, b.count, b.kind, b.position, b.depth, b.pipe) for b in plan]
    assert rows == [
        ("tokens_inque", 7168 * 2, 4, "TQue", "VECIN", 1, "p"),
        ("indices_inque", 64 * 80 * 4, 1, "TQue", "VECIN", 1, "p"),
        ("outque", 7168 * 2, 1, "TQue", "VECOUT", 1, "p"),
        ("temp_buffer0", 7168 * 4 + 256, 1, "TBuf", "VECCALC", 0, "p"),
        ("temp_buffer1", 7168 * 4, 1, "TBuf", "VECCALC", 0, "p"),
        ("probs_inque", 64 * 80 * 2, 1, "TQue", "VECIN", 1, "p"),
        ("temp_buffer2", 64 * 80 * 4, 1, "TBuf", "VECCALC", 0, "p"),
    ]


@pytest.mark.parametrize("tokens_fp32,prob_bytes", list(itertools.product([False, True], [None, 2, 4])),
                         ids=lambda v: str(v))
def test_plan_names_match_gather_buffers(tokens_fp32, prob_bytes):
    f = gather_tiling(ub_bytes=196352, core_num=8, token_bytes=4 if tokens_fp32 else 2, num_tokens=20, top_k=3,
                      hidden=100, num_out_tokens=60, index_bytes=4, prob_bytes=prob_bytes).fields
    plan = gather_ub_plan(f, token_bytes=4 if tokens_fp32 else 2, prob_bytes=prob_bytes, tokens_fp32=tokens_fp32,
                          pipe="pipe")
    assert tuple(b.name for b in plan) == gather_buffers(tokens_fp32, prob_bytes is not None, prob_bytes == 4)


@pytest.mark.parametrize("token_bytes,prob_bytes", [(2, None), (2, 2), (2, 4), (4, None), (4, 2), (4, 4)])
@pytest.mark.parametrize("ub_size", [8448, 16384, 65536, 196608])
def test_plan_fits_the_ub_it_was_tiled_for(ub_size, token_bytes, prob_bytes):
    """Whatever the shape, the buffers T-G sizes fit in the chip's UB (the tiling sees 256 bytes less)."""
    for hidden, top_k, tokens in ((1, 1, 1), (129, 7, 1000), (5000, 64, 300), (30000, 512, 3), (70000, 2, 9)):
        f = gather_tiling(ub_bytes=ub_size - 256, core_num=4, token_bytes=token_bytes, num_tokens=tokens, top_k=top_k,
                          hidden=hidden, num_out_tokens=tokens * top_k, index_bytes=4, prob_bytes=prob_bytes).fields
        plan = gather_ub_plan(f, token_bytes=token_bytes, prob_bytes=prob_bytes, tokens_fp32=token_bytes == 4,
                              pipe="pipe")
        plan_pipe(plan, ub_size)   # raises UBOverflowError if not


def test_negative_hidden_length_plan_overflows_instead_of_crashing():
    """InitBuffer takes a uint32 length: the negative piece of a UB below 5120 bytes becomes ~4 GiB."""
    f = gather_tiling(**FIGURES["negative-hidden-length-ub4000"][0]).fields
    plan = gather_ub_plan(f, token_bytes=2, tokens_fp32=False, pipe="pipe")
    assert plan[0].bytes == 2 ** 32 - 1024
    with pytest.raises(UBOverflowError):
        plan_pipe(plan, 4256)
