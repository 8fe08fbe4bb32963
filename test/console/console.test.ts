// The web console in a real browser (Debian's headless Chromium through playwright-core) against
// the real service on the LOCAL platform: real bubblewrap sandboxes, a real registry for pause and
// resume. One tab signs in and walks a sandbox's whole life through the pages, a terminal (xterm.js
// over the terminal websocket) among them; another owner's tab
// sees nothing of it; names and metadata written to attack the page render as text. A screenshot
// of each page goes to .artifacts/console/.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeConsole } from "../../console/build.ts";
import { auth, createReadySandbox, type LocalRuntime, startLocalRuntime, TOKENS } from "../support/local.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";
import { ARTIFACTS, launchBrowser, signIn, type TestBrowser } from "./browser.ts";

let registry: TestRegistry;
let rt: LocalRuntime;
let browser: TestBrowser;
let base = "";
let page: Page;
let id = "";

const XSS_FILE = "<img src=x onerror=window.__xss=1>";
const XSS_META = { note: "<script>window.__xss=2</script>", img: "<img src=x onerror=window.__xss=3>" };

beforeAll(async () => {
  writeConsole(); // what `npm ci` does: the service serves dist/console
  registry = await startRegistry();
  rt = await startLocalRuntime({ snapshots: { registry: registry.url } });
  base = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  browser = await launchBrowser();
  page = await browser.page();
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await rt?.close();
  await registry?.stop();
}, 120_000);

/** The phase the sandbox page shows, once it is `phase`. */
const phaseIs = (phase: string) =>
  page.waitForFunction(
    (p) => (globalThis as any).document.querySelector("[data-test=phase]")?.textContent === p,
    phase,
    {
      timeout: 120_000,
    },
  );

const fileListed = (name: string) =>
  page.waitForFunction(
    (n) =>
      [...(globalThis as any).document.querySelectorAll("[data-test=files] tr")].some(
        (tr: any) => tr.dataset.file === n,
      ),
    name,
  );

/** Nothing the page was fed ran: no flag set, no element made from a name, no CSP violation. */
async function expectNoScriptRan(p: Page): Promise<void> {
  const state = await p.evaluate(() => ({
    xss: (globalThis as any).__xss,
    imgs: (globalThis as any).document.querySelectorAll("img").length,
    scripts: [...(globalThis as any).document.querySelectorAll("script")].map((s: any) => s.getAttribute("src")),
    csp: (globalThis as any).__csp,
  }));
  // app.js, and xterm.js once a terminal was opened (it loads on first use): nothing else
  expect(state).toEqual({
    xss: undefined,
    imgs: 0,
    scripts: state.scripts.includes("xterm.js") ? ["app.js", "xterm.js"] : ["app.js"],
    csp: [],
  });
}

/** What the terminal shows (xterm's DOM renderer draws each row as text), once `ok` holds for it. */
const terminalShows = (text: string) =>
  page.waitForFunction(
    (t) => (globalThis as any).document.querySelector("[data-test=terminal] .xterm-rows")?.textContent?.includes(t),
    text,
    { timeout: 120_000 },
  );

