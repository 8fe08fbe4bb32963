// The list's row window (console/src/listView.ts planWindow): which rows of a page are drawn for a
// scroll position, and that the space above and below keeps the scrollbar true to the whole page.
import { describe, expect, it } from "vitest";
import { planWindow } from "../../console/src/listView.ts";

describe("planWindow", () => {
  it.each([
    // count, scrollTop, viewport, rowHeight, overscan -> start, end
    { count: 1000, top: 0, view: 600, row: 40, over: 10, start: 0, end: 26 },
    { count: 1000, top: 4000, view: 600, row: 40, over: 10, start: 90, end: 126 },
    { count: 1000, top: 39_400, view: 600, row: 40, over: 10, start: 975, end: 1000 },
    { count: 1000, top: 1e9, view: 600, row: 40, over: 10, start: 1000, end: 1000 },
    { count: 5, top: 0, view: 600, row: 40, over: 10, start: 0, end: 5 },
    { count: 0, top: 0, view: 600, row: 40, over: 10, start: 0, end: 0 },
    { count: 100, top: -50, view: 0, row: 0, over: 2, start: 0, end: 3 },
  ])("$count rows, scrolled to $top in $view px of $row px rows: draws [$start, $end)", (c) => {
    const w = planWindow(c.count, c.top, c.view, c.row, c.over);
    expect([w.start, w.end]).toEqual([c.start, c.end]);
  });

  it("drawn rows plus the space above and below always add up to the whole page", () => {
    for (let top = 0; top <= 41_000; top += 997) {
      const w = planWindow(1000, top, 700, 41);
      expect(w.padTop + (w.end - w.start) * 41 + w.padBottom).toBe(1000 * 41);
      expect(w.end - w.start).toBeLessThanOrEqual(Math.ceil(700 / 41) + 1 + 20);
      if (w.end > w.start) expect(top / 41).toBeGreaterThanOrEqual(w.start);
    }
  });
});
