// The console's speed, measured in the browser's own Performance API (paint timing, and the
// console's own performance.measure around each list update, which includes the forced layout):
// a console page's first load (target: first meaningful paint <= 500 ms on loopback) and an
// update of the sandbox list showing 1,000 sandboxes (target <= 100 ms). The numbers are printed,
// not asserted (a shared 2-core machine can stretch anything); what is asserted is what makes the
// update fast (only the rows in view are in the DOM) and that what is drawn is right.
//
// The 1,000 sandboxes are a route-level stub IN THE BROWSER (Playwright's route interception of
// GET /v1/sandboxes): a thousand real local sandboxes would need a thousand bubblewrap trees on
// this machine. Everything else (the page, its assets, the sign-in) comes from the real service.
import type { Page, Route } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeConsole } from "../../console/build.ts";
import { type LocalRuntime, startLocalRuntime, TOKENS } from "../support/local.ts";
import { launchBrowser, signIn, type TestBrowser } from "./browser.ts";

let rt: LocalRuntime;
let browser: TestBrowser;
let base = "";

beforeAll(async () => {
  writeConsole();
  rt = await startLocalRuntime();
  base = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  browser = await launchBrowser();
}, 180_000);
afterAll(async () => {
  await browser?.close();
  await rt?.close();
}, 60_000);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** First contentful paint and the console's "meaningful" mark of a fresh load, ms from navigation start. */
async function firstLoad(page: Page): Promise<{ fcp: number; meaningful: number }> {
  await page.goto(`${base}/console/`);
  await page.waitForSelector("#token");
  return page.evaluate(() => {
    const perf = (globalThis as any).performance;
    const fcp = perf.getEntriesByName("first-contentful-paint")[0]?.startTime ?? Number.NaN;
    const mark = perf.getEntriesByName("sbx:meaningful")[0]?.startTime ?? Number.NaN;
    // meaningful = the later of the first paint and the page's own content being in place
    return { fcp, meaningful: Math.max(fcp, mark) };
  });
}

const PHASES = ["Running", "Running", "Running", "Paused", "Pending"];

/** n sandboxes as GET /v1/sandboxes answers; each round changes a fifth of the phases and every row's metadata. */
function fakeList(n: number, round: number) {
  const t0 = Date.parse("2026-12-05T08:00:00Z");
  return {
    sandboxes: Array.from({ length: n }, (_, i) => ({
      id: `sbx-perf-${String(i).padStart(4, "0")}`,
      owner: "alice",
      profile: i % 3 ? "base" : "python",
      size: "nano",
      phase: PHASES[(i + (i % 5 === round % 5 ? round : 0)) % PHASES.length],
      ready: true,
      createdAt: new Date(t0 + i * 1000).toISOString(),
      expiresAt: new Date(t0 + 3_600_000 + i * 1000).toISOString(),
      metadata: { team: `t${i % 7}`, run: String(round) },
      cpuRequestMillis: 100,
      memoryRequestBytes: 134217728,
    })),
  };
}

interface DrawnRow {
  id: string;
  phase: string;
  meta: string;
}

async function drawnRows(page: Page): Promise<DrawnRow[]> {
  return page.evaluate(() =>
    [...(globalThis as any).document.querySelectorAll("[data-test=sandboxes] tr[data-id]")].map((tr: any) => ({
      id: tr.dataset.id,
      phase: tr.querySelector("td.phase").textContent,
      meta: tr.children[6].textContent,
    })),
  );
}

/** every drawn row shows the phase and metadata of one and the same poll (fakeList's round) */
function expectOnePoll(rows: DrawnRow[]): void {
  const round = Number(/run=(\d+)/.exec(rows[0].meta)?.[1]);
  expect(Number.isInteger(round)).toBe(true);
  for (const r of rows) {
    const want = fakeList(1000, round).sandboxes[Number(r.id.slice("sbx-perf-".length))];
    expect(r).toEqual({ id: want.id, phase: want.phase, meta: `team=${want.metadata.team}run=${round}` });
  }
}

describe("console performance in Chromium", () => {
  it("first meaningful paint of a console page on loopback", async () => {
    const page = await browser.page();
    const runs: { fcp: number; meaningful: number }[] = [];
    for (let i = 0; i < 5; i++) runs.push(await firstLoad(page));
    const fmp = median(runs.map((r) => r.meaningful));
    console.log(
      `console first load (5 loads, /console/ on loopback): FCP median ${median(runs.map((r) => r.fcp)).toFixed(0)} ms, ` +
        `first meaningful paint median ${fmp.toFixed(0)} ms, each ${runs.map((r) => r.meaningful.toFixed(0)).join("/")} ms (target <= 500)`,
    );
    // the number is the result (printed); what is asserted is that each load reached its sign-in form
    for (const r of runs) expect(Number.isFinite(r.meaningful)).toBe(true);
    await page.close();
  });

  it("an update of the sandbox list with 1,000 sandboxes", async () => {
    const page = await browser.page();
    let round = 0;
    await page.route(`${base}/v1/sandboxes`, (route: Route) => {
      if (route.request().method() !== "GET") return route.continue();
      return route.fulfill({
        status: 200,
        contentType: "application/json",
        body: JSON.stringify(fakeList(1000, round++)),
      });
    });
    await signIn(page, base, TOKENS.alice);
    await page.selectOption("[data-test=page-size]", "1000");
    await page.waitForSelector("[data-test=sandboxes][data-rows='1000'] tr[data-id]");
    const before = await page.evaluate(
      () => (globalThis as any).performance.getEntriesByName("sbx:list-update").length,
    );
    // four polls (every 2 s), each changing a fifth of the rows' phases and every row's metadata
    await page.waitForFunction(
      (n) => (globalThis as any).performance.getEntriesByName("sbx:list-update").length >= n + 4,
      before,
      { timeout: 60_000 },
    );
    const all: number[] = await page.evaluate(() =>
      (globalThis as any).performance.getEntriesByName("sbx:list-update").map((e: any) => e.duration),
    );
    const build = all[before - 1];
    const updates = all.slice(before);
    console.log(
      `sandbox list, a 1,000-sandbox page: first render ${build.toFixed(1)} ms; updates (each poll) median ${median(updates).toFixed(1)} ms, ` +
        `max ${Math.max(...updates).toFixed(1)} ms over ${updates.length} (target <= 100; performance.measure, includes layout)`,
    );
    await browser.screenshot(page, "07-list-1000");

    // what makes it fast: only the rows in view are in the DOM, yet the page holds all 1,000
    const drawn = await drawnRows(page);
    expect(await page.getAttribute("[data-test=sandboxes]", "data-rows")).toBe("1000");
    expect(drawn.length).toBeGreaterThan(10);
    expect(drawn.length).toBeLessThan(100);
    // and what is drawn is right: newest first, every cell from one poll's answer
    expect(drawn[0].id).toBe("sbx-perf-0999");
    expectOnePoll(drawn);

    // scrolled to the end, the oldest sandbox is drawn, with the same poll's values
    await page.evaluate(() => {
      const el = (globalThis as any).document.querySelector(".list-scroll");
      el.scrollTop = el.scrollHeight;
    });
    await page.waitForSelector("tr[data-id='sbx-perf-0000']");
    const end = await drawnRows(page);
    expect(end.at(-1)?.id).toBe("sbx-perf-0000");
    expectOnePoll(end);
    await browser.screenshot(page, "08-list-1000-scrolled");
    await page.close();
  }, 120_000);
});