describe("the console in Chromium, on the local platform", () => {
  it("refuses a wrong token with the API's message, then signs in to the list", async () => {
    await page.goto(`${base}/console/`);
    await browser.screenshot(page, "01-login");
    await page.fill("#token", "not-a-token");
    await page.click("button[type=submit]");
    await page.waitForFunction(
      () => (globalThis as any).document.querySelector("[data-test=login-error]")?.textContent !== "",
    );
    expect(await page.textContent("[data-test=login-error]")).toMatch(/^401 unauthenticated: /);
    await signIn(page, base, TOKENS.alice);
    expect(await page.textContent("[data-test=list-status]")).toMatch(/^0 sandboxes/);
  });

  it("creates a sandbox and shows it become Running", async () => {
    await page.fill("[data-create=size]", "nano");
    await page.fill("[data-create=metadata]", "purpose=console-test");
    await page.click("[data-action=create]");
    const row = await page.waitForSelector("[data-test=sandboxes] tbody tr[data-id]");
    id = (await row.getAttribute("data-id"))!;
    expect(id).toBeTruthy();
    await page.waitForFunction(
      (i) => (globalThis as any).document.querySelector(`tr[data-id="${i}"] td.phase`)?.textContent === "Running",
      id,
      { timeout: 120_000 },
    );
    expect(await page.textContent(`tr[data-id="${id}"]`)).toContain("purpose=console-test");
    await browser.screenshot(page, "02-list");
  });

  it("runs a command in the runner and shows its output while it runs", async () => {
    await page.click(`tr[data-id="${id}"] a`);
    await phaseIs("Running");
    await page.fill("[data-test=runner-input]", "echo first; sleep 3; echo second >&2; exit 3");
    await page.click("[data-action=run]");
    // the first line is on screen while the command still sleeps: streamed, not buffered
    const exitedWhenFirstShown = await page.waitForFunction(() => {
      const t = (globalThis as any).document.querySelector("[data-test=runner-output]")?.textContent ?? "";
      return t.includes("first\n") ? { exited: t.includes("[exit") } : false;
    });
    expect(await exitedWhenFirstShown.jsonValue()).toEqual({ exited: false });
    await page.waitForFunction(() =>
      (globalThis as any).document.querySelector("[data-test=runner-output]")?.textContent?.includes("[exit 3]"),
    );
    expect(await page.textContent("[data-test=runner-output] .stderr")).toBe("second\n");
  });

  it("opens a terminal, types into it and sees the output, then the exit; the token is not in the URL", async () => {
    const sockets: string[] = [];
    page.on("websocket", (ws) => sockets.push(ws.url()));
    await page.click("[data-action=terminal]");
    await page.waitForFunction(
      () => (globalThis as any).document.querySelector("[data-test=terminal-status]")?.textContent?.startsWith("open:"),
      undefined,
      { timeout: 120_000 },
    );
    await terminalShows("$ "); // the shell's prompt: typing waits for it, so the screen reads plainly
    await page.click("[data-test=terminal] .xterm-screen");
    await page.keyboard.type("echo hi-$((6*7))");
    await page.keyboard.press("Enter");
    await terminalShows("hi-42"); // only the command's output: the echoed line reads hi-$((6*7))
    await browser.screenshot(page, "03-terminal");
    // a narrower window refits the terminal; the new size reaches the shell as a resize frame
    const sizeShown = () => page.textContent("[data-test=terminal-status]");
    const before = await sizeShown();
    await page.setViewportSize({ width: 900, height: 900 });
    const after = await page.waitForFunction(
      (b) => {
        const t = (globalThis as any).document.querySelector("[data-test=terminal-status]")?.textContent ?? "";
        return t !== b && /^open: (\d+)×(\d+)$/.exec(t)?.slice(1);
      },
      before,
      { timeout: 120_000 },
    );
    const [cols, rows] = (await after.jsonValue()) as string[];
    await page.keyboard.type("stty size");
    await page.keyboard.press("Enter");
    await terminalShows(`${rows} ${cols}`);
    await page.setViewportSize({ width: 1360, height: 900 });
    await page.keyboard.type("exit 3");
    await page.keyboard.press("Enter");
    await terminalShows("[exited 3]");
    expect(await page.textContent("[data-test=terminal-status]")).toBe("exited 3");
    expect(sockets).toHaveLength(1);
    expect(new URL(sockets[0]).pathname).toBe(`/v1/sandboxes/${id}/terminal`);
    expect(sockets[0]).not.toContain(TOKENS.alice);
    expect(sockets[0]).not.toMatch(/bearer|token/i);
    // xterm's <style> elements carry the page's nonce: the strict CSP refused nothing
    await expectNoScriptRan(page);
  }, 300_000);

  it("uploads by the picker and by drag-and-drop; hostile names are listed as text", async () => {
    const hello = join(ARTIFACTS, "hello.txt");
    writeFileSync(hello, "hello from the console\n");
    await page.setInputFiles("[data-test=files-picker]", hello);
    await fileListed("hello.txt");
    await page.evaluate((name) => {
      const dt = new (globalThis as any).DataTransfer();
      dt.items.add(new (globalThis as any).File(["hostile\n"], name));
      (globalThis as any).document
        .querySelector("[data-test=files-drop]")!
        .dispatchEvent(new (globalThis as any).DragEvent("drop", { dataTransfer: dt }));
    }, XSS_FILE);
    await fileListed(XSS_FILE);
    expect(await page.textContent("[data-test=files]")).toContain(XSS_FILE);
    // the file really is in the sandbox, under exactly that name
    const res = await rt.app.inject({
      method: "GET",
      url: `/v1/sandboxes/${id}/files?path=${encodeURIComponent(`/workspace/${XSS_FILE}`)}`,
      headers: auth("alice"),
    });
    expect(res.statusCode).toBe(200);
    expect(res.rawPayload.toString("latin1")).toContain("hostile\n");
    await expectNoScriptRan(page);
    await browser.screenshot(page, "03-sandbox");
  });

  it("another owner's token sees an empty list and cannot open the sandbox", async () => {
    const bob = await browser.page();
    await signIn(bob, base, TOKENS.bob);
    await bob.waitForFunction(
      () => (globalThis as any).document.querySelector("[data-test=list-status]")?.textContent !== "",
    );
    expect(await bob.textContent("[data-test=list-status]")).toMatch(/^0 sandboxes/);
    expect(await bob.$$("[data-test=sandboxes] tbody tr[data-id]")).toHaveLength(0);
    await bob.goto(`${base}/console/#/sandbox/${id}`); // same tab: still signed in (hash change)
    await bob.waitForFunction(
      () => (globalThis as any).document.querySelector("[data-test=sandbox-error]")?.textContent !== "",
    );
    expect(await bob.textContent("[data-test=sandbox-error]")).toMatch(/^404 not_found: /);
    // the terminal's handshake is refused before the upgrade (the API's 404); the panel says so
    await bob.click("[data-action=terminal]");
    await bob.waitForFunction(
      () =>
        (globalThis as any).document.querySelector("[data-test=terminal-error]")?.textContent?.includes("not found"),
      undefined,
      { timeout: 120_000 },
    );
    expect(await bob.textContent("[data-test=terminal-error]")).toMatch(/^the service refused the terminal/);
    await browser.screenshot(bob, "04-other-owner");
    await bob.close();
  }, 240_000);

  it("pauses and resumes from the page; the uploaded file is still there", async () => {
    await page.click("[data-action=pause]");
    await phaseIs("Paused");
    await page.click("[data-action=resume]");
    await phaseIs("Running");
    await page.click("[data-action=list]");
    await fileListed("hello.txt");
    const events = await page.textContent("[data-test=events]");
    expect(events).toMatch(/pause done in \d+ ms/);
    expect(events).toMatch(/resume done in \d+ ms/);
  }, 240_000);

  it("renders metadata written as markup as text", async () => {
    const other = await createReadySandbox(rt, { size: "nano", metadata: XSS_META });
    await page.goto(`${base}/console/#/sandbox/${other}`);
    await page.waitForSelector("[data-test=metadata]");
    const shown = await page.textContent("[data-test=metadata]");
    expect(shown).toContain(`note=${XSS_META.note}`);
    expect(shown).toContain(`img=${XSS_META.img}`);
    await page.goto(`${base}/console/#/`);
    await page.waitForSelector(`tr[data-id="${other}"]`);
    expect(await page.textContent(`tr[data-id="${other}"]`)).toContain(XSS_META.note);
    await expectNoScriptRan(page);
    await browser.screenshot(page, "05-hostile-metadata");
    await rt.app.inject({ method: "DELETE", url: `/v1/sandboxes/${other}`, headers: auth("alice") });
  });

  it("shows the pool and budget page", async () => {
    await page.goto(`${base}/console/#/pool`);
    await page.waitForFunction(() =>
      (globalThis as any).document.querySelector("[data-test=budget]")?.textContent?.includes("CPU"),
    );
    expect(await page.textContent("[data-test=pools]")).toBeTruthy();
    // teams exist only where GET /v1/usage answers; on this service the panel says so
    const usage = await rt.app.inject({ method: "GET", url: "/v1/usage", headers: auth("alice") });
    if (usage.statusCode === 404) expect(await page.textContent("[data-test=teams]")).toContain("no teams");
    else expect(await page.$$("[data-test=teams] tbody tr")).not.toHaveLength(0);
    await browser.screenshot(page, "06-pool");
  });

  it("kills the sandbox from its page; the list no longer has it", async () => {
    await page.goto(`${base}/console/#/sandbox/${id}`);
    await phaseIs("Running");
    await page.click("[data-action=kill]");
    await page.waitForSelector("[data-test=sandboxes]");
    await page.waitForFunction((i) => !(globalThis as any).document.querySelector(`tr[data-id="${i}"]`), id);
    const res = await rt.app.inject({ method: "GET", url: `/v1/sandboxes/${id}`, headers: auth("alice") });
    expect(res.statusCode).toBe(404);
    await expectNoScriptRan(page);
  });
});
