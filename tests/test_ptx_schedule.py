"""compiler.targets.ptx_schedule: where global stores land, on hand-written instruction lists."""

from tileagent.compiler.targets.ptx_schedule import schedule_stores


def lines(text: str) -> list[str]:
    return ["\t" + x.strip() if not x.strip().endswith(":") else x.strip() for x in text.strip().splitlines()]


def test_a_store_follows_its_last_value_with_its_address_computation():
    before = lines("""
        div.rn.f32 %f1, %f0, %f9;
        div.rn.f32 %f2, %f0, %f9;
        div.rn.f32 %f3, %f0, %f9;
        cvt.s64.s32 %rd1, %r1;
        mad.lo.s64 %rd2, %rd1, 4, %rd0;
        st.global.f32 [%rd2], %f1;
        st.global.f32 [%rd2+4], %f2;
        st.global.f32 [%rd2+8], %f3;
    """)
    assert schedule_stores(before) == lines("""
        div.rn.f32 %f1, %f0, %f9;
        cvt.s64.s32 %rd1, %r1;
        mad.lo.s64 %rd2, %rd1, 4, %rd0;
        st.global.f32 [%rd2], %f1;
        div.rn.f32 %f2, %f0, %f9;
        st.global.f32 [%rd2+4], %f2;
        div.rn.f32 %f3, %f0, %f9;
        st.global.f32 [%rd2+8], %f3;
    """)


def test_a_store_passes_read_only_and_shared_loads_but_not_what_may_alias_or_order_it():
    passes = lines("""
        mov.f32 %f1, 0f3F800000;
        ld.global.nc.f32 %f2, [%rd5];
        ld.shared.f32 %f3, [%r4];
        add.f32 %f4, %f2, %f3;
        st.global.f32 [%rd1], %f1;
    """)
    assert schedule_stores(passes)[1] == "\tst.global.f32 [%rd1], %f1;"
    for blocker in ("ld.global.f32 %f2, [%rd5];", "st.shared.f32 [%r4], %f3;", "red.global.add.f32 [%rd6], %f3;",
                    "bar.sync 0;", "bra $L1;", "@%p1 st.global.f32 [%rd7], %f1;"):
        text = lines(f"mov.f32 %f1, 0f3F800000;\n{blocker}\nadd.f32 %f4, %f1, %f1;\nst.global.f32 [%rd1], %f1;")
        assert schedule_stores(text) == [*text[:2], text[3], text[2]], blocker
    label = lines("mov.f32 %f1, 0f3F800000;\n$L1:\nadd.f32 %f4, %f1, %f1;\nst.global.f32 [%rd1], %f1;")
    assert schedule_stores(label) == [*label[:2], label[3], label[2]]


def test_a_store_waits_for_its_guard_and_for_every_write_of_its_registers():
    guarded = lines("""
        setp.lt.s32 %p1, %r1, %r2;
        add.f32 %f4, %f1, %f1;
        @%p1 st.global.f32 [%rd1], %f1;
    """)
    assert schedule_stores(guarded) == [guarded[0], guarded[2], guarded[1]]
    rewritten = lines("""
        mov.f32 %f1, 0f00000000;
        @%p2 mov.f32 %f1, %f7;
        add.f32 %f4, %f7, %f7;
        st.global.f32 [%rd1], %f1;
    """)
    assert schedule_stores(rewritten) == [*rewritten[:2], rewritten[3], rewritten[2]]
    # the store passes another reader of its address register and stops at that register's definition
    shared_address = lines("""
        mad.lo.s64 %rd2, %rd1, 4, %rd0;
        add.s64 %rd3, %rd2, 16;
        add.f32 %f4, %f7, %f7;
        st.global.f32 [%rd2], %f1;
    """)
    assert schedule_stores(shared_address) == [shared_address[0], shared_address[3], *shared_address[1:3]]


def test_a_store_stays_after_the_wait_for_the_previous_kernel():
    """A dependent launch's kernel may run while the previous kernel of the stream drains: a store moved above its
    ``griddepcontrol.wait`` could overwrite what that kernel still reads."""
    before = lines("""
        mov.f32 %f1, 0f3F800000;
        griddepcontrol.wait;
        st.global.f32 [%rd1], %f1;
    """)
    assert schedule_stores(before) == before
