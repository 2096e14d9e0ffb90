"""A compiled replay (estimator/replay_program.py) run at one cell count x0, and the range of cell counts over which
every choice the allocator made there is the same: over that range the buffer is the same affine function of x.

The allocator is ggml-alloc.c's ggml_dyn_tallocr, as estimator/graph_alloc.py's FreeList replays it: best fit among
the free blocks but the last (ties: the last found), else the end of the buffer; a freed block merged with the
neighbours it touches, else inserted in offset order; the buffer the highest end reached. Every offset and size is
carried as its value at x0 and its slope in x; each comparison the allocator makes is taken as at x0, and the range
narrowed to where the comparison comes out the same (`_Range`). Within the range the run is step for step the one
at x0, so its result there is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit.estimator.replay_program import ALLOC, FREE, Period, Program

OPEN_END = 1 << 62  # ggml_dyn_tallocr's last block: the open end of the buffer


@dataclass(frozen=True)
class Piece:
    """The buffer and the most bytes alive at once, a + b*x for every x in [lo, hi] (hi None: unbounded)."""

    lo: int
    hi: int | None
    size: tuple[int, int]
    live: tuple[int, int]

    def holds(self, x: int) -> bool:
        return self.lo <= x and (self.hi is None or x <= self.hi)

    def at(self, x: int) -> tuple[int, int]:
        return self.size[0] + self.size[1] * x, self.live[0] + self.live[1] * x


class _Range:
    """The cell counts x around x0 where every comparison so far comes out as it did at x0."""

    def __init__(self, x0: int, lo: int, hi: int | None) -> None:
        self.x0, self.lo, self.hi = x0, lo, hi

    def nonneg(self, d: int, s: int) -> None:
        """d + s*(x - x0) >= 0 stays true (it is at x0: d >= 0)."""
        if s > 0:
            self.lo = max(self.lo, self.x0 - d // s)
        elif s < 0:
            bound = self.x0 + d // -s
            self.hi = bound if self.hi is None else min(self.hi, bound)

    def negative(self, d: int, s: int) -> None:
        """d + s*(x - x0) < 0 stays true (it is at x0)."""
        self.nonneg(-d - 1, -s)

    def equal(self, d: int, s: int) -> bool:
        """Whether d + s*(x - x0) == 0 at x0, the range narrowed to keep that answer."""
        if d == 0:
            if s:
                self.lo = self.hi = self.x0
            return True
        if s and d % s == 0:  # zero at one other x: keep the side of x0
            root = self.x0 - d // s
            if root > self.x0:
                self.hi = root - 1 if self.hi is None else min(self.hi, root - 1)
            else:
                self.lo = max(self.lo, root + 1)
        return False


def run(program: Program, x0: int, lo: int, hi: int | None) -> Piece:
    """The program's replay at x0 cells, with the range within [lo, hi] where it is the same affine run."""
    rng = _Range(x0, lo, hi)
    values = [a + b * x0 for a, b in program.sizes]
    slopes = [b for _, b in program.sizes]
    # free blocks [offset, offset slope, size, size slope], in offset order, the last the open end
    blocks: list[list[int]] = [[0, 0, OPEN_END, 0]]
    n = len(values)
    offset = [0] * n
    offset_s = [0] * n
    born = [0] * n  # the op that placed each tensor
    alive: set[int] = set()  # the tensors placed and not freed
    top, top_s = 0, 0  # the buffer: the highest end reached
    live, live_s, most, most_s = 0, 0, 0, 0
    period = program.period
    boundary = period.start if period is not None else -1
    seen: tuple | None = None

    def free(ov: int, os_: int, sv: int, ss: int) -> None:  # FreeList.free
        for i, block in enumerate(blocks):
            if rng.equal(block[0] + block[2] - ov, block[1] + block[3] - os_):
                block[2] += sv
                block[3] += ss
                if i + 1 < len(blocks):
                    nxt = blocks[i + 1]
                    if rng.equal(block[0] + block[2] - nxt[0], block[1] + block[3] - nxt[1]):
                        block[2] += nxt[2]
                        block[3] += nxt[3]
                        del blocks[i + 1]
                return
            if rng.equal(ov + sv - block[0], os_ + ss - block[1]):
                block[0], block[1] = ov, os_
                block[2] += sv
                block[3] += ss
                if i > 0:
                    prev = blocks[i - 1]
                    if rng.equal(prev[0] + prev[2] - block[0], prev[1] + prev[3] - block[1]):
                        prev[2] += block[2]
                        prev[3] += block[3]
                        del blocks[i]
                return
        at = len(blocks)
        for i, block in enumerate(blocks):
            d, s = block[0] - ov, block[1] - os_
            if d >= 0:
                if s:
                    rng.nonneg(d, s)
                at = i
                break
            if s:
                rng.negative(d, s)
        blocks.insert(at, [ov, os_, sv, ss])

    ops = program.ops
    k = 0
    while k < len(ops):
        if k == boundary:
            assert period is not None
            state = _state(blocks, (top, top_s, live, live_s, most, most_s), alive, born, offset, offset_s, k, period)
            if state != seen:
                seen = state
                boundary = k + period.every if k + 2 * period.every <= period.end + period.every else -1
            else:  # a fixed point: every layer to the stretch's end does what the last one did
                layers = (period.end - period.start) // period.every + 1 - (k - period.start) // period.every
                for t in [t for t in alive if born[t] >= period.start]:
                    moved = t + layers * period.shift
                    offset[moved], offset_s[moved] = offset[t], offset_s[t]
                    born[moved] = born[t] + layers * period.every
                    alive.discard(t)
                    alive.add(moved)
                k += layers * period.every
                boundary = -1
                continue
        kind, t, src = ops[k]
        k += 1
        sv, ss = values[t], slopes[t]
        if kind == ALLOC:  # FreeList.alloc
            best = -1
            for i in range(len(blocks) - 1):
                block = blocks[i]
                d, s = block[2] - sv, block[3] - ss
                if d < 0:
                    if s:
                        rng.negative(d, s)
                    continue
                if s:
                    rng.nonneg(d, s)
                if best >= 0:
                    other = blocks[best]
                    d, s = other[2] - block[2], other[3] - block[3]
                    if d < 0:
                        if s:
                            rng.negative(d, s)
                        continue
                    if s:
                        rng.nonneg(d, s)
                best = i
            if best < 0:
                best = len(blocks) - 1
            block = blocks[best]
            ov, os_ = block[0], block[1]
            block[0] += sv
            block[1] += ss
            block[2] -= sv
            block[3] -= ss
            if rng.equal(block[2], block[3]):
                del blocks[best]
            offset[t], offset_s[t] = ov, os_
            born[t] = k - 1
            alive.add(t)
            d, s = ov + sv - top, os_ + ss - top_s
            if d >= 0:
                if s:
                    rng.nonneg(d, s)
                top, top_s = ov + sv, os_ + ss
            elif s:
                rng.negative(d, s)
            live += sv
            live_s += ss
            d, s = live - most, live_s - most_s
            if d >= 0:
                if s:
                    rng.nonneg(d, s)
                most, most_s = live, live_s
            elif s:
                rng.negative(d, s)
        elif kind == FREE:
            free(offset[t], offset_s[t], sv, ss)
            alive.discard(t)
            live -= sv
            live_s -= ss
        else:  # REUSE: the source's offset; ggml_gallocr_free_extra_space gives back its tail
            ov, os_ = offset[t], offset_s[t] = offset[src], offset_s[src]
            born[t] = k - 1
            alive.discard(src)
            alive.add(t)
            d, s = values[src] - sv, slopes[src] - ss
            if d > 0:
                if s:
                    rng.nonneg(d - 1, s)
                free(ov + sv, os_ + ss, d, s)
            elif s:
                rng.nonneg(-d, -s)
    for point in program.special:
        if point == x0:
            raise ValueError(f"the program does not hold at {x0} cells")
        rng.equal(x0 - point, 1)
    return Piece(rng.lo, rng.hi, (top - top_s * x0, top_s), (most - most_s * x0, most_s))


def _state(
    blocks: list[list[int]],
    totals: tuple[int, ...],
    alive: set[int],
    born: list[int],
    offset: list[int],
    offset_s: list[int],
    k: int,
    period: Period,
) -> tuple:
    """The allocator's state before op k, the tensors alive named by the op that placed them (counted back from k
    inside the repeating stretch, by slot before it): equal at two layer starts, the layers after do the same."""
    named = sorted(((0, born[t] - k) if born[t] >= period.start else (1, t), offset[t], offset_s[t]) for t in alive)
    return tuple(map(tuple, blocks)), totals, tuple(named)
