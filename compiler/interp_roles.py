"""Warp-specialized branches in the CPU interpreter: the arms of an ``if`` on the thread index run as concurrent
roles that hand over at barrier waits (TileLang's producer/consumer kernels written by hand).

In: the interpreter (``compiler.interp``) at an ``if`` of a per-thread kernel whose condition splits the block's
threads and whose arms wait on barriers (``T.barrier_wait`` on a ``T.alloc_barrier``); the arms as callables.
Out: every arm run to its end, as if the threads of each ran at the same time: an arm runs until a wait whose phase
has not completed, then the next arm that can go on runs (round robin), and the waiting one resumes once its phase
has completed; the ``if`` ends when all arms have (an arm may itself split again: the parent waits for its arms).
Guarantees: one arm runs at a time (the others are parked Python threads), so memory needs no locks and the run is
deterministic; each arm keeps its own interpreter state (lane mask, loop state, variables) across its waits; when
every unfinished arm waits and none of their phases can complete, KernelFault names each arm's wait (a deadlock on
the GPU); an error in one arm stops all and is raised from the ``if``.
"""

from __future__ import annotations

import threading

from tileagent.compiler.errors import KernelFault
from tileagent.compiler.interp_role_race import RoleRaces
from tileagent.compiler.ir.stmt import If
from tileagent.compiler.ir.visit import walk


def waiting_ifs(body, is_wait) -> frozenset:
    """The ids of the ``if`` statements of ``body`` whose arms hold a statement ``is_wait`` accepts: the ones whose arms
    run as concurrent roles (computed once per kernel: an ``if`` runs many times)."""
    return frozenset(id(s) for s in walk(body) if isinstance(s, If) and any(is_wait(x) for x in walk(
        s.then_body + s.else_body)))


class _Abort(BaseException):
    """Unwinds a parked arm when another one failed."""


class _Role:
    def __init__(self, name: str, parent):
        self.name, self.parent = name, parent
        self.until = None  # callable: True when the role may go on (None: runnable)
        self.waiting_for = ""  # what it waits for, for the deadlock message
        self.done, self.error, self.state, self.children = False, None, None, []


class Scheduler:
    """The roles of one thread block (created at the block's first warp-specialized ``if``)."""

    def __init__(self, interp):
        self.interp = interp
        self.cv = threading.Condition()
        self.root = _Role("the block", None)
        self.roles = [self.root]
        self.turn = self.root
        self.aborted = None
        self.races = RoleRaces()  # happens-before between the roles (compiler.interp_role_race)

    # -- what the interpreter calls -----------------------------------------------------------------------------
    def current(self) -> _Role:
        return self.turn

    def run_arms(self, arms, span) -> None:
        """Run ``arms`` ((name, callable) each) as concurrent roles; return when all have ended."""
        parent = self.turn
        state = self.interp.save_state()
        threads = []
        for name, fn in arms:
            role = _Role(name, parent)
            parent.children.append(role)
            self.roles.append(role)
            threads.append(threading.Thread(target=self._main, args=(role, fn, state), daemon=True))
            threads[-1].start()
        try:
            self.block(lambda: all(c.done for c in parent.children), "its branches to end", span)
        finally:
            if self.aborted is not None:  # the parked arms unwind (_Abort): let them end before the error goes on
                for t in threads:
                    t.join(timeout=10)
        errors = [c.error for c in parent.children if c.error is not None]
        if not errors:
            self.races.join(parent, parent.children)
        parent.children = []
        self.roles = [r for r in self.roles if not r.done]
        if errors:
            raise errors[0]

    def block(self, until, what: str, span) -> None:
        """Park the running role until ``until()`` holds, running the others meanwhile."""
        if until():
            return
        me = self.turn
        me.until, me.waiting_for, me.span = until, what, span
        me.state = self.interp.save_state()
        with self.cv:
            self._pass_on(me)
            while self.turn is not me and self.aborted is None:
                self.cv.wait()
            if self.aborted is not None and me is not self.root:
                raise _Abort()
        self.interp.restore_state(me.state)
        me.until = None
        if self.aborted is not None:
            raise self.aborted

    # -- internals ----------------------------------------------------------------------------------------------
    def _main(self, role: _Role, fn, state) -> None:
        with self.cv:
            while self.turn is not role and self.aborted is None:
                self.cv.wait()
        try:
            if self.aborted is not None:
                return
            self.interp.restore_state(state)
            fn()
        except _Abort:
            return
        except BaseException as e:  # noqa: BLE001 -- handed to the parent, raised from the ``if``
            role.error = e
            with self.cv:
                self.aborted = e
                self.turn = self.root
                self.cv.notify_all()
            return
        finally:
            role.done = True
        with self.cv:
            self._pass_on(role)

    def _pass_on(self, me: _Role) -> None:
        """Give the turn to the next role after ``me`` that can go on (``me`` itself last); none: a deadlock."""
        order = self.roles[self.roles.index(me) + 1:] + self.roles[:self.roles.index(me) + 1]
        for r in order:
            if not r.done and (r.until is None or r.until()):
                self.turn = r
                self.cv.notify_all()
                return
        waits = "; ".join(f"{r.name} waits for {r.waiting_for}" + (f" (line {r.span.line})"
                                                                  if getattr(r, "span", None) else "")
                          for r in self.roles if not r.done and r.children == [])
        self.aborted = KernelFault(f"the block's warp-specialized branches wait for each other forever (a deadlock "
                                   f"on the GPU): {waits}", getattr(me, "span", None))
        self.turn = self.root
        self.cv.notify_all()
