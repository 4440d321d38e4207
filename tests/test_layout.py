"""Layouts against hand-checked tables, and the algebra that layout inference relies on."""

import numpy as np
import pytest

from tileagent.compiler.layout import Fragment, Layout, Level, Swizzle, make_blocked


def test_blocked_layout_puts_consecutive_pairs_on_consecutive_threads():
    frag = make_blocked((2, 8), num_threads=8, vector=2)
    thread, slot = frag.tables()
    assert thread.tolist() == [[0, 0, 1, 1, 2, 2, 3, 3], [4, 4, 5, 5, 6, 6, 7, 7]]
    assert slot.tolist() == [[0, 1, 0, 1, 0, 1, 0, 1], [0, 1, 0, 1, 0, 1, 0, 1]]
    assert frag.num_slots == 2 and frag.vector_width == 2 and frag.num_replicas == 1


def test_blocked_layout_replicates_when_the_tile_is_smaller_than_the_block():
    frag = make_blocked((4,), num_threads=8, vector=4)
    thread, _ = frag.tables()
    assert thread.tolist() == [0, 1, 2, 3]
    assert frag.replica_offsets() == [0, 4]
    assert frag.owner_mask()[2].nonzero()[0].tolist() == [2, 6]


def test_projection_turns_the_reduced_dims_threads_into_replicas():
    rows = make_blocked((2, 8), num_threads=8, vector=2).project(1)
    assert rows.shape == (2,)
    assert [rows.owner_mask()[i].nonzero()[0].tolist() for i in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_levels_reproduce_the_mma_m16n8_accumulator_table():
    # PTX mma.m16n8k16 C/D fragment: lane = (row % 8) * 4 + (col % 8) // 2, register = (row // 8) * 2 + col % 2
    frag = Fragment((16, 8), ((Level(8, 4), Level(2)), (Level(2), Level(4, 1))), num_threads=32)
    thread, slot = frag.tables()
    rows, cols = np.meshgrid(np.arange(16), np.arange(8), indexing="ij")
    assert (thread == (rows % 8) * 4 + cols // 2).all()
    assert (slot == (rows // 8) * 2 + cols % 2).all()
    assert thread[9, 5] == 6 and slot[9, 5] == 3


def test_inverse_undoes_the_tables():
    frag = make_blocked((6, 40), num_threads=64, vector=4)
    thread, slot = frag.tables()
    for i, j in [(0, 0), (5, 39), (3, 17)]:
        assert frag.inverse(int(thread[i, j]), int(slot[i, j])) == (i, j)


def test_an_outer_dim_with_few_power_of_two_factors_is_padded_not_cut_to_single_elements():
    """(200, 8) on 64 threads (8 rows of 200 fp16 values as 16-byte vectors): 200 = 8 x 25 splits over only 8
    threads with whole-vector runs, so the layout fell back to one element a thread (2-byte loads); it now pads the
    vector rows to 256 (4 x 64, ratio 1.28) and keeps 8-element runs. Exact tilings are unchanged."""
    frag = make_blocked((200, 8), num_threads=64, vector=8)
    assert frag.vector_width == 8 and frag.num_replicas == 1 and frag.padded_shape == (256, 8)
    thread, slot = frag.tables()
    rows = np.arange(200)
    assert (thread == (rows % 64)[:, None]).all() and (slot == (rows // 64 * 8)[:, None] + np.arange(8)).all()
    assert make_blocked((256, 8), num_threads=64, vector=8).padded_shape == (256, 8)
    assert make_blocked((333, 8), num_threads=64, vector=8).vector_width == 8  # odd: padded before too


def test_repeat_and_replicate_grow_registers_and_owners():
    frag = Fragment((4, 8), make_blocked((4, 8), num_threads=16, vector=2).dims, num_threads=32)
    assert frag.repeat(0, 2).shape == (8, 8) and frag.repeat(0, 2).num_slots == 2 * frag.num_slots
    doubled = frag.replicate_over(2)
    assert doubled.num_replicas == 2 and doubled.owner_mask()[0, 0].nonzero()[0].tolist() == [0, 16]


def test_overlapping_thread_levels_are_rejected():
    with pytest.raises(ValueError, match="overlap"):
        Fragment((4, 4), ((Level(4, 1),), (Level(4, 2),)), num_threads=16)


def test_padded_row_layout_leaves_gaps():
    layout = Layout.row_major((4, 8), pad=4)
    assert layout.strides == (12, 1) and layout.size == 44
    assert layout.offset((2, 3)) == 27


def test_128_byte_swizzle_of_a_half_tile():
    layout = Layout((8, 64), swizzle=Swizzle(bits=3, base=3, shift=3))
    assert layout.offset((0, 5)) == 5
    assert layout.offset((1, 0)) == 72 and layout.offset((2, 8)) == 152
    assert layout.is_bijective()
    inverse = layout.inverse()
    assert inverse[152] == 2 * 64 + 8


def test_compose_applies_the_inner_layout_first():
    inner = Layout((4, 4), strides=(1, 4))  # column-major view
    outer = Layout.row_major((4, 4))
    assert outer.compose(inner).offset((1, 2)) == 9


def test_table_prints_thread_and_register():
    text = make_blocked((2, 8), num_threads=8, vector=2).table()
    assert "T0:0" in text.splitlines()[1] and "T7:1" in text.splitlines()[2]


def test_swizzle_choice_follows_the_row_bytes():
    from tileagent.compiler.layout import swizzled

    assert swizzled((128, 64), 2).swizzle == Swizzle(bits=3, base=3, shift=3)  # 128-byte rows: 8 chunks
    assert swizzled((64, 32), 2).swizzle == Swizzle(bits=2, base=3, shift=2)  # 64-byte rows
    assert swizzled((64, 128), 2).swizzle == Swizzle(bits=3, base=3, shift=4)  # row index above 128 columns
    assert swizzled((64, 24), 2).swizzle is None  # not a power of two: plain rows
    # the 8 rows an mma fragment reads at one 16-byte column chunk fall in 8 different chunks (banks)
    layout = swizzled((128, 64), 2)
    assert sorted(layout.offset((r, 0)) % 64 // 8 for r in range(8)) == list(range(8))


def test_mma_accumulator_layout_and_partition():
    from tileagent.compiler.layout.mma import accumulator_layout, operand_a_layout, warp_partition

    assert warp_partition(128, 128, 4, 0) == (2, 2)
    assert warp_partition(64, 64, 8, 2) == (1, 8)
    acc = accumulator_layout(32, 16, 2, 1, 64)
    thread, slot = acc.tables()
    assert thread[17, 3] == 32 + 4 * 1 + 1 and slot[17, 3] == 1  # warp 1, row 1 of its atom, cols 2-3
    assert thread[9, 13] == 4 * 1 + 2 and slot[9, 13] == ((0 * 2 + 1) * 2 + 1) * 2 + 1
    a = operand_a_layout(16, 32, 1, 2, 64)
    assert a.num_replicas == 2 and a.owner_mask()[0, 0].nonzero()[0].tolist() == [0, 32]


def test_tables_are_computed_once_per_fragment_value_and_read_only(monkeypatch):
    """Layout inference and the lowering ask for a fragment's tables many times per kernel (compile latency)."""
    from tileagent.compiler.layout import fragment as fragment_mod

    calls = []
    real = Fragment._tables
    monkeypatch.setattr(Fragment, "_tables", lambda self: calls.append(self) or real(self))
    frag = make_blocked((4, 8), num_threads=16, vector=2)
    same = make_blocked((4, 8), num_threads=16, vector=2)  # another object, equal value: shares the tables
    assert frag.tables()[0] is same.tables()[0] and len(calls) == 1
    frag.owner_mask(), frag.owner_mask(), frag.index_table()
    assert len(calls) == 1
    for table in (*frag.tables(), frag.owner_mask(), frag.index_table()):
        with pytest.raises(ValueError, match="read-only"):
            table[(0,) * table.ndim] = 1
    other = make_blocked((8, 8), num_threads=16, vector=2)
    assert other != frag and other.tables()[0].shape == (8, 8) and len(calls) == 2
    del frag, same
    calls.clear()  # it held the fragment too
    import gc

    gc.collect()
    assert make_blocked((4, 8), num_threads=16, vector=2) not in fragment_mod._MEMO  # held only while one lives


@pytest.mark.parametrize("shape,threads,replicate", [((2, 8), 8, 1), ((4,), 8, 1), ((8, 416), 128, 1),
                                                     ((3, 5), 32, 1), ((8,), 128, 4), ((64, 4), 128, 2)])
def test_owner_bits_and_valid_table_agree_with_the_tables(shape, threads, replicate):
    frag = make_blocked(shape, num_threads=threads)
    if replicate > 1 and frag.threads_used * replicate <= threads:
        frag = frag.replicate_over(replicate)
    # owner_bits: the owner mask packed 8 threads a byte, as np.packbits packs it
    assert (frag.owner_bits() == np.packbits(frag.owner_mask(), axis=-1)).all()
    assert not frag.owner_bits().flags.writeable
    # valid_table: the (thread, slot) pairs that hold an element of the shape, from the inverse map
    table = frag.index_table()
    want = np.zeros((threads, frag.num_slots), dtype=bool)
    for t in range(frag.threads_used):
        for k in range(frag.num_slots):
            want[t, k] = all(table[t, k, d] < n for d, n in enumerate(shape))
    assert (frag.valid_table(threads) == want).all()


def test_truncate_keeps_the_fastest_levels_when_the_slower_ones_are_registers():
    """mma.sync's TF32 A layout along K ([4 threads, 2 registers, 4 registers] for 32 columns): columns 0..3 are on
    threads 0..3 and every block of 4 repeats that in other registers, so a loop over 4 columns runs on the cut map;
    a cut of 2 splits a thread level, and a blocked layout spreads its blocks over threads: no cut."""
    frag = Fragment((2, 32), ((Level(2, 4),), (Level(4, 1), Level(2), Level(4))), num_threads=8)
    cut = frag.truncate(1, 4)
    assert cut.shape == (2, 4) and cut.tables()[0].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert frag.truncate(1, 8).tables()[1].tolist() == [[0, 0, 0, 0, 1, 1, 1, 1]] * 2
    assert frag.truncate(1, 2) is None and frag.truncate(1, 3) is None
    assert make_blocked((4, 64), num_threads=32, vector=4).truncate(1, 4) is None
