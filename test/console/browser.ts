// Test support: Debian's headless Chromium (/usr/bin/chromium, installed by
// scripts/install-debian.sh) driven by playwright-core, which downloads no browser. A missing
// chromium fails the test with the command that installs it; it is never skipped.
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { type BrowserContext, chromium, type Page } from "playwright-core";

export const CHROMIUM = "/usr/bin/chromium";
export const ARTIFACTS = resolve(import.meta.dirname, "../../.artifacts/console");

export const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export interface TestBrowser {
  context: BrowserContext;
  /** a new tab: the console's token lives in a tab's memory, so each tab starts signed out */
  page(): Promise<Page>;
  /** writes .artifacts/console/<name>.png */
  screenshot(page: Page, name: string): Promise<string>;
  close(): Promise<void>;
}

export function requireChromium(): void {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `${CHROMIUM} is missing: the console's browser tests need Debian's chromium. Install it with ` +
        "`bash scripts/install-debian.sh` (as root; npm test's pretest runs it) or `apt-get install -y chromium`.",
    );
}

export async function launchBrowser(): Promise<TestBrowser> {
  requireChromium();
  const profile = mkdtempSync(join(tmpdir(), "sbx-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1360, height: 900 },
    timeout: 120_000,
  });
  mkdirSync(ARTIFACTS, { recursive: true });
  return {
    context,
    async page() {
      const p = await context.newPage();
      p.setDefaultTimeout(90_000);
      // CSP violations are recorded where the test can read them (init scripts bypass the CSP)
      await p.addInitScript(() => {
        const w = globalThis as any;
        w.__csp = [];
        (globalThis as any).document.addEventListener("securitypolicyviolation", (e: any) =>
          w.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sample}`),
        );
      });
      return p;
    },
    async screenshot(page, name) {
      const path = join(ARTIFACTS, `${name}.png`);
      await page.screenshot({ path, fullPage: true });
      return path;
    },
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Signs in on a fresh tab with `token`; resolves when the list page shows. */
export async function signIn(page: Page, base: string, token: string): Promise<void> {
  await page.goto(`${base}/console/`);
  await page.fill("#token", token);
  await page.click("button[type=submit]");
  await page.waitForSelector("[data-test=sandboxes]");
}
